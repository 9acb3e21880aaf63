// SPDX-License-Identifier: Apache-2.0
#include "base/read_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace maestro {

StatusOr<std::string> ReadSmallFile(const std::string& path, int64_t max_bytes, const std::string& what) {
  // O_NONBLOCK: opening a FIFO with no writer must not wait for one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return Status::NotFound(fmt::format("{}: cannot open {} ({})", path, what, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IOError(fmt::format("{}: cannot stat {} ({})", path, what, std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(fmt::format("{}: is a directory; {} must be a file", path, what));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(
        fmt::format("{}: is not a regular file (a FIFO, device or socket); {} must be a regular file", path, what));
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return Status::InvalidArgument(fmt::format("{}: {} is {} bytes, more than the {} bytes allowed", path, what,
                                               static_cast<int64_t>(st.st_size), max_bytes));
  }
  std::string text;
  text.resize(static_cast<size_t>(st.st_size) + 1);
  size_t have = 0;
  for (;;) {
    if (have == text.size()) {
      if (static_cast<int64_t>(have) > max_bytes) break;
      text.resize(std::min<size_t>(text.size() * 2 + 1, static_cast<size_t>(max_bytes) + 1));
    }
    const ssize_t got = ::read(fd, &text[have], text.size() - have);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      return Status::IOError(fmt::format("{}: cannot read {} ({})", path, what, std::strerror(err)));
    }
    if (got == 0) break;
    have += static_cast<size_t>(got);
  }
  ::close(fd);
  if (static_cast<int64_t>(have) > max_bytes) {
    return Status::InvalidArgument(
        fmt::format("{}: {} grew past the {} bytes allowed while it was read", path, what, max_bytes));
  }
  text.resize(have);
  return text;
}

}  // namespace maestro
