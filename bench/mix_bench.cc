// SPDX-License-Identifier: Apache-2.0
// maestro-bench mix: the wavefront schedule against FIFO (the data order,
// Megatron's sampler) on a realistic mix of samples (issue #42 item 6), in
// the compiler's simulator and in real CPU runs, all in the same run.
//
// The workload, written by the bench into a scratch folder: a JSONL manifest
// whose lines cycle through six kinds of sample (docs/data.md, "## JSONL
// manifests", "### Native resolution", "## Audio"):
//   text only; one small image (16 x 24 pixels); three large images
//   (64 x 64); a video (4 frames of 48 x 64 at 2 fps); an audio clip (1 s,
//   16-bit PCM WAV); one small image and a clip.
// PNGs of their own sizes, read at native resolution by a tiny Qwen2-VL
// tower (patch 4, 2x2 merge, temporal patch 2, 2-D RoPE); the clips by a
// tiny Whisper-style audio encoder and a projector; both feed a tiny M-RoPE
// decoder. The spec's [[data.modality.mix]] tables describe the same mix
// (image: 4 of 6 samples, audio: 2 of 6), so the compiler prices each kind.
// Figures:
//   simulated_wavefront_vs_fifo   the local plan (`maestro run --grouping
//                                 sectioned` on this machine: one section a
//                                 rank, the ranks sharing the cores)
//                                 simulated by the compiler under both
//                                 policies on the same sampled batches: FIFO
//                                 step / wavefront step; local_auto_grouping
//                                 says what `maestro run` picks by itself
//   video_spec_simulated_wavefront_vs_fifo  the same for
//                                 specs/qwen25vl_7b_video.toml planned for its
//                                 cluster (16 x 8 H100): the scale case
//   measured_wavefront_vs_fifo    real runs of the local plan under mpirun
//                                 with schedule_policy "wavefront" and "fifo":
//                                 samples/s wavefront / FIFO, the median over
//                                 `rounds` rounds (3; 1 with --quick) of the
//                                 two runs in rotated order, 30 steps each
//                                 (4 with --quick) of which the first 3 are
//                                 warm-up; beside it each policy's median
//                                 samples/s and the compiler's prediction of
//                                 both (predicted_*);
//                                 measured_wavefront_vs_fifo_step_median, the
//                                 median over every measured step of every
//                                 round of FIFO's step seconds over the
//                                 wavefront's on the same batch (both runs
//                                 draw the same batches in the same order):
//                                 steadier against a busy machine's outliers
// `maestro-bench mix -- --keep` keeps the workload and the runs (plans,
// metrics.jsonl, trace.json) and prints where.
// May call: bench/local_runs.h, bench/media_files.h, compiler (Compile,
// EffectiveSpec, DevicesOf, DrawsOf, SimulateSectioned), plan, cli.
#include <fmt/format.h>
#include <sndfile.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/local_runs.h"
#include "bench/media_files.h"
#include "bench/registry.h"
#include "cli/subprocess.h"
#include "compiler/compile.h"
#include "compiler/sample_mix.h"
#include "compiler/step_simulation.h"
#include "compiler/workload_builder.h"
#include "plan/plan.h"

namespace {

namespace fs = std::filesystem;
namespace bench = maestro::bench;
namespace compiler = maestro::compiler;

constexpr int kPatch = 4, kMerge = 2, kFactor = kPatch * kMerge;            // the tower's pixels per merged unit a side
constexpr int64_t kImageToken = 300, kVideoToken = 301, kAudioToken = 302;  // below the decoder's vocabulary
constexpr int kAudioFrames = 100;                                           // 1 s of log-mel frames (hop 160)
constexpr int kAudioRows = (kAudioFrames + 1) / 2;                          // placeholders per clip
constexpr int kSeqLen = 224;
constexpr int kLines = 72;  // twelve cycles of the six kinds: three whole global batches an epoch
constexpr int kSimulatedBatches = 16;

struct Picture {
  int height = 0, width = 0;
  int tokens() const { return (height / kFactor) * (width / kFactor); }  // smart_resize keeps these sizes
};
constexpr Picture kSmall{16, 24};
constexpr Picture kLarge{64, 64};
constexpr Picture kFrame{48, 64};
constexpr int kLargePerSample = 3;
constexpr int kVideoFrames = 4;  // 2 temporal patches

// One manifest line of kind `kind` (0..5, the cycle of the header): its
// token ids (a short prompt, the placeholders, a short answer) and its items.
nlohmann::json ManifestLine(int kind) {
  std::vector<int64_t> ids{257};
  nlohmann::json line;
  const auto text = [&](int n) {
    for (int t = 0; t < n; ++t) ids.push_back(10 + t);
  };
  const auto placeholders = [&](int64_t id, int n) { ids.insert(ids.end(), static_cast<size_t>(n), id); };
  const auto image = [&](const std::string& path, const Picture& p) {
    placeholders(kImageToken, p.tokens());
    line["images"].push_back(path);
  };
  const auto clip = [&] {
    placeholders(kAudioToken, kAudioRows);
    line["audios"].push_back("audio/clip.wav");
  };
  text(4);
  switch (kind) {
    case 0: text(20); break;
    case 1: image("img/small.png", kSmall); break;
    case 2:
      for (int k = 0; k < kLargePerSample; ++k) image(fmt::format("img/large{}.png", k), kLarge);
      break;
    case 3: {
      nlohmann::json frames = nlohmann::json::array();
      for (int f = 0; f < kVideoFrames; ++f) frames.push_back(fmt::format("video/f{}.png", f));
      placeholders(kVideoToken, (kVideoFrames + 1) / 2 * kFrame.tokens());
      line["videos"].push_back({{"frames", frames}, {"fps", 2.0}});
      break;
    }
    case 4: clip(); break;
    default:
      image("img/small.png", kSmall);
      clip();
      break;
  }
  text(8);
  line["input_ids"] = ids;
  return line;
}

// The spec of the workload but its sections: the manifest beside it, its
// mix, the tiny models (fmt's named fields in braces).
constexpr const char* kSpecHead = R"(# maestro-bench mix (bench/mix_bench.cc): a realistic mix on tiny models.
[job]
name = "mix-bench"
steps = 30

[cluster]                # `maestro run` (local mode) plans for this machine instead
nodes = 1
gpus_per_node = 4

[cluster.gpu.cpu]
cpu = true
memory_gb = 2
tflops_bf16 = 0.05

[data]
manifest = "train.jsonl"
global_batch = 24
seq_len = {seq_len}
seed = 7
image_token_id = {image}
video_token_id = {video}
audio_token_id = {audio}
image_resolution = "native"
image_min_pixels = 64
image_max_pixels = 16384
max_images_per_sample = {large}

[[data.modality]]        # images and videos: 4 of the 6 kinds
name = "image"
fraction = 0.666667
[[data.modality.mix]]    # one small image (kinds 1 and 5)
weight = 2
height = {small_h}
width = {small_w}
[[data.modality.mix]]    # several large images
weight = 1
count = {large}
height = {large_h}
width = {large_w}
[[data.modality.mix]]    # a video
weight = 1
frames = {frames}
height = {frame_h}
width = {frame_w}

[[data.modality]]        # audio clips: 2 of the 6 kinds
name = "audio"
fraction = 0.333333
[[data.modality.mix]]
count = 1

[models.vit]             # a tiny Qwen2-VL tower
kind = "vit"
hidden = 32
layers = 2
heads = 2
ffn_hidden = 64
image_size = 16
patch_size = {patch}
channels = 3
temporal_patch = 2
cls_token = false
pos_embed = false
patch_bias = false
final_norm = false
spatial_merge = {merge}
merger_hidden = 128
out_dim = 64

[models.audio]           # a tiny Whisper-style encoder
kind = "audio_encoder"
hidden = 32
layers = 2
heads = 2
ffn_hidden = 64
mel_bins = 80
audio_frames = {audio_frames}

[models.audio_proj]
kind = "projector"
in_dim = 32
out_dim = 64

[models.llm]             # a tiny M-RoPE decoder: head_dim 32 = 2 x (4 + 6 + 6)
kind = "decoder"
hidden = 64
layers = 2
heads = 2
ffn_hidden = 192
vocab = 512
mrope_section_t = 4
mrope_section_h = 6
mrope_section_w = 6
)";

// One [[section]] of the spec: the model of its name, trained.
std::string SectionToml(const std::string& name, const std::string& activation, const std::string& inputs) {
  std::string text = fmt::format("\n[[section]]\nname = \"{0}\"\nmodel = \"{0}\"\nmode = \"train\"\n", name);
  if (!activation.empty()) text += fmt::format("activation = \"{}\"\n", activation);
  if (!inputs.empty()) text += fmt::format("inputs = [{}]\n", inputs);
  return text + "optimizer = { lr = 1e-3 }\n";
}

// The spec of the workload.
std::string SpecText() {
  return fmt::format(fmt::runtime(kSpecHead), fmt::arg("seq_len", kSeqLen), fmt::arg("image", kImageToken),
                     fmt::arg("video", kVideoToken), fmt::arg("audio", kAudioToken), fmt::arg("large", kLargePerSample),
                     fmt::arg("small_h", kSmall.height), fmt::arg("small_w", kSmall.width),
                     fmt::arg("large_h", kLarge.height), fmt::arg("large_w", kLarge.width),
                     fmt::arg("frames", kVideoFrames), fmt::arg("frame_h", kFrame.height),
                     fmt::arg("frame_w", kFrame.width), fmt::arg("patch", kPatch), fmt::arg("merge", kMerge),
                     fmt::arg("audio_frames", kAudioFrames)) +
         SectionToml("vit", "image", "") + SectionToml("audio", "audio", "") +
         SectionToml("audio_proj", "audio", "\"audio.audio_embeddings\"") +
         SectionToml("llm", "", "\"vit.image_embeddings\", \"audio_proj.audio_embeddings\"");
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush()) throw std::runtime_error("cannot write " + path);
}

// The workload in `dir`: img/, video/, audio/, train.jsonl and spec.toml;
// returns the spec's path.
std::string WriteWorkload(const std::string& dir) {
  for (const char* sub : {"img", "video", "audio"}) fs::create_directories(dir + "/" + sub);
  bench::WritePng(dir + "/img/small.png", bench::PhotoLike(1, kSmall.height, kSmall.width), kSmall.height,
                  kSmall.width);
  for (int k = 0; k < kLargePerSample; ++k) {
    bench::WritePng(fmt::format("{}/img/large{}.png", dir, k), bench::PhotoLike(10 + k, kLarge.height, kLarge.width),
                    kLarge.height, kLarge.width);
  }
  for (int f = 0; f < kVideoFrames; ++f) {
    bench::WritePng(fmt::format("{}/video/f{}.png", dir, f), bench::PhotoLike(20 + f, kFrame.height, kFrame.width),
                    kFrame.height, kFrame.width);
  }
  bench::WriteAudioClip(dir + "/audio/clip.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, 1.0, 3);
  std::string lines;
  for (int i = 0; i < kLines; ++i) lines += ManifestLine(i % 6).dump() + "\n";
  WriteText(dir + "/train.jsonl", lines);
  WriteText(dir + "/spec.toml", SpecText());
  return dir + "/spec.toml";
}

// `compiled` (of `spec` under `options`) simulated under the wavefront and
// FIFO policies on the same kSimulatedBatches sampled global batches (each
// sample's kind drawn from the spec's mix, as the compiler's simulation
// draws it).
struct PolicySteps {
  double wavefront = 0, fifo = 0;
  double ratio() const { return fifo / wavefront; }
};
PolicySteps SimulatePolicies(const compiler::Spec& spec, const compiler::CompileOptions& options,
                             const compiler::CompileResult& compiled) {
  auto effective = compiler::EffectiveSpec(spec, options);
  if (!effective.ok()) throw std::runtime_error(effective.status().ToString());
  const compiler::CostModel model(compiler::DevicesOf(*effective), effective->data.global_batch);
  compiler::SimulationSettings settings;
  settings.seed = effective->data.seed;
  settings.seq_len = effective->data.seq_len;
  settings.modalities = effective->data.modalities;
  settings.draws = compiler::DrawsOf(*effective);
  settings.batches = kSimulatedBatches;
  PolicySteps out;
  for (const auto policy : {maestro::scheduler::Policy::kWavefront, maestro::scheduler::Policy::kFifo}) {
    const compiler::SimulatedStep sim =
        compiler::SimulateSectioned(model, compiled.workload, compiled.assignment, settings, policy);
    if (!sim.ok) throw std::runtime_error("the simulation failed: " + sim.error);
    (policy == maestro::scheduler::Policy::kWavefront ? out.wavefront : out.fifo) = sim.step_seconds;
  }
  return out;
}

// "vit 1 rank (mb 4); llm ...": the plan's sections as the report lists them.
std::string SectionsText(const maestro::plan::Plan& plan) {
  std::string text;
  for (const auto& s : plan.sections) {
    const auto& c = s.config;
    text += fmt::format("{}{} (TP{} PP{} CP{} DP{} mb{})", text.empty() ? "" : "; ", s.name, c.tp, c.pp, c.cp, c.dp,
                        c.micro_batch);
  }
  return text;
}

void AddSimulated(const std::string& prefix, const PolicySteps& steps, const maestro::plan::Plan& plan,
                  nlohmann::json& out) {
  out[prefix + "simulated_wavefront_vs_fifo"] = steps.ratio();
  out[prefix + "simulated_wavefront_step_seconds"] = steps.wavefront;
  out[prefix + "simulated_fifo_step_seconds"] = steps.fifo;
  out[prefix + "plan"] = SectionsText(plan);
}

// Removes the scratch folder however the bench ends, unless `keep`
// (`maestro-bench mix -- --keep`: the workload and the runs stay for a look).
struct Scratch {
  std::string dir;
  bool keep = false;
  ~Scratch() {
    if (keep) {
      std::fprintf(stderr, "maestro-bench mix: the workload and the runs are in %s\n", dir.c_str());
      return;
    }
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

}  // namespace

MAESTRO_BENCHMARK(mix,
                  "wavefront vs FIFO on a realistic mix (text, images, large images, a video, audio): "
                  "simulated and measured") {
  const auto start = std::chrono::steady_clock::now();
  const Scratch scratch{bench::ScratchDir("mix"),
                        std::find(options.args.begin(), options.args.end(), "--keep") != options.args.end()};
  const std::string spec_path = WriteWorkload(scratch.dir);
  nlohmann::json out;

  // The local plan: simulated under both policies.
  const compiler::Spec spec = bench::ParsedSpecFile(spec_path);
  const compiler::CompileOptions local = bench::LocalCompileOptions(compiler::Grouping::kSectioned);
  const compiler::CompileResult compiled = bench::CompiledOrThrow(spec, local);
  const PolicySteps simulated = SimulatePolicies(spec, local, compiled);
  AddSimulated("", simulated, compiled.plan, out);
  out["simulated_batches"] = kSimulatedBatches;
  // What `maestro run` would choose by itself (sectioned, or every section
  // fused on every rank), and why.
  const compiler::GroupingChoice automatic =
      bench::CompiledOrThrow(spec, bench::LocalCompileOptions(compiler::Grouping::kAuto)).grouping;
  out["local_auto_grouping"] = automatic.fused ? "fused" : "sectioned";
  out["local_auto_grouping_why"] = automatic.why;

  // The scale case: the video-heavy Qwen2.5-VL-7B on its cluster.
  const compiler::Spec video = bench::ParsedSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/qwen25vl_7b_video.toml");
  compiler::CompileOptions cluster;
  cluster.grouping = compiler::Grouping::kSectioned;
  const compiler::CompileResult video_compiled = bench::CompiledOrThrow(video, cluster);
  AddSimulated("video_spec_", SimulatePolicies(video, cluster, video_compiled), video_compiled.plan, out);

  // Real runs of the local plan under each policy.
  const int64_t steps = options.quick ? 4 : 30;
  const int rounds = options.quick ? 1 : 3;
  const std::string worker = maestro::cli::SelfDirectory() + "/maestro-worker";
  maestro::plan::Plan wavefront = bench::LocalPlannedOf(compiled, steps).plan;
  wavefront.schedule_policy = "wavefront";
  maestro::plan::Plan fifo = wavefront;
  fifo.schedule_policy = "fifo";
  std::vector<double> ratios, wavefront_rates, fifo_rates, step_ratios;
  int measured_steps = 0;
  for (int r = 0; r < rounds; ++r) {
    bench::RunFigures w, f;
    bench::RunRotated({[&] { w = bench::RunPlan(worker, wavefront, scratch.dir, fmt::format("r{}_wavefront", r)); },
                       [&] { f = bench::RunPlan(worker, fifo, scratch.dir, fmt::format("r{}_fifo", r)); }},
                      r);
    ratios.push_back(bench::Rate(w) / bench::Rate(f));
    wavefront_rates.push_back(bench::Rate(w));
    fifo_rates.push_back(bench::Rate(f));
    measured_steps = w.steps;
    // Both runs train the same batches in the same order (the same seed):
    // step i under FIFO over step i under the wavefront.
    for (size_t i = 0; i < w.step_seconds.size() && i < f.step_seconds.size(); ++i) {
      step_ratios.push_back(f.step_seconds[i] / w.step_seconds[i]);
    }
  }
  out["measured_wavefront_vs_fifo"] = bench::MedianOf(ratios);
  out["measured_wavefront_vs_fifo_rounds"] = ratios;
  out["measured_wavefront_vs_fifo_step_median"] = bench::MedianOf(step_ratios);
  out["wavefront_samples_per_s"] = bench::MedianOf(wavefront_rates);
  out["fifo_samples_per_s"] = bench::MedianOf(fifo_rates);
  const double batch = static_cast<double>(compiled.plan.data.global_batch);
  out["predicted_wavefront_vs_fifo"] = simulated.ratio();
  out["predicted_wavefront_samples_per_s"] = batch / simulated.wavefront;
  out["predicted_fifo_samples_per_s"] = batch / simulated.fifo;
  out["rounds"] = rounds;
  out["steps_measured"] = measured_steps;
  out["global_batch"] = compiled.plan.data.global_batch;
  out["manifest_lines"] = kLines;
  out["cores"] = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}
