// SPDX-License-Identifier: Apache-2.0
// What a spool file's commit records (datalayer/activation_spool.h: the
// `spools` table of its records database) say is committed, read from the
// database alone: for tests and benchmarks that check a spool's bytes
// against what the compiler priced, without opening the HDF5 file.
// May call: datalayer/sqlite_db, base. Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace maestro::datalayer {

struct CommittedExtent {
  int64_t values = 0;  // elements of /values committed (of the spool's dtype)
  int64_t rows = 0;    // rows committed
};

// The committed extent of the spool whose records are at `records_path`
// (a `.sqlite` beside its `.h5`); {0, 0} when it has committed nothing.
StatusOr<CommittedExtent> ReadCommittedExtent(const std::string& records_path);

}  // namespace maestro::datalayer
