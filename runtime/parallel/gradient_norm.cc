// SPDX-License-Identifier: Apache-2.0
#include "runtime/parallel/gradient_norm.h"

#include <cmath>

#include "base/checks.h"

namespace maestro::runtime {

namespace {

// `squares` summed over `group` (when there is one).
Status SumSquares(const SumOverGroup& group, GradientSquares& squares) {
  if (!group) return Status::Ok();
  std::vector<double> values{squares.tp_sharded, squares.replicated};
  MAESTRO_RETURN_IF_ERROR(group(values));
  squares = {values[0], values[1]};
  return Status::Ok();
}

}  // namespace

StatusOr<double> GlobalGradientNorm(GradientSquares dense, GradientSquares routed, const GradientNormGroups& groups) {
  MAESTRO_RETURN_IF_ERROR(SumSquares(groups.shards, dense));
  MAESTRO_RETURN_IF_ERROR(SumSquares(groups.expert_shards, routed));
  MAESTRO_RETURN_IF_ERROR(SumSquares(groups.experts, routed));
  double sharded = dense.tp_sharded + routed.tp_sharded;
  if (groups.tensor_parallel) {
    std::vector<double> values{sharded};
    MAESTRO_RETURN_IF_ERROR(groups.tensor_parallel(values));
    sharded = values[0];
  }
  double total = sharded + dense.replicated + routed.replicated;
  if (groups.stages) {
    std::vector<double> values{total};
    MAESTRO_RETURN_IF_ERROR(groups.stages(values));
    total = values[0];
  }
  return std::sqrt(total);
}

double ClipScale(double norm, double clip) {
  return clip > 0 && norm > clip ? clip / (norm + 1e-6) : 1.0;
}

}  // namespace maestro::runtime
