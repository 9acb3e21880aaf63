// SPDX-License-Identifier: Apache-2.0
#include "datalayer/versions.h"

#include <H5Cpp.h>
#include <fmt/format.h>
#include <sqlite3.h>

namespace maestro::datalayer {
std::string SqliteVersion() {
  return sqlite3_libversion();
}
std::string Hdf5Version() {
  unsigned major = 0, minor = 0, release = 0;
  H5::H5Library::getLibVersion(major, minor, release);
  return fmt::format("{}.{}.{}", major, minor, release);
}
}  // namespace maestro::datalayer
