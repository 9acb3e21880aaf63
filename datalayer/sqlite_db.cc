// SPDX-License-Identifier: Apache-2.0
#include "datalayer/sqlite_db.h"

#include "datalayer/checks.h"

namespace maestro::datalayer {

SqliteStmt& SqliteStmt::operator=(SqliteStmt&& o) noexcept {
  if (this != &o) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    db_ = o.db_;
    stmt_ = o.stmt_;
    o.stmt_ = nullptr;
  }
  return *this;
}

SqliteStmt::~SqliteStmt() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

StatusOr<bool> SqliteStmt::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  const std::string sql = sqlite3_sql(stmt_) ? sqlite3_sql(stmt_) : "";
  sqlite3_reset(stmt_);
  return Status(rc == SQLITE_CONSTRAINT ? StatusCode::kFailedPrecondition : StatusCode::kIOError,
                ::maestro::internal::ForeignErrorMessage("SQLite", "sqlite3_step", rc, internal::SqliteDetail(db_, sql),
                                                         __FILE__, __LINE__));
}

Status SqliteStmt::Run() {
  for (;;) {
    auto row = Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
  }
  Reset();
  return Status::Ok();
}

std::string SqliteStmt::Text(int col) const {
  const auto* p = sqlite3_column_text(stmt_, col);
  if (p == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path) {
  sqlite3* raw = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  std::unique_ptr<SqliteDb> db(new SqliteDb(raw, path));
  if (rc != SQLITE_OK) {
    return Status::IOError(::maestro::internal::ForeignErrorMessage(
        "SQLite", "sqlite3_open_v2", rc,
        internal::SqliteDetail(raw, "cannot open " + path + "; check that its directory exists and is writable"),
        __FILE__, __LINE__));
  }
  sqlite3_busy_timeout(raw, 10000);
  // journal_mode returns a row; Exec ignores rows.
  MAESTRO_RETURN_IF_ERROR(db->Exec("PRAGMA journal_mode=WAL"));
  MAESTRO_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous=FULL"));
  MAESTRO_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys=ON"));
  return db;
}

SqliteDb::~SqliteDb() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Status SqliteDb::Exec(const std::string& sql) {
  char* err = nullptr;
  const int exec_rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);  // sqlite3_errmsg(db_) holds the same message
  SQLITE_CHECK(db_, exec_rc, sql);
  return Status::Ok();
}

StatusOr<SqliteStmt> SqliteDb::Prepare(const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  SQLITE_CHECK(db_, sqlite3_prepare_v2(db_, sql.c_str(), static_cast<int>(sql.size()), &stmt, nullptr), sql);
  return SqliteStmt(db_, stmt);
}

void SqliteDb::RollbackQuietly() {
  if (InTransaction()) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

}  // namespace maestro::datalayer
