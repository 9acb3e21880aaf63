// SPDX-License-Identifier: Apache-2.0
#include "runtime/step_batch.h"

#include <chrono>

#include "base/checks.h"
#include "runtime/collectives.h"

namespace maestro::runtime {

std::vector<int64_t> EncodeBatch(const datalayer::GlobalBatch& batch, const std::vector<datalayer::SampleInfo>& infos,
                                 const std::vector<std::string>& modalities) {
  std::vector<int64_t> v{batch.step, batch.epoch, static_cast<int64_t>(infos.size())};
  for (const auto& info : infos) {
    int64_t mask = 0;
    std::vector<int64_t> tokens(modalities.size(), 0);
    for (size_t m = 0; m < modalities.size(); ++m) {
      auto it = info.tokens.find(modalities[m]);
      if (it != info.tokens.end() && it->second > 0) {
        mask |= int64_t{1} << m;
        tokens[m] = it->second;
      }
    }
    auto text = info.tokens.find("text");
    v.push_back(info.sample_id);
    v.push_back(mask);
    v.push_back(text == info.tokens.end() ? 0 : text->second);
    v.insert(v.end(), tokens.begin(), tokens.end());
  }
  return v;
}

StepBatch DecodeBatch(const std::vector<int64_t>& v, size_t modalities) {
  StepBatch b;
  if (v.size() < 3) return b;
  b.step = v[0];
  b.epoch = v[1];
  const auto n = static_cast<size_t>(v[2]);
  size_t at = 3;
  for (size_t i = 0; i < n; ++i) {
    scheduler::Sample s;
    s.id = static_cast<uint64_t>(v[at]);
    s.modalities = static_cast<uint32_t>(v[at + 1]);
    s.text_tokens = v[at + 2];
    for (size_t m = 0; m < modalities && m < scheduler::kMaxModalities; ++m) s.modality_tokens[m] = v[at + 3 + m];
    at += 3 + modalities;
    b.ids.push_back(static_cast<int64_t>(s.id));
    b.samples.push_back(s);
  }
  return b;
}

StatusOr<scheduler::Schedule> ScheduleOfBatch(const plan::Plan& plan,
                                              std::shared_ptr<const scheduler::SectionCostModel> costs,
                                              const StepBatch& batch, scheduler::Problem* problem) {
  MAESTRO_ASSIGN_OR_RETURN(*problem, scheduler::FromPlan(plan, std::move(costs), batch.samples));
  scheduler::ScheduleOptions so;
  MAESTRO_ASSIGN_OR_RETURN(so.policy, scheduler::PolicyFromName(plan.schedule_policy));
  so.seed = plan.data.seed;
  so.step = batch.step;
  so.max_in_flight = plan.schedule_max_in_flight;
  return scheduler::BuildSchedule(*problem, so);
}

namespace {

// Rank 0: the encoded batch of `step` (the index's schedule).
StatusOr<std::vector<int64_t>> EncodeStep(datalayer::TrainingRun& run, int64_t step,
                                          const std::vector<std::string>& modalities) {
  MAESTRO_ASSIGN_OR_RETURN(auto batch, run.index().BatchForStep(step));
  MAESTRO_ASSIGN_OR_RETURN(auto infos, run.index().GetSamples(batch.sample_ids));
  return EncodeBatch(batch, infos, modalities);
}

}  // namespace

StatusOr<StepBatch> ShareNextBatch(launcher::Backend& world, datalayer::TrainingRun* run, int64_t total_steps,
                                   const std::vector<std::string>& modalities, double* blocked_seconds, int lookahead,
                                   std::vector<StepBatch>* ahead) {
  std::vector<int64_t> encoded;
  Status rank0_status;
  if (run != nullptr) {
    if (run->next_step() >= total_steps) {
      encoded = {-1};
    } else {
      auto batch = run->NextBatch();
      if (batch.ok()) {
        auto got = run->index().GetSamples(batch->sample_ids);
        if (got.ok()) {
          encoded = EncodeBatch(*batch, *got, modalities);
        } else {
          rank0_status = got.status();
        }
      } else {
        rank0_status = batch.status();
      }
      for (int j = 1; j <= lookahead && rank0_status.ok() && run->next_step() + j < total_steps; ++j) {
        auto next = EncodeStep(*run, run->next_step() + j, modalities);
        if (!next.ok()) {
          rank0_status = next.status();
          break;
        }
        encoded.push_back(static_cast<int64_t>(next->size()));
        encoded.insert(encoded.end(), next->begin(), next->end());
      }
      if (!rank0_status.ok()) encoded = {-2};
    }
  }
  const auto broadcast_start = std::chrono::steady_clock::now();
  MAESTRO_RETURN_IF_ERROR(BroadcastInts(world, encoded));
  if (run == nullptr) {
    *blocked_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - broadcast_start).count();
  }
  if (encoded.size() == 1 && encoded[0] == -2) {
    return rank0_status.ok() ? Status::Aborted("rank 0 could not read the next batch") : rank0_status;
  }
  if (encoded.size() == 1) return StepBatch{};  // done
  StepBatch batch = DecodeBatch(encoded, modalities.size());
  if (ahead != nullptr) {
    ahead->clear();
    size_t at = 3 + batch.samples.size() * (3 + modalities.size());
    while (at < encoded.size()) {
      const auto length = static_cast<size_t>(encoded[at]);
      if (length == 0 || at + 1 + length > encoded.size()) return Status::Internal("a malformed batch lookahead");
      ahead->push_back(DecodeBatch(std::vector<int64_t>(encoded.begin() + static_cast<std::ptrdiff_t>(at + 1),
                                                        encoded.begin() + static_cast<std::ptrdiff_t>(at + 1 + length)),
                                   modalities.size()));
      at += 1 + length;
    }
  }
  return batch;
}

}  // namespace maestro::runtime
