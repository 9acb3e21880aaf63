// SPDX-License-Identifier: Apache-2.0
#include "datasets/megatron_source.h"

#include <fmt/format.h>

#include "base/checks.h"

namespace maestro::datasets {

StatusOr<std::unique_ptr<MegatronSampleSource>> MegatronSampleSource::Open(const std::string& prefix,
                                                                           const MegatronSampleOptions& options) {
  if (options.vocab_size <= 0) {
    return Status::InvalidArgument(
        fmt::format("corpus '{}': the model's vocabulary size is needed to check token ids", prefix));
  }
  MAESTRO_ASSIGN_OR_RETURN(MegatronIndexedDataset dataset, MegatronIndexedDataset::Open(prefix));
  MAESTRO_ASSIGN_OR_RETURN(MegatronSamples samples, MegatronSamples::Build(std::move(dataset), options));
  if (samples.size() == 0) {
    return Status::InvalidArgument(
        fmt::format("corpus '{}': no sample of seq_len {} (the corpus is shorter than "
                    "one sample; lower [data] seq_len or bring more text)",
                    prefix, options.seq_len));
  }
  return std::unique_ptr<MegatronSampleSource>(new MegatronSampleSource(prefix, std::move(samples)));
}

int64_t MegatronSampleSource::NumSamples(Split split) const {
  return split == Split::kTrain ? samples_.size() : 0;
}

StatusOr<SampleRecord> MegatronSampleSource::Load(Split split, int64_t id) const {
  if (split != Split::kTrain || id < 0 || id >= samples_.size()) {
    return Status::InvalidArgument(fmt::format("corpus '{}': no {} sample {} (it has {} train samples, no test split)",
                                               prefix_, split == Split::kTrain ? "train" : "test", id,
                                               samples_.size()));
  }
  MegatronTokenSample sample;
  samples_.ReadSample(id, &sample);
  const int64_t vocab = samples_.options().vocab_size;
  for (size_t t = 0; t < sample.input_ids.size(); ++t) {
    for (int64_t token : {sample.input_ids[t], sample.labels[t]}) {
      if (token == kIgnoreLabel || (token >= 0 && token < vocab)) continue;
      const auto pieces = samples_.Pieces(id);
      return Status::InvalidArgument(
          fmt::format("corpus '{}': sample {} (document {}) holds token id {} outside the model's vocabulary "
                      "[0, {}): tokenize with the model's own tokenizer",
                      prefix_, id, pieces.empty() ? -1 : pieces.front().document, token, vocab));
    }
  }
  SampleRecord record;
  record.id = id;
  record.input_ids = std::move(sample.input_ids);
  record.target_ids = std::move(sample.labels);
  return record;
}

SampleTokens MegatronSampleSource::TokensOf(int64_t id) const {
  SampleTokens t;
  t.location = fmt::format("{}#{}", prefix_, id);
  t.tokens = {{"text", samples_.RealTokens(id)}};
  return t;
}

Status MegatronSampleSource::CheckBeforeIngest() const {
  return samples_.dataset().CheckTokenIds(samples_.options().vocab_size);
}

}  // namespace maestro::datasets
