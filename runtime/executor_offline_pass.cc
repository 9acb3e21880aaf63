// SPDX-License-Identifier: Apache-2.0
// RankLoop's offline spool pass (runtime/rank_loop.h; issue #41 item 4): the
// job's "offline" alternative (compiler/job_pricing.h) runs the frozen
// components of a fused plan alone over the train split before training
// starts, on every rank, each replica its share; training then reads every
// row from the spools and never runs them (docs/datalayer.md, "The
// runtime's spools").
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "runtime/rank_loop.h"

namespace maestro::runtime::executor_internal {

namespace {

// Rows are committed (made durable, so a kill loses at most these) every
// this many micro-batches of the pass.
constexpr int kCommitEveryMicroBatches = 16;

// Test-only fault injection (tests/runtime/kd_rows_run_test.cc):
// `variable`="<world rank>:<n>" asks that rank to act after its n-th
// micro-batch of the pass: MAESTRO_TEST_KILL_IN_OFFLINE_PASS (commit its
// spools, then SIGKILL itself, as a node lost right after a commit would
// be), MAESTRO_TEST_SIGNAL_IN_OFFLINE_PASS (send itself SIGUSR1, as a
// preemption would: the real handler and the real stop follow).
bool TestAsksHere(const char* variable, int world_rank, int micro_batches) {
  const char* v = std::getenv(variable);
  if (v == nullptr) return false;
  int rank = -1, at = -1;
  return std::sscanf(v, "%d:%d", &rank, &at) == 2 && rank == world_rank && at == micro_batches;
}

// The micro-batches of the pass every replica runs: the last replica's share
// (ids id % replicas == replicas - 1, the fewest) in micro-batches. Every
// rank agrees on a stop after each of these, so all make the same
// collective calls.
int64_t MicroBatchesEveryReplicaRuns(int64_t samples, int64_t replicas, int64_t micro_batch) {
  const int64_t fewest = samples / replicas;  // ceil((samples - (replicas - 1)) / replicas)
  return (fewest + micro_batch - 1) / micro_batch;
}

}  // namespace

// Whether any rank has been signalled (a preemption); every rank calls it
// at the same points of the pass.
StatusOr<bool> RankLoop::AnyRankSignalled() {
  std::vector<double> flag = {signal_->requested() ? 1.0 : 0.0};
  MAESTRO_RETURN_IF_ERROR(Wait(comms_.world().AllReduce(launcher::CpuBuffer(flag), launcher::ReduceOp::kSum)));
  return flag[0] > 0;
}

// A resumed run (a checkpoint exists) is past the pass. A start killed during
// it finds the rows it committed (replica 0 sealed the dead start's files at
// Open; Setup indexed them) and computes only the others. A preemption
// signal is answered after the micro-batch in progress (every rank agrees
// after each micro-batch every replica runs, and once more at the end):
// the rows are committed and the start ends before its first step, to be
// run again like a killed one (docs/datalayer.md, "The offline pass").
StatusOr<bool> RankLoop::RunOfflineSpoolPass() {
  // Component spools exist on fused sections only (plan::Validate refuses
  // an offline plan that is not one fused section).
  if (!plan_.offline_spool_pass || resumed_ || component_spools_.empty()) return false;
  const auto t0 = Clock::now();
  const auto& section = plan_.sections[static_cast<size_t>(section_)];
  const int64_t replicas = std::max(1, section.config.dp);
  const int64_t micro_batch = std::max(1, section.config.micro_batch);
  const int64_t samples = samples_->NumSamples(datasets::Split::kTrain);
  const int64_t agreed_micro_batches = MicroBatchesEveryReplicaRuns(samples, replicas, micro_batch);
  fused_->SetEpoch(0);
  int64_t rows = 0, computed = 0;
  int micro_batches = 0;
  bool stop = false;
  std::vector<int64_t> ids;
  const auto flush = [&]() -> Status {
    if (ids.empty()) return Status::Ok();
    MAESTRO_ASSIGN_OR_RETURN(const auto data,
                             LoadMicroBatch(*samples_, ids, datasets::Split::kTrain, MediaPartsOf(section)));
    MAESTRO_ASSIGN_OR_RETURN(const int64_t n, fused_->FillSpools(data));
    computed += n;
    rows += static_cast<int64_t>(ids.size());
    ids.clear();
    ++micro_batches;
    if (TestAsksHere("MAESTRO_TEST_KILL_IN_OFFLINE_PASS", place_.world_rank, micro_batches)) {
      MAESTRO_RETURN_IF_ERROR(CommitSpools());
      std::fprintf(stderr, "[rank %d] MAESTRO_TEST_KILL_IN_OFFLINE_PASS: killed after %d micro-batches\n",
                   place_.world_rank, micro_batches);
      std::fflush(stderr);
      ::raise(SIGKILL);
    }
    if (TestAsksHere("MAESTRO_TEST_SIGNAL_IN_OFFLINE_PASS", place_.world_rank, micro_batches)) ::raise(SIGUSR1);
    if (micro_batches <= agreed_micro_batches) {
      MAESTRO_ASSIGN_OR_RETURN(stop, AnyRankSignalled());
    }
    if (stop || micro_batches % kCommitEveryMicroBatches == 0) return CommitSpools();
    return Status::Ok();
  };
  for (int64_t id = replica_; id < samples && !stop; id += replicas) {
    ids.push_back(id);
    if (static_cast<int64_t>(ids.size()) == micro_batch) MAESTRO_RETURN_IF_ERROR(flush());
  }
  // A replica's last, partial micro-batch (its flush may be the agreed one
  // that stops). Then, unless every rank stopped there, one more agreement:
  // a signal in a replica's last, unagreed micro-batch; the switch to
  // training is a safe point too.
  if (!stop) MAESTRO_RETURN_IF_ERROR(flush());
  if (!stop) {
    MAESTRO_ASSIGN_OR_RETURN(stop, AnyRankSignalled());
    if (stop) MAESTRO_RETURN_IF_ERROR(CommitSpools());
  }
  if (stop) {
    Log(LogLevel::kInfo, "section '{}' dp {}: offline spool pass stopped by a preemption signal: {} rows committed",
        section.name, replica_, rows);
    if (Rank0()) {
      std::fprintf(stderr,
                   "maestro: stopped during the offline spool pass (its rows committed); run again to resume it\n");
    }
    return true;
  }
  // Every replica's rows readable by every other before the first step.
  for (auto& [name, spool] : component_spools_) MAESTRO_RETURN_IF_ERROR(spool->Seal());
  MAESTRO_RETURN_IF_ERROR(RefreshSpoolsTogether());
  const double seconds = SecondsSince(t0);
  if (place_.coords.tp == 0) {  // a replica's line (its TP peers compute the same rows)
    Log(LogLevel::kInfo,
        "section '{}' dp {}: offline spool pass: {} rows ({} computed, {} already spooled) in {:.1f} s", section.name,
        replica_, rows, computed, rows - computed, seconds);
  }
  if (Rank0()) reporter_.ReportOfflinePass(seconds, rows);
  return false;
}

}  // namespace maestro::runtime::executor_internal
