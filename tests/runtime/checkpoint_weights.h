// SPDX-License-Identifier: Apache-2.0
// The runtime's multi-rank tests read a run's trained weights back and
// compare them (docs/testing.md): a checkpoint entry's parameters by name
// (CheckpointWeights; WeightsOf a plan's section or component) and the
// largest relative difference between two sets
// (LargestRelativeDifference). For the tests that are already one torch TU
// (pipeline, ZeRO-1, CP, encoder TP, fused PP); header-only, so the torch-free
// harness library (multi_rank_harness.h) stays torch-free.
// May call: runtime/models (BuildModel), runtime/checkpoint_slices (either
// checkpoint format), run_dir_util.h (LastCheckpoint).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>

#include "plan/plan.h"
#include "runtime/checkpoint_slices.h"
#include "runtime/models/encoders.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro::runtime_testing {

// How far a distributed run's final weights may sit from the reference's,
// relative, after a few AdamW steps: AdamW divides each gradient by its own
// magnitude, so a summation order that differs in the last bit (a
// reduction over DP x CP in one collective, another CPU's BLAS kernels)
// moves a weight by up to ~lr x steps where a gradient is near zero. Measured
// on the 2-core CI machine of 2026-11-27: 1.0-1.3e-5 for the ViT TP 2 x DP 2
// ZeRO-1, fused TP 2 and ViT CP 2 x TP 2 runs and 3.5e-5 for the KD student
// at CP 2 (each run's losses within 1e-7 of the reference's). A wrong
// gradient sum moves weights by ~lr relative to their size (1e-2 here): far
// above this bound.
inline constexpr double kAdamWWeightRelativeBound = 5e-5;

// A model's parameters by name, each a detached copy (shapes as the model's).
using NamedWeights = std::map<std::string, torch::Tensor>;

// The parameters of checkpoint entry `entry` (a section or a fused
// component, built as `model`) in `run_dir`'s last checkpoint; empty, and a
// failure, when the entry is missing.
inline NamedWeights CheckpointWeights(const plan::ModelDesc& model, const std::string& run_dir,
                                      const std::string& entry) {
  NamedWeights out;
  const auto state = LastCheckpoint(run_dir);
  auto it = state.sections.find(entry);
  EXPECT_TRUE(it != state.sections.end()) << run_dir << " has no '" << entry << "'";
  if (it == state.sections.end()) return out;
  auto module = runtime::BuildModel(model, runtime::ModelBuildOptions{});
  EXPECT_TRUE(module.ok());
  if (!module.ok()) return out;
  const Status loaded = runtime::LoadWholeModel(state, entry, **module, run_dir);
  EXPECT_TRUE(loaded.ok()) << loaded.ToString();
  for (const auto& item : (*module)->named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

// Section (or fused component) `name`'s model in `p` (fused sections expanded).
inline plan::ModelDesc ModelOf(const plan::Plan& p, const std::string& name) {
  const plan::Plan expanded = plan::ExpandFusedSections(p);
  const int index = expanded.section_index(name);
  EXPECT_GE(index, 0) << "no section or component " << name;
  return index < 0 ? plan::ModelDesc{} : expanded.sections[static_cast<size_t>(index)].model;
}

// Section (or fused component) `entry` of `p`'s weights in `run_dir`'s last
// checkpoint, by parameter name (CheckpointWeights of ModelOf).
inline NamedWeights WeightsOf(const plan::Plan& p, const std::string& entry, const std::string& run_dir) {
  return CheckpointWeights(ModelOf(p, entry), run_dir, entry);
}

// The largest of max |a - b| / max |b| over the tensors of `a` (each found in
// `b`: a failure otherwise); *where names that tensor. `key_bias_bound` >= 0:
// a ViT's fused attn.qkv.bias counts its q and v thirds only, its key third
// held apart to that absolute bound (lr x steps): the key bias's gradient is
// zero but for rounding (softmax ignores a shift shared by every key), and
// AdamW turns that noise into steps of up to ~lr. < 0: every tensor whole.
inline double LargestRelativeDifference(const NamedWeights& a, const NamedWeights& b, std::string* where,
                                        double key_bias_bound = -1.0) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  const std::string key_bias = "attn.qkv.bias";
  for (const auto& [name, weights] : a) {
    auto it = b.find(name);
    EXPECT_TRUE(it != b.end()) << name;
    if (it == b.end()) continue;
    torch::Tensor t = weights, u = it->second;
    if (key_bias_bound >= 0 && name.size() >= key_bias.size() &&
        name.compare(name.size() - key_bias.size(), key_bias.size(), key_bias) == 0) {
      const int64_t c = u.size(0) / 3;
      EXPECT_LE((t.narrow(0, c, c) - u.narrow(0, c, c)).abs().max().item<double>(), key_bias_bound)
          << name << " (key bias)";
      t = torch::cat({t.narrow(0, 0, c), t.narrow(0, 2 * c, c)});
      u = torch::cat({u.narrow(0, 0, c), u.narrow(0, 2 * c, c)});
    }
    const double d = (t - u).abs().max().item<double>() / std::max(u.abs().max().item<double>(), 1e-30);
    if (d > worst) {
      worst = d;
      *where = name;
    }
  }
  return worst;
}

}  // namespace maestro::runtime_testing
