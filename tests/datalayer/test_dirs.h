// SPDX-License-Identifier: Apache-2.0
// Scratch directories for the datalayer tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/fixtures/test_paths.h"

namespace maestro::datalayer::testing {

// An empty directory under the build's test-tmp (or /dev/shm when
// `fast_fsync`, where fsync is free: crash tests that only simulate process
// death do not need a real disk).
inline std::string FreshDir(const std::string& name, bool fast_fsync = false) {
  namespace fs = std::filesystem;
  fs::path base = MAESTRO_TEST_TMP;
  if (fast_fsync && fs::is_directory("/dev/shm")) base = "/dev/shm";
  const fs::path dir = base / ("maestro-datalayer-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

inline void RemoveDir(const std::string& dir) {
  std::filesystem::remove_all(dir);
}

}  // namespace maestro::datalayer::testing
