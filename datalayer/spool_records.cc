// SPDX-License-Identifier: Apache-2.0
#include "datalayer/spool_records.h"

#include "base/checks.h"
#include "datalayer/sqlite_db.h"

namespace maestro::datalayer {

StatusOr<CommittedExtent> ReadCommittedExtent(const std::string& records_path) {
  MAESTRO_ASSIGN_OR_RETURN(auto db, SqliteDb::Open(records_path));
  MAESTRO_ASSIGN_OR_RETURN(auto stmt, db->Prepare("SELECT committed_values, committed_rows FROM spools"));
  MAESTRO_ASSIGN_OR_RETURN(const bool row, stmt.Step());
  CommittedExtent out;
  if (row) {
    out.values = stmt.Int(0);
    out.rows = stmt.Int(1);
  }
  return out;
}

}  // namespace maestro::datalayer
