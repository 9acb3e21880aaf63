// SPDX-License-Identifier: Apache-2.0
// The runtime tests' plans: an example spec compiled with a given grouping,
// a spec compiled for a runtime that supports a given list of features, a
// plan re-placed on this machine after a test chose its sections'
// configurations, and an example spec compiled sectioned with each section
// laid out as a test says (SectionedExamplePlan). No torch. May call: compiler, plan.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/checks.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "compiler/workload_builder.h"
#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::runtime_testing {

// specs/<spec_name> compiled (cluster mode) with `grouping` and `pins`
// (--pin texts, e.g. "vit.tp=2").
inline plan::Plan CompiledExamplePlan(const std::string& spec_name, compiler::Grouping grouping,
                                      const std::vector<std::string>& pins = {}) {
  auto spec = compiler::ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/" + spec_name);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return {};
  compiler::CompileOptions options;
  options.grouping = grouping;
  for (const auto& text : pins) {
    auto pin = compiler::ParsePin(text);
    EXPECT_TRUE(pin.ok()) << pin.status().ToString();
    if (pin.ok()) options.pins.push_back(*pin);
  }
  auto compiled = compiler::Compile(*spec, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status().ToString();
  if (!compiled.ok()) return plan::Plan();
  // fp32 spools, so that a sectioned run equals the one-process reference
  // within 1e-5 (a spec's bf16 spool rounds the rows a frozen section hands
  // on: tests/runtime/kd_rows_run_test.cc checks that path).
  compiled->plan.spool_dtype = "f32";
  // Spools read back across epochs whatever the compiler priced for the
  // spec's own data (the tests replace it): what they test is the reuse;
  // online (a test of the offline pass asks for it).
  compiled->plan.spool_reuse = true;
  compiled->plan.offline_spool_pass = false;
  return compiled->plan;
}

// `spec` compiled (cluster mode) with `grouping` for a runtime that
// supports `support` (a --runtime-support list; "": this build's runtime).
inline StatusOr<compiler::CompileResult> CompileForRuntime(const compiler::Spec& spec, compiler::Grouping grouping,
                                                           const std::string& support) {
  compiler::CompileOptions options;
  options.grouping = grouping;
  if (!support.empty()) {
    MAESTRO_ASSIGN_OR_RETURN(options.support, compiler::ParseRuntimeSupport(support));
    options.support_given = true;
  }
  return compiler::Compile(spec, options);
}

// A section's layout in a test plan: its TP, CP and DP degrees (PP 1), its
// micro-batch, ZeRO stage and recomputation.
struct SectionLayout {
  int tp = 1, cp = 1, dp = 1, micro_batch = 4, zero_stage = 0;
  plan::RecomputeGranularity recompute = plan::RecomputeGranularity::kNone;
};

// Places every section of `p` (its configs as the test set them) on one
// node of CPU ranks, ranks numbered in section order, fan-outs derived
// again, `steps` steps; validated and laid out.
inline void PlaceOnThisMachine(plan::Plan& p, int64_t steps) {
  int rank = 0;
  for (size_t i = 0; i < p.sections.size(); ++i) {
    auto& s = p.sections[i];
    s.placement.het_component = static_cast<int>(i);
    s.placement.first_rank = rank;
    s.placement.nodes = 1;
    s.placement.tasks_per_node = s.config.ranks();
    s.placement.gpus_per_task = 0;  // CPU ranks (and MPI links: a CUDA run stages through the host)
    rank += s.config.ranks();
  }
  for (auto& e : p.edges) e.fanout = e.fanin = 0;
  p.layout.clear();
  p.links.clear();
  p.data.steps = steps;
  EXPECT_TRUE(plan::Validate(p).ok()) << plan::Validate(p).ToString();
  plan::FillLayout(p);
}

// specs/<spec_name> compiled sectioned, each section laid out as `layouts`
// says (every section has one there), its initial weights from the seed and
// no run-ahead, on this machine's CPU ranks, `steps` steps.
inline plan::Plan SectionedExamplePlan(const std::string& spec_name,
                                       const std::map<std::string, SectionLayout>& layouts, int64_t steps) {
  plan::Plan p = CompiledExamplePlan(spec_name, compiler::Grouping::kSectioned);
  for (auto& s : p.sections) {
    const SectionLayout& l = layouts.at(s.name);
    s.init_from.clear();
    s.run_ahead = 0;
    s.config.tp = l.tp;
    s.config.pp = 1;
    s.config.cp = l.cp;
    s.config.dp = l.dp;
    s.config.micro_batch = l.micro_batch;
    s.config.zero_stage = l.zero_stage;
    s.config.set_recompute_granularity(l.recompute);
  }
  PlaceOnThisMachine(p, steps);
  return p;
}

}  // namespace maestro::runtime_testing
