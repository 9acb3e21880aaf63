// SPDX-License-Identifier: Apache-2.0
// What a run's samples hold against what its plan was priced for: the
// compiler split the GPUs by the spec's [[data.modality]] (each modality's
// share of samples and its mean tokens per carrying sample, or its
// [[data.modality.mix]]'s mean: compiler/sample_mix.h); the data may say
// otherwise, and the user should hear it before the run spends its hours on
// a split priced for other data.
// Owns: DataAgainstPlan. May call: plan, datasets (SampleSource::TokensOf:
// counts only, no payload). Torch-free. Thread safety: a pure function.
#pragma once

#include <string>
#include <vector>

#include "datasets/sample_source.h"
#include "plan/plan.h"

namespace maestro::runtime {

// One line per plan modality (plan.data.modalities) whose share of the train
// samples differs from its `fraction` by more than kShareSlack (absolute), or
// whose mean tokens per carrying sample differ from its `tokens` (> 0) by
// more than kTokensSlack (relative): what the plan assumed, what the data
// has, and the [[data.modality]] keys that would price it. Empty when they
// agree or the source has no train samples.
inline constexpr double kShareSlack = 0.10;
inline constexpr double kTokensSlack = 0.25;
std::vector<std::string> DataAgainstPlan(const plan::Plan& plan, const datasets::SampleSource& samples);

}  // namespace maestro::runtime
