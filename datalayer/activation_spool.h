// SPDX-License-Identifier: Apache-2.0
// ActivationSpool: the outputs of a forward-only section (teacher hidden
// states or top-k logits, frozen-encoder embeddings), one row per sample,
// kept in an HDF5 file so that they are computed once and reused after a
// resume and, when the spec allows it, in later epochs. Layout in
// docs/datalayer.md; `h5dump` reads it.
//
// Durability: Put() stages rows in memory (rows of 64 KiB or more go to the
// file at once, uncommitted); Commit() (called at step
// boundaries, or when a preempted step is abandoned) writes them into the
// chunked, extensible /values dataset, flushes and fsyncs the file, and only
// then records the rows as complete in SQLite (table spool_rows). A row is
// only ever read if its commit record exists, its values lie inside the
// dataset, and their CRC-32C matches the record; otherwise Get() reports a
// miss (counted in stats().corrupt_rows) and the caller recomputes it.
// Rows written after the last commit are garbage and get overwritten.
// A torn file is never fatal: Open() first moves the file's end of
// allocation past every chunk a kill -9 inside H5Fflush may have left named
// beyond it (the superblock is written last), then checks attributes,
// extents (against SQLite), every committed chunk of /values and the
// committed /rows, and moves a file that fails to <path>.corrupt (records
// dropped, fresh file). A fresh file is made under <path>.new and renamed.
// An HDF5 failure later is a miss in Get() and, in Put()/Commit(), moves the
// file aside the same way and goes on with a fresh one (staged rows are
// dropped and recomputed). Only this spool's records change; the sample
// index's state is never touched.
//
// Buffers: a row is a typed, C-contiguous buffer of shape `dims` (e.g.
// (T, K) top-k logits for T tokens, or (P, H) patch embeddings) whose element
// type is the spool's dtype. Rows of one spool may differ in shape.
//
// May call: HDF5 C API, SqliteDb (shared with the SampleIndex), Env.
// Thread safety: one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "datalayer/env.h"
#include "datalayer/spool_values_read.h"
#include "datalayer/sqlite_db.h"

namespace maestro::datalayer {

enum class DType { kF32, kF16, kBF16, kI32, kI64, kU8 };
const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);
StatusOr<DType> ParseDType(const std::string& name);

struct SpoolOptions {
  std::string name;  // unique in the run: "teacher.topk_logits"
  DType dtype = DType::kF32;
  int64_t budget_bytes = int64_t{1} << 34;  // the file never grows past this
  bool reuse_across_epochs = false;         // reuse rows computed in an earlier epoch
  int64_t chunk_bytes = int64_t{4} << 20;   // HDF5 chunk of /values (4 MiB: fwrite speed)
};

// A row handed to Put(): `data` holds product(dims) elements of the dtype.
struct RowView {
  std::vector<int64_t> dims;
  const void* data = nullptr;
  size_t bytes = 0;
};

struct SpoolRow {
  int64_t sample_id = 0;
  int64_t epoch = 0;  // the epoch that computed it
  std::vector<int64_t> dims;
  std::vector<std::byte> data;
};

struct SpoolStats {
  int64_t hits = 0;          // Get() served a verified row
  int64_t misses = 0;        // no usable row (absent, other epoch, or corrupt)
  int64_t corrupt_rows = 0;  // rows whose checksum or extent failed
  int64_t rows_put = 0;
  int64_t rows_over_budget = 0;  // Put() refused: the budget is spent
  int64_t committed_rows = 0;
  int64_t committed_bytes = 0;  // bytes of /values in use
};

class ActivationSpool {
 public:
  // Opens or creates the spool file `h5_path` and its commit records in `db`
  // (which must outlive the spool). A file that HDF5 cannot open or that
  // fails the checks above (torn by a crash) is moved aside to
  // <path>.corrupt and its records dropped: every row is then recomputed.
  static StatusOr<std::unique_ptr<ActivationSpool>> Open(const std::string& h5_path, SqliteDb* db,
                                                         const SpoolOptions& options, Env* env = Env::Default());
  // A sealed spool file (its writer committed, closed it and wrote no more:
  // runtime/output_spool.h), opened read-only by any process: its first
  // `committed_rows` rows of /rows are its records (a sample written twice:
  // the later row), checked by their CRC-32C at Get(). Put() and Commit()
  // fail. A file HDF5 cannot open, or whose /rows do not read, is an error
  // (the caller skips it: its rows are computed again).
  static StatusOr<std::unique_ptr<ActivationSpool>> OpenSealed(const std::string& h5_path, const SpoolOptions& options,
                                                               int64_t committed_rows);
  ~ActivationSpool();
  ActivationSpool(const ActivationSpool&) = delete;
  ActivationSpool& operator=(const ActivationSpool&) = delete;

  // The committed, verified row of `sample_id`, usable in `epoch`; nullopt
  // when there is none (the caller computes it and Put()s it).
  StatusOr<std::optional<SpoolRow>> Get(int64_t sample_id, int64_t epoch);
  // Get into `row`, reusing its buffer (a reader of many rows of one size
  // then allocates, faults in and zeroes no memory a row: maestro-bench
  // datalayer's reads); false (and `row` unspecified) when there is none.
  StatusOr<bool> GetInto(int64_t sample_id, int64_t epoch, SpoolRow* row);
  // Stages a row. Returns false (and stores nothing) when it would exceed the
  // budget. REQUIRES: row.bytes == product(dims) * DTypeSize(dtype).
  StatusOr<bool> Put(int64_t sample_id, int64_t epoch, const RowView& row);
  // Makes every staged row durable and complete (write, flush+fsync, SQLite
  // commit record). A no-op when nothing is staged.
  Status Commit();
  // Rows staged but not committed.
  int64_t pending_rows() const { return static_cast<int64_t>(pending_.size()); }
  const SpoolStats& stats() const { return stats_; }
  const std::string& path() const { return path_; }
  // The samples with a committed row (a sealed file's index).
  std::vector<int64_t> CommittedSamples() const;
  int64_t committed_table_rows() const { return committed_table_rows_; }
  // Commits, then closes the file (a later Get misses, Put fails).
  Status Close();

 private:
  struct RowRecord {
    int64_t epoch = 0;
    int64_t offset = 0;  // in elements of /values
    int64_t count = 0;
    std::vector<int64_t> dims;
    uint32_t crc = 0;
  };
  struct PendingRow {
    int64_t sample_id;
    RowRecord record;
  };
  ActivationSpool(std::string path, SqliteDb* db, SpoolOptions options, Env* env);
  Status OpenOrCreateFile();
  // Reads what a later call would need from a just-opened file: attributes,
  // extents (against the SQLite records), every committed chunk of /values
  // and the committed /rows. Returns why the file is torn, or "" when it is
  // usable; an error only for a dtype mismatch or an SQLite failure.
  StatusOr<std::string> CheckOpenedFile();
  // After a kill -9 inside H5Fflush the superblock's end of allocation can
  // lag behind chunks the file's metadata already names: moves it past
  // them (docs/datalayer.md). Returns why the file cannot be trusted, or "".
  StatusOr<std::string> RepairEndOfAllocation();
  // fsync of the open file.
  Status SyncFile(const std::string& path);
  // Moves the file aside to <path>.corrupt, drops its commit records and
  // every staged row, and creates a fresh file.
  Status StartFresh(const std::string& why);
  StatusOr<bool> PutOnce(int64_t sample_id, int64_t epoch, const RowView& row);
  Status WriteValuesToFile(int64_t offset, const void* data, int64_t elems);
  Status LoadRecords();
  Status WriteStaged();
  // Writes `elems` values at element `offset` of /values, extending it.
  Status WriteValues(int64_t offset, const void* data, int64_t elems);
  Status AppendRowTable();
  void CloseFile();

  std::string path_;
  SqliteDb* db_;
  SpoolOptions options_;
  Env* env_;
  int64_t file_ = -1;    // hid_t
  int64_t values_ = -1;  // hid_t of /values
  int64_t rows_ = -1;    // hid_t of /rows
  std::unordered_map<int64_t, RowRecord> committed_;
  std::vector<PendingRow> pending_;
  std::vector<std::byte> staged_;  // values of pending rows not yet in the file
  int64_t staged_offset_ = 0;      // element offset of staged_[0] in /values
  int64_t end_values_ = 0;         // next free element (committed + pending)
  int64_t committed_values_ = 0;
  int64_t committed_table_rows_ = 0;
  SpoolStats stats_;
  bool torn_ = false;       // an HDF5 call on the file failed: StartFresh() it
  bool read_only_ = false;  // OpenSealed
  // GetInto's direct reads of the open file: made at the first read, dropped with the file.
  std::optional<DirectValues> direct_;
};

}  // namespace maestro::datalayer
