// SPDX-License-Identifier: Apache-2.0
// Minimal leveled logging to stderr: "[maestro rank 3 INFO] message".
// The level comes from MAESTRO_LOG_LEVEL (debug, info, warn, error; default
// info). The rank prefix is set once by the worker after bootstrap.
// Thread safety: Log() may be called from any thread (one write per line).
#pragma once

#include <fmt/format.h>

#include <string>

namespace maestro {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogRank(int rank);
LogLevel CurrentLogLevel();
void LogLine(LogLevel level, const std::string& message);

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (level < CurrentLogLevel()) return;
  LogLine(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace maestro
