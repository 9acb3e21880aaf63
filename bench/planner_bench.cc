// SPDX-License-Identifier: Apache-2.0
// planner: maestro-compile's planner on 6 sections (an omni-style graph: two
// encoders, two projectors, a frozen teacher and an LLM) over 4096 GPUs
// (512 nodes x 8). Reports plan_ms_6x4096 (the target is < 1000 ms) and, as
// the baseline measured in the same run, the time of the 2-section case on
// 128 GPUs (plan_ms_2x128) and their ratio.
#include <chrono>

#include "bench/registry.h"
#include "compiler/model.h"
#include "compiler/planner.h"

namespace {

using maestro::compiler::CostModel;
using maestro::compiler::DeviceType;
using maestro::compiler::EdgeWork;
using maestro::compiler::SectionWork;
using maestro::compiler::Workload;
using maestro::plan::ModelKind;

SectionWork Section(const std::string& name, ModelKind kind, int64_t hidden, int64_t layers, int64_t heads,
                    bool train, double fraction, int64_t tokens) {
  SectionWork s;
  s.name = name;
  s.model.kind = kind;
  s.model.hidden = hidden;
  s.model.layers = layers;
  s.model.heads = heads;
  s.model.kv_heads = kind == ModelKind::kDecoder ? 8 : heads;
  s.model.ffn_hidden = hidden * 4;
  s.model.vocab = 152064;
  s.model.image_size = 448;
  s.model.patch_size = 14;
  s.model.channels = 3;
  s.model.mel_bins = 128;
  s.model.audio_frames = 3000;
  s.model.in_dim = hidden;
  s.model.out_dim = 8192;
  s.mode = train ? maestro::plan::SectionMode::kTrain : maestro::plan::SectionMode::kForward;
  s.active_fraction = fraction;
  s.tokens = tokens;
  s.facts = maestro::compiler::ComputeModelFacts(s.model, tokens);
  return s;
}

EdgeWork Edge(int from, int to, double bytes, bool grad) {
  EdgeWork e;
  e.from = from;
  e.to = to;
  e.bytes_per_sample = bytes;
  e.carries_gradient = grad;
  e.link_bytes_per_s = 50e9;
  return e;
}

double PlanMs(const CostModel& model, const Workload& w, int repeats) {
  return 1e3 * maestro::bench::MedianSeconds(
                   [&] {
                     auto out = maestro::compiler::PlanSections(model, w, maestro::compiler::PlannerOptions{});
                     if (!out.ok()) throw std::runtime_error(out.failure.message);
                   },
                   repeats);
}

}  // namespace

MAESTRO_BENCHMARK(planner, "maestro-compile planner time: 6 sections on 4096 GPUs (target < 1 s)") {
  DeviceType h100;
  h100.name = "h100";
  h100.memory_bytes = 80e9;
  h100.reserved_bytes = 2e9;
  h100.peak_flops = 989e12;
  h100.intra_bytes_per_s = 450e9;
  h100.inter_bytes_per_s = 50e9;
  h100.gpus_per_node = 8;
  h100.nodes = 512;
  const CostModel big({h100}, 4096);
  Workload w;
  w.sections = {Section("vit", ModelKind::kVit, 1280, 32, 16, true, 1.0 / 3, 1024),
                Section("audio", ModelKind::kAudioEncoder, 1280, 32, 20, true, 0.25, 1500),
                Section("vision_proj", ModelKind::kProjector, 1280, 1, 1, true, 1.0 / 3, 256),
                Section("audio_proj", ModelKind::kProjector, 1280, 1, 1, true, 0.25, 1500),
                Section("teacher", ModelKind::kDecoder, 8192, 80, 64, false, 1.0, 8192),
                Section("llm", ModelKind::kDecoder, 4096, 32, 32, true, 1.0, 8192)};
  w.edges = {Edge(0, 2, 1024 * 1280 * 2.0, true), Edge(1, 3, 1500 * 1280 * 2.0, true),
             Edge(2, 5, 256 * 8192 * 2.0, true), Edge(3, 5, 1500 * 8192 * 2.0, true),
             Edge(4, 5, 8192 * 8192 * 2.0, false)};
  h100.nodes = 16;
  const CostModel small({h100}, 512);
  Workload w2;
  w2.sections = {w.sections[0], w.sections[5]};
  w2.edges = {Edge(0, 1, 1024 * 4096 * 2.0, true)};
  const int repeats = options.quick ? 1 : 3;
  const double ms6 = PlanMs(big, w, repeats);
  const double ms2 = PlanMs(small, w2, repeats);
  maestro::compiler::PlannerOptions everything;
  everything.allow_planner_only = true;  // CP, recomputation, encoder TP/PP too
  const double ms6_full = 1e3 * maestro::bench::MedianSeconds(
                                    [&] {
                                      auto out = maestro::compiler::PlanSections(big, w, everything);
                                      if (!out.ok()) throw std::runtime_error(out.failure.message);
                                    },
                                    repeats);
  const auto plan = maestro::compiler::PlanSections(big, w, maestro::compiler::PlannerOptions{});
  nlohmann::json out;
  out["plan_ms_6x4096"] = ms6;
  out["plan_ms_6x4096_planner_only_space"] = ms6_full;
  out["plan_ms_2x128"] = ms2;
  out["ratio_6x4096_over_2x128"] = ms6 / ms2;
  out["under_1s"] = ms6 < 1000.0;
  out["gpus_used"] = plan.assignment.gpus;
  out["samples_per_second"] = plan.assignment.throughput;
  return out;
}
