// SPDX-License-Identifier: Apache-2.0
#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace maestro {
namespace {
std::atomic<int> g_rank{-1};

LogLevel ParseLevel() {
  const char* env = std::getenv("MAESTRO_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warn") == 0) return LogLevel::kWarn;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}
}  // namespace

void SetLogRank(int rank) {
  g_rank.store(rank);
}

LogLevel CurrentLogLevel() {
  static const LogLevel level = ParseLevel();
  return level;
}

void LogLine(LogLevel level, const std::string& message) {
  const int rank = g_rank.load();
  std::string line = rank >= 0 ? fmt::format("[maestro rank {} {}] {}\n", rank, LevelName(level), message)
                               : fmt::format("[maestro {}] {}\n", LevelName(level), message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace maestro
