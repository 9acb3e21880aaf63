// SPDX-License-Identifier: Apache-2.0
// CheckpointStore: the checkpoints of a run, in two formats.
//   Format 2 (sharded, what the runtime writes; datalayer/sharded_checkpoint.h):
//   a directory ckpt-<step>/ whose rank files every rank wrote itself; Write()
//   adds metadata.json (the pieces of every global tensor, the index position,
//   the runtime's counters) through tmp -> fsync -> rename -> fsync of the
//   directory: the directory is a checkpoint once that rename is durable.
//   Format 1 (ckpt-<step>.mckpt, read for runs written before): per-section
//   model and optimizer state (the bytes come from the runtime, opaque here),
//   written atomically together with the index position and the RNG states.
//
// Atomicity: Write() goes ckpt-<step>.mckpt.tmp -> Append -> fsync -> rename
// to ckpt-<step>.mckpt -> fsync of the directory, all through Env. The file
// ends with a trailer holding the CRC-32C of everything before it, so a torn
// or corrupt file is refused by Read() (Corruption) and never loaded. A
// checkpoint only counts once the SampleIndex step log names it (see
// TrainingRun); files newer than that are ignored and removed on resume.
// File format in docs/datalayer.md.
//
// May call: Env, nlohmann-json. Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "datalayer/env.h"
#include "datalayer/sharded_checkpoint.h"

namespace maestro::datalayer {

inline constexpr int kCheckpointFormatVersion = 1;

// The state of one section (its model and optimizer, serialized by the runtime).
struct SectionState {
  std::string model;      // bytes
  std::string optimizer;  // bytes
};

struct CheckpointData {
  int64_t step = -1;                              // the last step whose weight update it includes
  int64_t epoch = 0;                              // epoch of that step
  int64_t next_step = 0;                          // index position: the global step to run next
  std::map<std::string, SectionState> sections;   // section name -> state
  std::map<std::string, std::string> rng_states;  // "torch.cpu", "data", ... -> bytes
  // Format 2: the pieces of every global tensor, in the rank files of the
  // checkpoint's directory (`sections` empty); the runtime's scalars (an
  // AdamW step count per component). Read() sets `dir` (the directory).
  std::vector<SliceRecord> slices;
  std::map<std::string, int64_t> counters;
  std::string dir;
  bool sharded() const { return !slices.empty(); }
};

class CheckpointStore {
 public:
  // `dir` is created if missing. keep_last >= 1.
  static StatusOr<std::unique_ptr<CheckpointStore>> Open(const std::string& dir, int keep_last,
                                                         Env* env = Env::Default());
  static std::string FileName(int64_t step);  // format 1: "ckpt-0000000042.mckpt"
  // Format 2: the directory the ranks write step `step`'s files into
  // (dir()/ShardedCheckpointDirName(step)).
  std::string ShardedDir(int64_t step) const;

  // Writes `data` atomically; returns the file name (relative to dir()):
  // format 1 a .mckpt file; format 2 (data.sharded()) the metadata of the
  // directory ShardedDir(data.step), whose rank files must be durable
  // already; the slices must tile their tensors (CheckSlicesTile).
  StatusOr<std::string> Write(const CheckpointData& data);
  // Reads and verifies a checkpoint (name relative to dir()): a .mckpt file,
  // or a format-2 directory's metadata (the pieces' bytes are verified when
  // read, ShardReader).
  StatusOr<CheckpointData> Read(const std::string& file_name);
  // Steps of the complete checkpoints present (not verified), ascending: a
  // .mckpt file, or a directory holding its metadata.
  StatusOr<std::vector<int64_t>> ListSteps();
  // Removes temporary files, and every checkpoint (file, or directory with
  // its files, committed or not) whose step is not in `keep` (the committed
  // ones to retain) and not after `spare_after`. Removal goes through Env.
  // A resume removes everything but `keep`; a commit spares the checkpoints
  // after its own (the next one may be in the writing: an asynchronous
  // save's commit runs while the ranks write the next).
  Status RemoveAllBut(const std::vector<int64_t>& keep, int64_t spare_after = INT64_MAX);

  const std::string& dir() const { return dir_; }
  int keep_last() const { return keep_last_; }

 private:
  StatusOr<CheckpointData> ReadSharded(const std::string& name);
  CheckpointStore(std::string dir, int keep_last, Env* env) : dir_(std::move(dir)), keep_last_(keep_last), env_(env) {}
  std::string dir_;
  int keep_last_;
  Env* env_;
};

}  // namespace maestro::datalayer
