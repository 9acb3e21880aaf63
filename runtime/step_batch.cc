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

StatusOr<StepBatch> ShareNextBatch(launcher::Backend& world, datalayer::TrainingRun* run, int64_t total_steps,
                                   const std::vector<std::string>& modalities, double* blocked_seconds) {
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
  return DecodeBatch(encoded, modalities.size());
}

}  // namespace maestro::runtime
