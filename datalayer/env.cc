// SPDX-License-Identifier: Apache-2.0
#include "datalayer/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/files.h"

namespace maestro::datalayer {
namespace {

Status Errno(const std::string& what, const std::string& path, const char* fix = nullptr) {
  std::string msg = fmt::format("{} {}: {}", what, path, std::strerror(errno));
  if (fix != nullptr) msg += fmt::format(" ({})", fix);
  return Status::IOError(msg);
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override { (void)Close(); }
  Status Append(std::string_view data) override {
    if (const int err = WriteFully(fd_, data); err != 0) {
      errno = err;
      return Errno("write", path_, "is the disk full?");
    }
    return Status::Ok();
  }
  Status Sync() override {
    if (::fsync(fd_) != 0) return Errno("fsync", path_);
    return Status::Ok();
  }
  Status Close() override {
    if (fd_ < 0) return Status::Ok();
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return Errno("close", path_);
    return Status::Ok();
  }

 private:
  std::string path_;
  int fd_;
};

}  // namespace

const char* DurableOpName(DurableOp op) {
  switch (op) {
    case DurableOp::kSpoolWrite: return "spool.write";
    case DurableOp::kSpoolFlush: return "spool.flush";
    case DurableOp::kSpoolCommit: return "spool.commit";
    case DurableOp::kStepCommit: return "step.commit";
    case DurableOp::kIngestCommit: return "ingest.commit";
  }
  return "?";
}

Env* Env::Default() {
  static Env env;
  return &env;
}

Status Env::BeforeDurableOp(DurableOp /*op*/, std::string_view /*target*/) {
  return Status::Ok();
}

StatusOr<std::unique_ptr<WritableFile>> Env::NewWritableFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", path, "check that the directory exists and is writable");
  return std::unique_ptr<WritableFile>(std::make_unique<PosixWritableFile>(path, fd));
}

Status Env::RenameFile(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) return Errno("rename to " + to, from);
  return Status::Ok();
}

Status Env::RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("unlink", path);
  return Status::Ok();
}

Status Env::RemoveDir(const std::string& path) {
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return Errno("rmdir", path);
  return Status::Ok();
}

Status Env::SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Errno("fsync directory", dir);
  return Status::Ok();
}

StatusOr<std::string> Env::ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(fmt::format("{}: no such file", path));
    return Errno("open", path);
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = Errno("read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

StatusOr<std::vector<std::string>> Env::ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Errno("opendir", dir);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

bool Env::FileExists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

Status Env::CreateDirs(const std::string& dir) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir", partial);
  }
  return Status::Ok();
}

}  // namespace maestro::datalayer
