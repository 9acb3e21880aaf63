// SPDX-License-Identifier: Apache-2.0
#include "runtime/data_against_plan.h"

#include <fmt/format.h>

#include <cmath>

namespace maestro::runtime {

std::vector<std::string> DataAgainstPlan(const plan::Plan& plan, const datasets::SampleSource& samples) {
  std::vector<std::string> out;
  const int64_t n = samples.NumSamples(datasets::Split::kTrain);
  if (n <= 0 || plan.data.modalities.empty()) return out;
  std::vector<int64_t> carrying(plan.data.modalities.size(), 0);
  std::vector<double> tokens(plan.data.modalities.size(), 0.0);
  for (int64_t id = 0; id < n; ++id) {
    const datasets::SampleTokens t = samples.TokensOf(id);
    for (size_t m = 0; m < plan.data.modalities.size(); ++m) {
      for (const auto& [name, count] : t.tokens) {
        if (name != plan.data.modalities[m].name || count <= 0) continue;
        ++carrying[m];
        tokens[m] += static_cast<double>(count);
      }
    }
  }
  for (size_t m = 0; m < plan.data.modalities.size(); ++m) {
    const plan::ModalityDesc& want = plan.data.modalities[m];
    const double share = static_cast<double>(carrying[m]) / static_cast<double>(n);
    const double mean = carrying[m] > 0 ? tokens[m] / static_cast<double>(carrying[m]) : 0.0;
    const bool share_off = std::abs(share - want.fraction) > kShareSlack;
    const bool tokens_off = want.tokens > 0 && std::abs(mean - static_cast<double>(want.tokens)) >
                                                   kTokensSlack * static_cast<double>(want.tokens);
    if (!share_off && !tokens_off) continue;
    out.push_back(fmt::format(
        "the plan was priced for modality '{}' on {:.0f}% of the samples at {} tokens each; the data has it on "
        "{:.0f}% ({} of {}) at {:.0f} on average: the split of GPUs between sections may be off. Put fraction = "
        "{:.4g} and tokens = {:.0f} (or a [[data.modality.mix]] of what its samples hold) in the spec's "
        "[[data.modality]] '{}' and compile again",
        want.name, 100.0 * want.fraction, want.tokens, 100.0 * share, carrying[m], n, mean, share, std::round(mean),
        want.name));
  }
  return out;
}

}  // namespace maestro::runtime
