// SPDX-License-Identifier: Apache-2.0
#include "base/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "base/checks.h"

namespace maestro {

Status CreateDirectories(const std::string& dir) {
  if (dir.empty()) return Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError(fmt::format("cannot create directory '{}': {}", dir, ec.message()));
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::IOError(fmt::format("cannot create directory '{}': a file of that name is in the way", dir));
  }
  return Status::Ok();
}

int WriteFully(int fd, std::string_view data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return 0;
}

namespace {

// Writes `pieces` to "<path>.tmp": created, written, chmod `mode`, fsync'd,
// closed. A failure removes it and names `path`, the step and the reason.
Status WriteTemporary(const std::string& path, const std::vector<std::string_view>& pieces, mode_t mode) {
  const std::string tmp = path + ".tmp";
  auto fail = [&](const char* what, int err) {
    ::unlink(tmp.c_str());
    return Status::IOError(fmt::format("cannot write '{}': {} '{}': {}", path, what, tmp, std::strerror(err)));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return Status::IOError(
        fmt::format("cannot write '{}': create '{}': {} (does the directory exist and is it "
                    "writable?)",
                    path, tmp, std::strerror(errno)));
  }
  for (std::string_view piece : pieces) {
    if (const int err = WriteFully(fd, piece); err != 0) {
      ::close(fd);
      return fail("write to", err);
    }
  }
  if (::fchmod(fd, mode) != 0) {
    const int err = errno;
    ::close(fd);
    return fail("chmod", err);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return fail("fsync", err);
  }
  if (::close(fd) != 0) return fail("close", errno);
  return Status::Ok();
}

// A directory at `path` cannot be replaced by a file (rename says EISDIR):
// found before anything is written.
Status CheckReplaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return Status::IOError(fmt::format("cannot write '{}': {}: a directory of that name is in the way; move it", path,
                                       std::strerror(EISDIR)));
  }
  return Status::Ok();
}

}  // namespace

Status WriteFileAtomically(const std::string& path, std::string_view contents, mode_t mode) {
  return WriteFileAtomically(path, std::vector<std::string_view>{contents}, mode);
}

Status WriteFileAtomically(const std::string& path, const std::vector<std::string_view>& pieces, mode_t mode) {
  MAESTRO_RETURN_IF_ERROR(WriteTemporary(path, pieces, mode));
  if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink((path + ".tmp").c_str());
    return Status::IOError(fmt::format("cannot write '{}': rename '{}.tmp': {}", path, path, std::strerror(err)));
  }
  return Status::Ok();
}

Status WriteFilesAtomically(const std::vector<FileToWrite>& files) {
  for (const FileToWrite& f : files) MAESTRO_RETURN_IF_ERROR(CheckReplaceable(f.path));
  for (size_t i = 0; i < files.size(); ++i) {
    Status s = WriteTemporary(files[i].path, {files[i].contents}, files[i].mode);
    if (!s.ok()) {
      for (size_t k = 0; k < i; ++k) ::unlink((files[k].path + ".tmp").c_str());
      return s;
    }
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (std::rename((files[i].path + ".tmp").c_str(), files[i].path.c_str()) != 0) {
      const int err = errno;
      for (size_t k = i; k < files.size(); ++k) ::unlink((files[k].path + ".tmp").c_str());
      return Status::IOError(fmt::format("cannot write '{}': rename '{}.tmp': {}{}", files[i].path, files[i].path,
                                         std::strerror(err),
                                         i == 0 ? "" : " (the files before it were replaced already)"));
    }
  }
  return Status::Ok();
}

}  // namespace maestro
