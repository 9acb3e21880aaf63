// SPDX-License-Identifier: Apache-2.0
// The scheduling problem of one global batch: the samples (with the metadata
// the scheduler needs, never their payloads), the sections and edges of the
// plan, and the costs.
//
// Owns: Sample, SectionSpec, EdgeSpec, the SectionCostModel interface (the
// compiler's cost model and the runtime's measured profiles implement it),
// LinearCostModel (a simple calibrated implementation), Problem, its
// validation, and FromPlan(), which builds a Problem from a plan::Plan.
// May call: base, plan. Called by: the rest of scheduler/, compiler, runtime.
//
// Granularity. A "rank" of the scheduler is one DP replica of a section. The
// TP/CP/PP ranks inside a replica execute the same micro-batch sequence; the
// cost model prices a whole replica (pipeline fill included), so the
// scheduler treats a replica as one unit.
//
// Thread safety: Problem is a value; a SectionCostModel must be safe to call
// concurrently from const methods (LinearCostModel is).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/graph.h"
#include "base/status.h"
#include "plan/plan.h"

namespace maestro::scheduler {

inline constexpr int kMaxModalities = 8;
inline constexpr int kMaxSections = 32;

// One sample of the global batch. `modalities` is a bitmask over
// Problem::modality_names; modality_tokens[m] is the number of tokens that
// modality m adds to the sample (0 when it does not carry m).
struct Sample {
  uint64_t id = 0;
  uint32_t modalities = 0;
  int64_t text_tokens = 0;
  std::array<int64_t, kMaxModalities> modality_tokens{};

  bool Has(int modality) const { return (modalities >> modality) & 1u; }
};

// One section as the scheduler sees it.
struct SectionSpec {
  std::string name;
  bool trains = true;   // forward + backward + optimizer; false: forward only
  int modality = -1;    // -1: every sample; else only samples carrying it
  int dp = 1;           // DP replicas (= scheduler ranks of this section)
  int micro_batch = 1;  // most samples in one micro-batch of one replica
  int processes = 1;    // processes (ranks) of one replica: tp * pp * cp
  // Forward-only sections: global batches it computes ahead (plan's
  // run_ahead). In steady state its rows of this step were computed during
  // the previous one: its consumers find them ready at the step's start
  // (scheduler/simulator.h).
  int run_ahead = 0;
};

// A dependency: `to` consumes the activation of `from`, sample by sample.
// Any two DP degrees: replica u of `from` feeds replica d of `to` when their
// shares of the batch overlap (plan::ReplicasLinked): replicas i*k..i*k+k-1
// of `to` under fan-out k, replica j of `to` from j*k..j*k+k-1 under fan-in k.
struct EdgeSpec {
  int from = 0;
  int to = 0;
};

// What a step costs. Micro-batches are passed as the list of their samples.
// REQUIRES (for the lower bound to be a bound): a micro-batch costs at least
// as much as any of its subsets (monotone), and costs are additive per sample
// up to a per-micro-batch constant.
class SectionCostModel {
 public:
  virtual ~SectionCostModel() = default;
  // Seconds of the forward of `samples` on one replica of `section`.
  virtual double ForwardSeconds(int section, const std::vector<const Sample*>& samples) const = 0;
  // Seconds of the backward (only called for sections that train).
  virtual double BackwardSeconds(int section, const std::vector<const Sample*>& samples) const = 0;
  // Seconds for one sample's activation (or its gradient) to cross `edge`.
  // Transfers are modelled as a latency: they overlap with compute and with
  // each other (an asynchronous resharding queue).
  virtual double TransferSeconds(int edge, const Sample& sample) const = 0;
  // Seconds of the DP gradient reduction + optimizer step of a training section.
  virtual double OptimizerSeconds(int section) const {
    (void)section;
    return 0.0;
  }
};

// A cost model of the usual shape, per section:
//   forward(mb) = fixed + sum_i (per_token * t_i + per_token_sq * t_i^2)
//   backward(mb) = backward_factor * forward(mb)
// where t_i is the number of tokens the section sees of sample i: the tokens
// of its modality for a modality section, text + every modality otherwise
// (override with token_weights). Transfers: per_sample + per_token * t_i with
// t_i the tokens the upstream section produced.
class LinearCostModel : public SectionCostModel {
 public:
  struct SectionCost {
    double fixed_seconds = 0.0;  // per micro-batch (launch, pipeline fill)
    double seconds_per_token = 0.0;
    double seconds_per_token_sq = 0.0;  // attention-like term, per sample
    double backward_factor = 2.0;
    double optimizer_seconds = 0.0;
    // Weight of text tokens and of each modality's tokens; empty: the default.
    std::vector<double> token_weights;  // [0] = text, [1 + m] = modality m
  };
  struct EdgeCost {
    double seconds_per_sample = 0.0;
    double seconds_per_token = 0.0;
  };

  // `sections` must be the problem's sections (their modality decides the
  // default token weights), `section_costs` one per section, `edges` and
  // `edge_costs` one per edge.
  LinearCostModel(std::vector<SectionSpec> sections, std::vector<SectionCost> section_costs,
                  std::vector<EdgeSpec> edges, std::vector<EdgeCost> edge_costs);

  double ForwardSeconds(int section, const std::vector<const Sample*>& samples) const override;
  double BackwardSeconds(int section, const std::vector<const Sample*>& samples) const override;
  double TransferSeconds(int edge, const Sample& sample) const override;
  double OptimizerSeconds(int section) const override;

  // Tokens section `section` sees of `sample` (weighted).
  double TokensSeen(int section, const Sample& sample) const;

 private:
  std::vector<SectionSpec> sections_;
  std::vector<SectionCost> costs_;
  std::vector<EdgeSpec> edges_;
  std::vector<EdgeCost> edge_costs_;
};

struct Problem {
  std::vector<std::string> modality_names;  // bit m of Sample::modalities
  std::vector<SectionSpec> sections;
  std::vector<EdgeSpec> edges;
  std::vector<Sample> samples;  // the global batch, in data order
  std::shared_ptr<const SectionCostModel> costs;
  // > 0: every process of every replica shares this many cores (the embedded
  // default: one machine, ranks may outnumber its cores), and the simulator
  // shares them fairly among the processes computing at each moment; costs
  // are then the times of an op alone on a core. 0: each process has its own
  // device (a GPU cluster), nothing is shared.
  int shared_cores = 0;

  // True when sample `s` is processed by section `section`.
  bool Activates(int section, const Sample& s) const {
    const int m = sections[static_cast<size_t>(section)].modality;
    return m < 0 || s.Has(m);
  }
  // True when a gradient comes back over `edge`: both of its sections train.
  bool CarriesGradient(const EdgeSpec& edge) const {
    return sections[static_cast<size_t>(edge.from)].trains && sections[static_cast<size_t>(edge.to)].trains;
  }
  // The edges as (from, to) section indices, for base/graph.h.
  DirectedEdges SectionGraph() const;
};

// Checks sizes, modality indices, DP degrees of at least 1, acyclicity,
// unique sample ids, and that costs are set. Messages name the offending part.
Status ValidateProblem(const Problem& problem);

// Builds a Problem from a plan: one SectionSpec per plan section (dp,
// micro_batch and processes = tp * pp * cp from its ParallelConfig, activation "always" or a modality
// name), one EdgeSpec per plan edge. Modality names are those of
// plan.data.modalities followed by any other activation name, in order.
// `samples` carry bitmasks over those names (see ModalityIndex).
// shared_cores comes from plan.shared_cores.
StatusOr<Problem> FromPlan(const plan::Plan& plan, std::shared_ptr<const SectionCostModel> costs,
                           std::vector<Sample> samples);
// The modality names FromPlan() would use for `plan`.
std::vector<std::string> ModalityNamesOf(const plan::Plan& plan);

// A Sample from the token counts the datalayer's index keeps per sample
// (modality name -> tokens; the key "text" is the text tokens). A modality
// with tokens > 0 sets its bit. Fails on a name not in `modality_names`.
StatusOr<Sample> SampleFromTokens(uint64_t id, const std::map<std::string, int64_t>& tokens,
                                  const std::vector<std::string>& modality_names);

}  // namespace maestro::scheduler
