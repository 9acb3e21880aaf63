// SPDX-License-Identifier: Apache-2.0
// maestro-bench parallel: what each parallel feature of the runtime costs on
// this machine's CPU, against its cheapest equivalent trained in the same run
// on the same 2 ranks (mpirun, MPI backend, one intra-op thread per rank):
// one decoder, one global batch, one data order; only the feature differs.
//   pp2_vs_dp2                 samples/s of PP 2 (the 1F1B pipeline) / DP 2
//   tp2_vs_dp2                 TP 2 / DP 2
//   zero1_vs_dp2               DP 2 with ZeRO-1 / DP 2 with replicated AdamW
//   recompute_full_vs_none     DP 2 with full recomputation / without
//   recompute_selective_vs_none  DP 2 with selective recomputation / without
//   moe_vs_dense               DP 2, a MoE decoder (4 experts of the dense
//                              FFN's width, top 1: the same active FLOPs
//                              per token but the router) / the dense one
//   pp_bubble_fraction         the PP 2 run's pipeline bubble, from the
//                              trace's per-op compute intervals
//                              (runtime/trace.h, waits left out): per step,
//                              the span from the first forward to the last
//                              backward over the stages, less the busiest
//                              stage's compute, over the span (the fill and
//                              drain), averaged over the measured steps
//   pp_bubble_theory           1F1B's (p - 1) / (m + p - 1) for p stages and
//                              m micro-batches (pp_stages, pp_micro_batches)
//   pp_imbalance_fraction      the further idle share of the other stages
//                              (they compute less than the busiest)
//   pp_stage_idle_fractions    each stage's idle share of the span
//   pp_stage_busy_seconds      each stage's compute per step
// 1F1B's formula is every stage's idle share when the stages compute
// equally long; the decoder is shaped so its two stages are close (2 + 2
// layers; the first also loads the data and embeds, the last runs the head
// and the loss over a 512-token vocabulary). Steps after the first 3
// (warm-up) count; a discarded warm-up training runs first, then every
// variant in turn, 1 round (--quick) or 3 (each variant's median).
// Records: docs/parallel_bench.md.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
// GCC 12 reports a false -Wnull-dereference inside nlohmann::json's inlined code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <nlohmann/json.hpp>
#pragma GCC diagnostic pop
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/registry.h"
#include "cli/subprocess.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "plan/plan.h"
#include "tests/fixtures/specs.h"

namespace {

namespace fs = std::filesystem;
using maestro::plan::Plan;

constexpr int kWarmupSteps = 3;

// One decoder sink on the built-in text. Global batch 16 in micro-batches of
// 2: PP 2 runs m = 8 micro-batches per step, DP 2 four per replica.
std::string SpecText(int64_t steps, bool moe) {
  namespace fixtures = maestro::fixtures;
  std::string spec =
      fixtures::WithKeys(
          fixtures::LocalCpuBatchSpecHead("parallel-bench", "bench"),
          {{"job", "steps", std::to_string(steps)}, {"data", "global_batch", "16"}, {"data", "seq_len", "128"}}) +
      fixtures::DecoderModelToml("lm", {256, 4, 4, 4, 768, 512});
  if (moe) spec += "experts = 4\nexperts_per_token = 1\nmoe_ffn_hidden = 768\n";
  return spec + fixtures::SectionToml("lm", "train", 2);
}

Plan CompiledPlan(const std::string& dir, int64_t steps, bool moe) {
  auto spec = maestro::compiler::ParseSpecString(SpecText(steps, moe), dir + "/spec.toml", dir);
  if (!spec.ok()) throw std::runtime_error(spec.status().ToString());
  maestro::compiler::CompileOptions options;
  options.out_dir = dir;
  options.local_ranks = 2;
  options.grouping = maestro::compiler::Grouping::kSectioned;
  auto compiled = maestro::compiler::Compile(*spec, options);
  if (!compiled.ok()) throw std::runtime_error(compiled.status().ToString());
  return compiled->plan;
}

// `base` with its one section in configuration `config` on ranks 0..1.
Plan Variant(const Plan& base, const maestro::plan::ParallelConfig& config) {
  Plan p = base;
  auto& s = p.sections.at(0);
  s.config = config;
  s.placement.het_component = 0;
  s.placement.first_rank = 0;
  s.placement.nodes = 1;
  s.placement.tasks_per_node = config.ranks();
  s.placement.gpus_per_task = 0;
  p.layout.clear();
  p.links.clear();
  const auto valid = maestro::plan::Validate(p);
  if (!valid.ok()) throw std::runtime_error("parallel bench plan: " + valid.ToString());
  maestro::plan::FillLayout(p);
  return p;
}

maestro::plan::ParallelConfig Config(int tp, int pp, int dp, int zero_stage,
                                     maestro::plan::RecomputeGranularity recompute) {
  maestro::plan::ParallelConfig c;
  c.tp = tp;
  c.pp = pp;
  c.dp = dp;
  c.micro_batch = 2;
  c.zero_stage = zero_stage;
  c.set_recompute_granularity(recompute);
  return c;
}

// Trains `plan` under mpirun into `run_dir` (the workers' logs to stderr).
void Train(const std::string& worker, const Plan& plan, const std::string& plan_path, const std::string& run_dir) {
  if (!maestro::plan::SavePlan(plan, plan_path).ok()) throw std::runtime_error("cannot write " + plan_path);
  std::vector<std::string> argv{
      "mpirun", "--oversubscribe", "--mca", "btl", "self,vader", "-np", std::to_string(plan.world_size())};
  if (geteuid() == 0) argv.insert(argv.begin() + 1, "--allow-run-as-root");
  argv.insert(argv.end(), {"-x", "MAESTRO_THREADS_PER_RANK=1", worker, "--no-progress", "--no-eval", "--run-dir",
                           run_dir, plan_path});
  auto rc = maestro::cli::RunProcess(argv, maestro::cli::ChildStdout::kToStderr);
  if (!rc.ok() || *rc != 0) throw std::runtime_error("the training run of " + plan_path + " failed (see stderr)");
}

// Samples per second over the steps past warm-up (metrics.jsonl).
double SamplesPerSecond(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  double samples = 0, seconds = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step_seconds") || j["step"].get<int64_t>() < kWarmupSteps) continue;
    samples += j["samples"].get<double>();
    seconds += j["step_seconds"].get<double>();
  }
  if (seconds <= 0) throw std::runtime_error("no step figures past warm-up in " + run_dir + "/metrics.jsonl");
  return samples / seconds;
}

struct Bubble {
  double bubble = 0;                       // 1 - the busiest stage's busy / span: the pipeline's fill and drain
  double imbalance = 0;                    // mean over stages of (the busiest's busy - the stage's busy) / span
  std::vector<double> stage_idle;          // per stage: 1 - busy / span (= bubble + its imbalance)
  std::vector<double> stage_busy_seconds;  // per stage, per step
};

// The pipeline bubble of a PP run from its trace (runtime/trace.h: each
// rank's F<m> and B<m> compute intervals, waits left out): per step past
// warm-up, the span from the first forward to the last backward over the
// stages and each stage's busy time in it. 1F1B's (p - 1) / (m + p - 1) is
// the idle share of every stage when the stages compute equally long; when
// they do not, the busiest stage's idle share is the fill and drain (the
// bubble), and the others idle more by the difference in work (the
// imbalance, reported apart). `stage_ranks`: one pipeline's world ranks, by stage.
Bubble MeasureBubble(const std::string& run_dir, const std::vector<int>& stage_ranks) {
  std::ifstream in(run_dir + "/trace.json");
  const auto trace = nlohmann::json::parse(in, nullptr, false);
  if (!trace.is_object() || !trace.contains("traceEvents")) throw std::runtime_error("no trace in " + run_dir);
  struct Interval {
    int64_t start, end;
  };
  // step -> stage -> intervals
  std::map<int64_t, std::vector<std::vector<Interval>>> steps;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string name = e.value("name", "");
    if (name.empty() || (name[0] != 'F' && name[0] != 'B')) continue;
    const int64_t step = e["args"]["step"].get<int64_t>();
    if (step < kWarmupSteps) continue;
    const auto stage = std::find(stage_ranks.begin(), stage_ranks.end(), e["tid"].get<int>());
    if (stage == stage_ranks.end()) continue;
    auto& per_stage = steps[step];
    per_stage.resize(stage_ranks.size());
    const int64_t ts = e["ts"].get<int64_t>();
    per_stage[static_cast<size_t>(stage - stage_ranks.begin())].push_back({ts, ts + e["dur"].get<int64_t>()});
  }
  if (steps.empty()) throw std::runtime_error("no pipeline ops past warm-up in " + run_dir + "/trace.json");
  const size_t stages = stage_ranks.size();
  const double n = static_cast<double>(steps.size());
  Bubble b;
  b.stage_idle.assign(stages, 0.0);
  b.stage_busy_seconds.assign(stages, 0.0);
  for (const auto& [step, per_stage] : steps) {
    int64_t first = INT64_MAX, last = INT64_MIN;
    std::vector<double> busy(stages, 0.0);
    for (size_t s = 0; s < per_stage.size(); ++s) {
      for (const auto& op : per_stage[s]) {
        first = std::min(first, op.start);
        last = std::max(last, op.end);
        busy[s] += static_cast<double>(op.end - op.start);
      }
    }
    const double span = static_cast<double>(std::max<int64_t>(1, last - first));
    const double busiest = *std::max_element(busy.begin(), busy.end());
    b.bubble += (1.0 - busiest / span) / n;
    for (size_t s = 0; s < stages; ++s) {
      b.stage_idle[s] += (1.0 - busy[s] / span) / n;
      b.stage_busy_seconds[s] += busy[s] / 1e6 / n;
      b.imbalance += (busiest - busy[s]) / span / n / static_cast<double>(stages);
    }
  }
  return b;
}

}  // namespace

MAESTRO_BENCHMARK(parallel,
                  "each parallel feature (PP, TP, ZeRO-1, recompute, MoE) vs its cheapest equivalent on the same "
                  "ranks; the PP bubble vs 1F1B's theory") {
  using maestro::plan::RecomputeGranularity;
  const int64_t steps = options.quick ? 6 : 16;
  const std::string dir = maestro::bench::ScratchDir("parallel");
  const std::string worker = maestro::cli::SelfDirectory() + "/maestro-worker";
  const Plan dense = CompiledPlan(dir, steps, /*moe=*/false);
  const Plan moe = CompiledPlan(dir, steps, /*moe=*/true);
  const int layers = static_cast<int>(dense.sections.at(0).model.layers);

  // PP 2, the even split: 2 + 2 layers; the last stage's head and loss
  // (vocabulary 512) cost about what the first stage's embedding and data
  // loading do at this width.
  const maestro::plan::ParallelConfig pp = Config(1, 2, 1, 0, RecomputeGranularity::kNone);
  struct Run {
    std::string name;
    Plan plan;
  };
  const std::vector<Run> runs = {
      {"dp2", Variant(dense, Config(1, 1, 2, 0, RecomputeGranularity::kNone))},
      {"pp2", Variant(dense, pp)},
      {"tp2", Variant(dense, Config(2, 1, 1, 0, RecomputeGranularity::kNone))},
      {"zero1", Variant(dense, Config(1, 1, 2, 1, RecomputeGranularity::kNone))},
      {"recompute_full", Variant(dense, Config(1, 1, 2, 0, RecomputeGranularity::kFull))},
      {"recompute_selective", Variant(dense, Config(1, 1, 2, 0, RecomputeGranularity::kSelective))},
      {"moe", Variant(moe, Config(1, 1, 2, 0, RecomputeGranularity::kNone))},
  };
  // A warm-up training first (libtorch and the data from disk into the page
  // cache; discarded), so the first variant measured is not the slower for
  // it; then `rounds` rounds of every variant in turn, each variant's median
  // samples/s (the same share of a busy shared machine for all).
  Train(worker, runs[0].plan, dir + "/warmup.json", dir + "/warmup");
  const int rounds = options.quick ? 1 : 3;
  std::map<std::string, std::vector<double>> rates;
  const Plan& pipelined = runs[1].plan;
  std::vector<int> stage_ranks;
  for (int s = 0; s < 2; ++s) stage_ranks.push_back(maestro::plan::GlobalRankOf(pipelined, 0, 0, 0, 0, s));
  std::vector<Bubble> bubbles;
  for (int round = 0; round < rounds; ++round) {
    for (const auto& run : runs) {
      const std::string run_dir = dir + "/" + run.name + "-" + std::to_string(round);
      Train(worker, run.plan, run_dir + ".json", run_dir);
      rates[run.name].push_back(SamplesPerSecond(run_dir));
      if (run.name == "pp2") bubbles.push_back(MeasureBubble(run_dir, stage_ranks));
    }
  }
  std::map<std::string, double> rate;
  for (auto& [name, r] : rates) {
    std::sort(r.begin(), r.end());
    rate[name] = r[r.size() / 2];
  }
  Bubble bubble;  // the rounds' mean
  bubble.stage_idle.assign(stage_ranks.size(), 0.0);
  bubble.stage_busy_seconds.assign(stage_ranks.size(), 0.0);
  const double n = static_cast<double>(bubbles.size());
  for (const Bubble& b : bubbles) {
    bubble.bubble += b.bubble / n;
    bubble.imbalance += b.imbalance / n;
    for (size_t s = 0; s < stage_ranks.size(); ++s) {
      bubble.stage_idle[s] += b.stage_idle[s] / n;
      bubble.stage_busy_seconds[s] += b.stage_busy_seconds[s] / n;
    }
  }
  // `maestro-bench parallel -- --keep`: the runs (plans, metrics, traces) stay for a look.
  if (std::find(options.args.begin(), options.args.end(), "--keep") != options.args.end()) {
    std::fprintf(stderr, "maestro-bench parallel: the runs are in %s\n", dir.c_str());
  } else {
    fs::remove_all(dir);
  }

  const int p = 2;
  const int m = static_cast<int>(dense.data.global_batch / pp.micro_batch);
  nlohmann::json out;
  out["pp2_vs_dp2"] = rate["pp2"] / rate["dp2"];
  out["tp2_vs_dp2"] = rate["tp2"] / rate["dp2"];
  out["zero1_vs_dp2"] = rate["zero1"] / rate["dp2"];
  out["recompute_full_vs_none"] = rate["recompute_full"] / rate["dp2"];
  out["recompute_selective_vs_none"] = rate["recompute_selective"] / rate["dp2"];
  out["moe_vs_dense"] = rate["moe"] / rate["dp2"];
  out["pp_bubble_fraction"] = bubble.bubble;
  out["pp_imbalance_fraction"] = bubble.imbalance;
  out["pp_stage_idle_fractions"] = bubble.stage_idle;
  out["pp_stage_busy_seconds"] = bubble.stage_busy_seconds;
  out["pp_bubble_theory"] = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
  out["pp_stages"] = p;
  out["pp_micro_batches"] = m;
  std::vector<int64_t> stage_layers;
  for (int s = 0; s < p; ++s) stage_layers.push_back(maestro::plan::StageLayerSpan(pp, layers, s).count());
  out["pp_layers"] = stage_layers;
  out["dp2_samples_per_s"] = rate["dp2"];
  out["steps_measured"] = steps - kWarmupSteps;
  out["rounds"] = rounds;
  out["cores"] = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return out;
}
