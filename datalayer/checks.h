// SPDX-License-Identifier: Apache-2.0
// Error checks for the datalayer's foreign APIs (SQLite, HDF5), on top of
// base/checks.h MAESTRO_FOREIGN_CHECK: every failed call becomes a Status that
// names the call, the file it was working on and the likely fix.
//
//   SQLITE_CHECK(db, expr, detail)  expr returns an SQLite result code; OK,
//                                   DONE and ROW pass. `db` is the sqlite3*
//                                   (its errmsg and file name go in the Status).
//   H5_CHECK(expr, detail)          expr returns herr_t / hid_t; < 0 fails.
//                                   The HDF5 error stack's innermost message
//                                   goes in the Status.
// Thread safety: stateless; the HDF5 message helper reads the calling thread's
// HDF5 error stack.
#pragma once

#include <sqlite3.h>

#include <string>

#include "base/checks.h"

namespace maestro::datalayer::internal {
// "<sqlite errmsg> (database <file>): <detail>".
std::string SqliteDetail(sqlite3* db, const std::string& detail);
// "<innermost HDF5 error message>: <detail>".
std::string Hdf5Detail(const std::string& detail);
// Turns off HDF5's automatic printing of error stacks (we report them as
// Status instead). Idempotent; called by every datalayer entry point that
// touches HDF5.
void SilenceHdf5Errors();
}  // namespace maestro::datalayer::internal

#define SQLITE_CHECK(db, expr, detail)                                                              \
  MAESTRO_FOREIGN_CHECK("SQLite", expr, (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW), \
                        ::maestro::StatusCode::kIOError, ::maestro::datalayer::internal::SqliteDetail(db, detail))

#define H5_CHECK(expr, detail)                                                    \
  MAESTRO_FOREIGN_CHECK("HDF5", expr, (rc >= 0), ::maestro::StatusCode::kIOError, \
                        ::maestro::datalayer::internal::Hdf5Detail(detail))
