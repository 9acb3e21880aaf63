// SPDX-License-Identifier: Apache-2.0
#include "datasets/megatron_source.h"

#include <fmt/format.h>

#include "base/checks.h"

namespace maestro::datasets {

namespace {

StatusOr<MegatronSamples> OpenSamples(const std::string& prefix, const MegatronSampleOptions& options,
                                      const char* what) {
  MAESTRO_ASSIGN_OR_RETURN(MegatronIndexedDataset dataset, MegatronIndexedDataset::Open(prefix));
  MAESTRO_ASSIGN_OR_RETURN(MegatronSamples samples, MegatronSamples::Build(std::move(dataset), options));
  if (samples.size() == 0) {
    return Status::InvalidArgument(
        fmt::format("{} '{}': no sample of seq_len {} (the corpus is shorter than "
                    "one sample; lower [data] seq_len or bring more text)",
                    what, prefix, options.seq_len));
  }
  return samples;
}

}  // namespace

StatusOr<std::unique_ptr<MegatronSampleSource>> MegatronSampleSource::Open(const std::string& prefix,
                                                                           const MegatronSampleOptions& options,
                                                                           const std::string& test_prefix) {
  if (options.vocab_size <= 0) {
    return Status::InvalidArgument(
        fmt::format("corpus '{}': the model's vocabulary size is needed to check token ids", prefix));
  }
  MAESTRO_ASSIGN_OR_RETURN(MegatronSamples samples, OpenSamples(prefix, options, "corpus"));
  std::unique_ptr<MegatronSamples> test;
  if (!test_prefix.empty()) {
    MAESTRO_ASSIGN_OR_RETURN(MegatronSamples test_samples, OpenSamples(test_prefix, options, "test corpus"));
    test = std::make_unique<MegatronSamples>(std::move(test_samples));
  }
  return std::unique_ptr<MegatronSampleSource>(
      new MegatronSampleSource(prefix, std::move(samples), test_prefix, std::move(test)));
}

int64_t MegatronSampleSource::NumSamples(Split split) const {
  if (split == Split::kTrain) return samples_.size();
  return test_samples_ ? test_samples_->size() : 0;
}

StatusOr<SampleRecord> MegatronSampleSource::Load(Split split, int64_t id) const {
  const bool train = split == Split::kTrain;
  const MegatronSamples* samples = train ? &samples_ : test_samples_.get();
  const std::string& prefix = train ? prefix_ : test_prefix_;
  if (samples == nullptr) {
    return Status::InvalidArgument(
        fmt::format("corpus '{}': no test sample {} (no test corpus: set [data] test_corpus)", prefix_, id));
  }
  if (id < 0 || id >= samples->size()) {
    return Status::InvalidArgument(fmt::format("{} '{}': no {} sample {} (it has {})", train ? "corpus" : "test corpus",
                                               prefix, train ? "train" : "test", id, samples->size()));
  }
  MegatronTokenSample sample;
  samples->ReadSample(id, &sample);
  const int64_t vocab = samples->options().vocab_size;
  for (size_t t = 0; t < sample.input_ids.size(); ++t) {
    for (int64_t token : {sample.input_ids[t], sample.labels[t]}) {
      if (token == kIgnoreLabel || (token >= 0 && token < vocab)) continue;
      const auto pieces = samples->Pieces(id);
      return Status::InvalidArgument(
          fmt::format("{} '{}': {} sample {} (document {}) holds token id {} outside the model's vocabulary "
                      "[0, {}): tokenize with the model's own tokenizer",
                      train ? "corpus" : "test corpus", prefix, train ? "train" : "test", id,
                      pieces.empty() ? -1 : pieces.front().document, token, vocab));
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
  MAESTRO_RETURN_IF_ERROR(samples_.dataset().CheckTokenIds(samples_.options().vocab_size));
  if (test_samples_) {
    MAESTRO_RETURN_IF_ERROR(test_samples_->dataset().CheckTokenIds(test_samples_->options().vocab_size));
  }
  return Status::Ok();
}

}  // namespace maestro::datasets
