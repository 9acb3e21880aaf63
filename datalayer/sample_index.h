// SPDX-License-Identifier: Apache-2.0
// SampleIndex: the SQLite sample index of a training run (schema in
// docs/datalayer.md, version kIndexSchemaVersion).
//
// Owns: the samples of a dataset manifest (id, payload location, per-modality
// token counts, so the scheduler never reads payloads); the epoch permutations
// (fixed by the run's seed alone); the global batch of every step; and the
// step log + consumption log that make consumption exactly-once across crashes:
// a step's samples are marked consumed in the SAME transaction that records
// the step as done and names the (already durable) checkpoint holding its
// weight update. Resume = that checkpoint + the next step.
//
// May call: SQLite (via SqliteDb), nlohmann-json, Env (to announce commits).
// Thread safety: one thread at a time (one SQLite connection).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "datalayer/env.h"
#include "datalayer/sqlite_db.h"

namespace maestro::datalayer {

inline constexpr int kIndexSchemaVersion = 1;

struct IngestStats {
  int64_t samples = 0;
  std::vector<std::string> modalities;  // in column order
  bool already_ingested = false;        // the same manifest was ingested before
};

// One sample as the scheduler sees it.
struct SampleInfo {
  int64_t sample_id = 0;
  std::string location;                   // opaque to Maestro: "shard-07.tar:1234"
  std::map<std::string, int64_t> tokens;  // modality -> tokens (only those present)
};

// A completed optimizer step, as recorded in the step log.
struct StepRecord {
  int64_t step = 0;                 // global step, 0-based across epochs
  std::vector<int64_t> sample_ids;  // the global batch, in batch order
  std::string schedule_json;        // the schedule used (opaque JSON text)
};

struct GlobalBatch {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  std::vector<int64_t> sample_ids;  // in batch order
};

// Where a run stands: the last committed step and its checkpoint.
struct CommitPoint {
  int64_t last_step = -1;        // -1: nothing committed yet
  int64_t checkpoint_step = -1;  // the checkpoint that includes last_step
  std::string checkpoint_file;   // relative to the run's checkpoint dir
  int64_t next_step() const { return last_step + 1; }
};

class SampleIndex {
 public:
  // Opens or creates the index at `path`. A file written with another schema
  // version is refused with FailedPrecondition naming both versions.
  static StatusOr<std::unique_ptr<SampleIndex>> Open(const std::string& path, Env* env = Env::Default());
  // A second connection to the index at `path` (opened, schema checked),
  // for a thread that commits while another reads and spools through the
  // first (TrainingRun's commit off the step loop): CommitSteps,
  // LastCommit, CommittedCheckpoints. No samples are loaded; StepsPerEpoch()
  // is `steps_per_epoch` (the first connection's).
  static StatusOr<std::unique_ptr<SampleIndex>> OpenForCommits(const std::string& path, int64_t steps_per_epoch,
                                                               Env* env = Env::Default());

  // Ingests a JSONL manifest, one sample per line:
  //   {"id": 17, "location": "shard-0003.tar:1234", "tokens": {"text": 412, "image": 576}}
  // The whole ingest is one transaction (all or nothing). Ingesting the same
  // manifest (path and size) again is a no-op; a different one is refused.
  StatusOr<IngestStats> IngestManifest(const std::string& manifest_path);

  // Fixes the run's seed and global batch size the first time; later calls
  // must pass the same values (changing them mid-run would break
  // exactly-once), else FailedPrecondition.
  Status ConfigureRun(uint64_t seed, int64_t global_batch_size);

  int64_t NumSamples() const { return static_cast<int64_t>(sample_ids_.size()); }
  // ceil(NumSamples / global_batch_size); the last batch of an epoch may be short.
  int64_t StepsPerEpoch() const;
  // The sample ids of `epoch` in training order (a Fisher-Yates shuffle of
  // the sorted ids driven by splitmix64(seed, epoch); platform independent).
  std::vector<int64_t> EpochPermutation(int64_t epoch) const;
  // REQUIRES: ConfigureRun. The global batch of a global step.
  StatusOr<GlobalBatch> BatchForStep(int64_t step);
  StatusOr<std::vector<SampleInfo>> GetSamples(const std::vector<int64_t>& sample_ids);

  // The last committed step and its checkpoint.
  StatusOr<CommitPoint> LastCommit();
  // In ONE transaction: records `steps` (consecutive, the first one right
  // after the last committed step) as done, marks their samples consumed
  // (a sample consumed twice in an epoch aborts the transaction), and records
  // checkpoint `checkpoint_step` (file `checkpoint_file`, already durable) as
  // the one holding their weight updates.
  Status CommitSteps(const std::vector<StepRecord>& steps, int64_t checkpoint_step, const std::string& checkpoint_file);
  // The step log's record of a committed step (its batch and schedule);
  // nullopt when the step is not committed.
  StatusOr<std::optional<StepRecord>> CommittedStep(int64_t step);
  // Checkpoint steps recorded in the step log, oldest first.
  StatusOr<std::vector<int64_t>> CommittedCheckpoints();
  // How many samples of `epoch` are marked consumed.
  StatusOr<int64_t> ConsumedCount(int64_t epoch);

  SqliteDb& db() { return *db_; }

 private:
  SampleIndex(std::unique_ptr<SqliteDb> db, Env* env) : db_(std::move(db)), env_(env) {}
  Status CreateOrCheckSchema();
  Status LoadSamples();
  StatusOr<std::optional<std::string>> GetMeta(const std::string& key);
  Status SetMeta(const std::string& key, const std::string& value);
  // IngestManifest's steps, inside its transaction (the caller rolls back on
  // an error): every line of `text` into samples (a modality first seen adds
  // its column), counted in stats->samples.
  Status InsertManifestSamples(const std::string& text, const std::string& manifest_path, IngestStats* stats);
  // The INSERT of one sample row: a tokens_<name> column per modality.
  Status PrepareSampleInsert(SqliteStmt* insert);
  // A modality first seen in the manifest: its tokens_<name> column and its
  // modalities row (bit = its index), appended to modalities_.
  Status AddModality(const std::string& name);

  std::unique_ptr<SqliteDb> db_;
  Env* env_;
  std::vector<int64_t> sample_ids_;  // sorted
  std::vector<std::string> modalities_;
  uint64_t seed_ = 0;
  int64_t batch_size_ = 0;
  int64_t commit_steps_per_epoch_ = 0;                                 // OpenForCommits
  mutable std::map<int64_t, std::vector<int64_t>> permutation_cache_;  // epoch -> ids
};

}  // namespace maestro::datalayer
