// SPDX-License-Identifier: Apache-2.0
// Env: the one seam through which the datalayer performs every durable
// operation of its own (leveldb's Env idea), so tests can inject a crash or a
// torn write between any two of them.
//
// Two kinds of operations go through it:
//   * plain files (checkpoints): NewWritableFile / Append / Sync / Close,
//     RenameFile, RemoveFile, SyncDir;
//   * operations done by a library on its own file (an HDF5 spool write or
//     flush, an SQLite transaction commit): the caller announces each one with
//     BeforeDurableOp(op, target) right before doing it. A refusing Env (non-OK
//     Status) makes the caller skip the operation and return the Status.
// The fault-injection Env in tests/datalayer counts these operations and
// "crashes" (_exit, no destructors, no flushing) at operation k.
//
// May call: POSIX. Thread safety: PosixEnv is stateless and thread-safe; a
// WritableFile is used by one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace maestro::datalayer {

// The durable operations that a library (HDF5, SQLite) performs for us.
enum class DurableOp {
  kSpoolWrite,    // H5Dwrite of staged spool values into the HDF5 file
  kSpoolFlush,    // H5Fflush + fsync of the spool file
  kSpoolCommit,   // SQLite transaction: commit records of spool rows
  kStepCommit,    // SQLite transaction: step done + consumption log
  kIngestCommit,  // SQLite transaction: manifest ingest
};
const char* DurableOpName(DurableOp op);

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::string_view data) = 0;
  virtual Status Sync() = 0;   // fsync: data and metadata on stable storage
  virtual Status Close() = 0;  // idempotent; the destructor closes too
};

class Env {
 public:
  virtual ~Env() = default;
  // The process-wide POSIX Env (stateless). Never null.
  static Env* Default();

  virtual Status BeforeDurableOp(DurableOp op, std::string_view target);
  // Creates or truncates `path`.
  virtual StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path);
  // Atomic replace (rename(2)).
  virtual Status RenameFile(const std::string& from, const std::string& to);
  virtual Status RemoveFile(const std::string& path);
  // rmdir(2) of an empty directory; a missing one is fine.
  virtual Status RemoveDir(const std::string& path);
  // fsync of a directory, so that a rename or create in it is durable.
  virtual Status SyncDir(const std::string& dir);

  // Read-only helpers (not counted as writes).
  virtual StatusOr<std::string> ReadFile(const std::string& path);
  virtual StatusOr<std::vector<std::string>> ListDir(const std::string& dir);  // names only
  virtual bool FileExists(const std::string& path);
  virtual Status CreateDirs(const std::string& dir);  // mkdir -p
};

}  // namespace maestro::datalayer
