// SPDX-License-Identifier: Apache-2.0
// CrashEnv: the fault-injecting Env of the crash tests (leveldb's idea). It
// numbers the durable operations of the datalayer (file create / append /
// fsync, rename, remove, rmdir, directory fsync, spool write / flush /
// commit, step and ingest commits) that match its filter and, at matching
// operation number `crash_at`, ends the process with _exit(kCrashExitCode):
// no destructors, no flushes, like kill -9. An append chosen as the crash
// point first writes half of its bytes (a torn write).
//
// An operation is described as "<kind> <path>" ("append
// run/checkpoints/ckpt-0000000004/rank-00001.safetensors.tmp", "rename
// ....tmp -> ...", "step.commit run/index.sqlite"); the filter is a
// substring of that ("" matches everything), so a test picks "the 3rd
// operation on the files of checkpoint 4" as ("ckpt-0000000004", 3).
//
// RankEnv is how the runtime's ranks get their Env: Env::Default(), or,
// when the variable MAESTRO_CRASH_AT is set, a CrashEnv for the rank it
// names (tests only, docs/testing.md "Crash points with real workers"):
//   MAESTRO_CRASH_AT="RANK:N[:FILTER]"  world rank RANK dies at its N-th
//                                       operation matching FILTER.
//
// May call: datalayer/env, POSIX. Thread safety: the count is atomic (a
// rank's background checkpoint writer and its step loop share the Env);
// which of two concurrent operations is "the N-th" follows their order.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "datalayer/env.h"

namespace maestro::datalayer {

inline constexpr int kCrashExitCode = 99;
inline constexpr char kCrashAtVariable[] = "MAESTRO_CRASH_AT";

class CrashEnv final : public Env {
 public:
  // crash_at <= 0 only counts.
  explicit CrashEnv(long crash_at, std::string filter = "") : crash_at_(crash_at), filter_(std::move(filter)) {}
  long ops() const { return ops_.load(); }

  Status BeforeDurableOp(DurableOp op, std::string_view target) override;
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;

 private:
  class File;
  // Whether the operation "<kind> <target>" is the crash point (counting it
  // when it matches the filter).
  bool IsCrashPoint(std::string_view kind, std::string_view target);
  void Count(std::string_view kind, std::string_view target);

  long crash_at_;
  std::string filter_;
  std::atomic<long> ops_{0};
};

// What MAESTRO_CRASH_AT asks of world rank `rank`: crash_at (0: nothing)
// and the filter. InvalidArgument naming the variable when it is malformed.
struct CrashAt {
  long n = 0;
  std::string filter;
};
StatusOr<CrashAt> CrashAtForRank(const char* value, int rank);

// The Env of world rank `rank` (see the top): Env::Default() unless
// MAESTRO_CRASH_AT names this rank. A malformed value is a fatal error
// naming it (a test that meant to crash must not silently pass).
Env* RankEnv(int rank);

}  // namespace maestro::datalayer
