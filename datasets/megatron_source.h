// SPDX-License-Identifier: Apache-2.0
// A Megatron-LM indexed corpus (.bin + .idx) as a SampleSource: the runtime,
// the reference and the SampleIndex read its samples through the data seam
// (datasets/sample_source.h) like any other data set.
//
// Owns: the mapping from MegatronSamples (datasets/megatron_indexed.h: the
// pack/split rule) to SampleRecords: inputs, next-token targets (-100 where a
// window is padded), no images; the "text" token count of each sample; the
// token-id check against the model's vocabulary; the test split (an optional
// held-out corpus cut by the same rule, `[data] test_corpus`).
// May call: datasets/megatron_indexed, datasets/sample_source, base.
// Thread safety: immutable after Open(); every const method may be called
// from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "datasets/megatron_indexed.h"
#include "datasets/sample_source.h"

namespace maestro::datasets {

class MegatronSampleSource final : public SampleSource {
 public:
  // Opens `prefix` (or its .bin/.idx path) with the checks of
  // MegatronIndexedDataset::Open and builds the samples of `options`; with a
  // non-empty `test_prefix`, that corpus too, cut by the same options, as the
  // test split. options.vocab_size > 0 is required: every sample read is
  // checked against it. A corpus too short for one sample is InvalidArgument
  // naming it.
  static StatusOr<std::unique_ptr<MegatronSampleSource>> Open(const std::string& prefix,
                                                              const MegatronSampleOptions& options,
                                                              const std::string& test_prefix = "");

  // Train: every sample of the rule; test: every sample of the test corpus
  // (0 without one).
  int64_t NumSamples(Split split) const override;
  // A sample whose tokens reach vocab_size is InvalidArgument naming the
  // corpus, the sample, the document and the token (MegatronIndexedDataset
  // is checked whole at ingestion: CheckBeforeIngest).
  StatusOr<SampleRecord> Load(Split split, int64_t id) const override;
  // location "<prefix>#<id>"; tokens {"text": real input tokens}.
  SampleTokens TokensOf(int64_t id) const override;

  // Every token id of the corpus, and of the test corpus, below vocab_size (a
  // scan of the .bin files; run once, before the corpus is ingested into a
  // run's SampleIndex, so a bad held-out corpus stops the run before training).
  Status CheckBeforeIngest() const override;
  const MegatronSamples& samples() const { return samples_; }
  // The test split's samples; null without a test corpus.
  const MegatronSamples* test_samples() const { return test_samples_.get(); }

 private:
  MegatronSampleSource(std::string prefix, MegatronSamples samples, std::string test_prefix,
                       std::unique_ptr<MegatronSamples> test_samples)
      : prefix_(std::move(prefix)),
        samples_(std::move(samples)),
        test_prefix_(std::move(test_prefix)),
        test_samples_(std::move(test_samples)) {}
  std::string prefix_;
  MegatronSamples samples_;
  std::string test_prefix_;
  std::unique_ptr<MegatronSamples> test_samples_;
};

}  // namespace maestro::datasets
