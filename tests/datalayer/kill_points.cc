// SPDX-License-Identifier: Apache-2.0
#include "tests/datalayer/kill_points.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace maestro::datalayer::testing {
namespace {

std::atomic<bool> g_armed{false};
KillPoint g_point = KillPoint::kSpoolWrite;
int64_t g_n = 0;
int64_t g_seen = 0;

bool IsSpoolFile(int fd) {
  char link[64];
  char target[4096];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, target, sizeof target - 1);
  if (n < 3) return false;
  return std::memcmp(target + n - 3, ".h5", 3) == 0;
}

void MaybeKill(int fd, off_t offset) {
  if (!g_armed.load(std::memory_order_relaxed) || !IsSpoolFile(fd)) return;
  if (g_point == KillPoint::kSuperblockWrite && offset != 0) return;
  if (++g_seen == g_n) ::kill(::getpid(), SIGKILL);
}

}  // namespace

std::optional<KillAt> ParseKillAt(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return std::nullopt;
  const std::string what = text.substr(0, colon);
  KillAt at;
  if (what == "spool-write") {
    at.point = KillPoint::kSpoolWrite;
  } else if (what == "superblock") {
    at.point = KillPoint::kSuperblockWrite;
  } else {
    return std::nullopt;
  }
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str() + colon + 1, &end, 10);
  if (end == text.c_str() + colon + 1 || *end != '\0' || n < 1) return std::nullopt;
  at.n = n;
  return at;
}

void ArmKillPoint(const KillAt& at) {
  g_point = at.point;
  g_n = at.n;
  g_seen = 0;
  g_armed.store(true);
}

}  // namespace maestro::datalayer::testing

// libhdf5's sec2 driver writes through pwrite(2); this definition in the
// executable takes its calls (and everyone else's) and forwards them.
extern "C" ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset) {
  maestro::datalayer::testing::MaybeKill(fd, offset);
  return static_cast<ssize_t>(::syscall(SYS_pwrite64, fd, buf, count, offset));
}
