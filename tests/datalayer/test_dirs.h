// SPDX-License-Identifier: Apache-2.0
// Scratch directories for the datalayer tests (tests/fixtures/scratch.h).
#pragma once

#include <filesystem>
#include <string>

#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::datalayer::testing {

// An empty directory under the build's test-tmp (or /dev/shm when
// `fast_fsync`, where fsync is free: crash tests that only simulate process
// death do not need a real disk).
inline std::string FreshDir(const std::string& name, bool fast_fsync = false) {
  std::filesystem::path base = MAESTRO_TEST_TMP;
  if (fast_fsync && std::filesystem::is_directory("/dev/shm")) base = "/dev/shm";
  return fixtures::ScratchDir("maestro-datalayer-", name, base);
}

inline void RemoveDir(const std::string& dir) {
  std::filesystem::remove_all(dir);
}

}  // namespace maestro::datalayer::testing
