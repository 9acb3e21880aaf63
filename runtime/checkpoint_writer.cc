// SPDX-License-Identifier: Apache-2.0
#include "runtime/checkpoint_writer.h"

#include <fmt/format.h>

#include <chrono>
#include <utility>

namespace maestro::runtime {

BackgroundRankWrite::BackgroundRankWrite(RankPieces pieces, std::string dir, int rank, int64_t step,
                                         datalayer::Env* env)
    : pieces_(std::move(pieces)),
      dir_(std::move(dir)),
      rank_(rank),
      step_(step),
      counters_(pieces_.counters),
      result_(Status::Internal("the background checkpoint write has not run")) {
  for (const auto& s : pieces_.slices) bytes_ += static_cast<int64_t>(s.bytes.size());
  thread_ = std::thread([this, env] {
    const auto t0 = std::chrono::steady_clock::now();
    result_ = datalayer::WriteRankShard(dir_, rank_, pieces_.slices, env);
    write_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done_.store(true, std::memory_order_release);
  });
}

BackgroundRankWrite::~BackgroundRankWrite() {
  if (thread_.joinable()) thread_.join();
}

StatusOr<std::vector<datalayer::SliceRecord>> BackgroundRankWrite::Wait() {
  if (thread_.joinable()) thread_.join();
  pieces_ = RankPieces{};  // the snapshot's memory goes back
  return std::move(result_);
}

BackgroundCommit::BackgroundCommit(datalayer::TrainingRun* run, datalayer::TrainingRun::TakenCheckpoint taken)
    : step_(taken.state.step), taken_(std::move(taken)) {
  thread_ = std::thread([this, run] { result_ = run->CommitTaken(taken_); });
}

BackgroundCommit::~BackgroundCommit() {
  if (thread_.joinable()) thread_.join();
}

Status BackgroundCommit::Wait() {
  if (thread_.joinable()) thread_.join();
  taken_ = {};
  if (result_.ok()) return result_;
  return Status(result_.code(), fmt::format("committing the checkpoint of step {}: {}", step_, result_.message()));
}

}  // namespace maestro::runtime
