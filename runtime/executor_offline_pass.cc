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

// Test-only fault injection (tests/runtime/kd_rows_run_test.cc, a kill -9
// in the pass): MAESTRO_TEST_KILL_IN_OFFLINE_PASS="<world rank>:<n>" makes
// that rank commit its spools after its n-th micro-batch of the pass and
// then SIGKILL itself, as a node lost right after a commit would be.
bool KillHereIfTestAsks(int world_rank, int micro_batches) {
  const char* v = std::getenv("MAESTRO_TEST_KILL_IN_OFFLINE_PASS");
  if (v == nullptr) return false;
  int rank = -1, at = -1;
  return std::sscanf(v, "%d:%d", &rank, &at) == 2 && rank == world_rank && at == micro_batches;
}

}  // namespace

// A resumed run (a checkpoint exists) is past the pass. A start killed during
// it finds the rows it committed (replica 0 sealed the dead start's files at
// Open; Setup indexed them) and computes only the others.
Status RankLoop::RunOfflineSpoolPass() {
  // Component spools exist on fused sections only (plan::Validate refuses
  // an offline plan that is not one fused section).
  if (!plan_.offline_spool_pass || resumed_ || component_spools_.empty()) return Status::Ok();
  const auto t0 = Clock::now();
  const auto& section = plan_.sections[static_cast<size_t>(section_)];
  const int64_t replicas = std::max(1, section.config.dp);
  const int64_t micro_batch = std::max(1, section.config.micro_batch);
  const int64_t samples = samples_->NumSamples(datasets::Split::kTrain);
  fused_->SetEpoch(0);
  int64_t rows = 0, computed = 0;
  int micro_batches = 0;
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
    if (KillHereIfTestAsks(place_.world_rank, micro_batches)) {
      MAESTRO_RETURN_IF_ERROR(CommitSpools());
      std::fprintf(stderr, "[rank %d] MAESTRO_TEST_KILL_IN_OFFLINE_PASS: killed after %d micro-batches\n",
                   place_.world_rank, micro_batches);
      std::fflush(stderr);
      ::raise(SIGKILL);
    }
    if (micro_batches % kCommitEveryMicroBatches == 0) return CommitSpools();
    return Status::Ok();
  };
  for (int64_t id = replica_; id < samples; id += replicas) {
    ids.push_back(id);
    if (static_cast<int64_t>(ids.size()) == micro_batch) MAESTRO_RETURN_IF_ERROR(flush());
  }
  MAESTRO_RETURN_IF_ERROR(flush());
  // Every replica's rows readable by every other before the first step.
  for (auto& [name, spool] : component_spools_) MAESTRO_RETURN_IF_ERROR(spool->Seal());
  MAESTRO_RETURN_IF_ERROR(RefreshSpoolsTogether());
  const double seconds = SecondsSince(t0);
  Log(LogLevel::kInfo, "section '{}' dp {}: offline spool pass: {} rows ({} computed, {} already spooled) in {:.1f} s",
      section.name, replica_, rows, computed, rows - computed, seconds);
  if (Rank0()) reporter_.ReportOfflinePass(seconds, rows);
  return Status::Ok();
}

}  // namespace maestro::runtime::executor_internal
