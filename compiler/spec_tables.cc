// SPDX-License-Identifier: Apache-2.0
#include "compiler/spec_tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/shell.h"
#include "plan/native_vision.h"
#include "plan/teacher_rows.h"

namespace maestro::compiler::internal {

namespace {

// Values that go on an `#SBATCH --opt=VALUE` line: no whitespace, quotes or
// shell metacharacters, so neither Slurm's parser nor a shell can split them.
bool IsSbatchValue(const std::string& s, const std::string& extra_chars) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool plain = IsPlainShellWord(std::string(1, c));
    if (!plain && extra_chars.find(c) == std::string::npos) return false;
  }
  return true;
}

bool IsIdentifier(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

bool IsSlurmTime(const std::string& s) {
  if (s == "UNLIMITED" || s == "infinite") return true;
  if (s.empty() || s.size() > 16) return false;
  int colons = 0, dashes = 0;
  for (char c : s) {
    if (c == ':') {
      ++colons;
    } else if (c == '-') {
      ++dashes;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return colons <= 2 && dashes <= 1 && s.front() != ':' && s.back() != ':' && s.front() != '-' && s.back() != '-';
}

}  // namespace

std::string JoinPath(const std::string& base, const std::string& rel) {
  if (rel.empty() || rel.front() == '/' || base.empty() || base == ".") return rel;
  return base + "/" + rel;
}

// ---- [job], [cluster], [data] ----------------------------------------------------

void ReadJob(Diagnostics& d, const toml::table& t, JobSpec& job) {
  TableReader r(d, t, "[job]");
  job.pos = r.pos();
  if (r.String("name", &job.name) && !IsIdentifier(job.name)) {
    d.Error(r.PosOfKey("name"), "job.name must be 1-64 letters, digits, '_' or '-'");
  }
  auto sbatch_word = [&](const char* key, std::string* out, const std::string& extra) {
    if (r.String(key, out) && !out->empty() && !IsSbatchValue(*out, extra)) {
      d.Error(r.PosOfKey(key), fmt::format("job.{} = '{}' contains a character that cannot go on an #SBATCH line "
                                           "(whitespace, quotes or shell metacharacters)",
                                           key, *out));
    }
  };
  sbatch_word("account", &job.account, "");
  sbatch_word("partition", &job.partition, "");
  sbatch_word("qos", &job.qos, "");
  sbatch_word("output", &job.output, "");
  sbatch_word("error", &job.error, "");
  if (r.String("time", &job.time) && !IsSlurmTime(job.time)) {
    d.Error(r.PosOfKey("time"), fmt::format("job.time = '{}' is not a Slurm time limit (e.g. \"90\", \"04:00:00\", "
                                            "\"2-00:00:00\")",
                                            job.time));
  }
  r.Bool("requeue", &job.requeue);
  r.Int("signal_seconds", &job.signal_seconds, 0, 65535);
  if (r.String("signal", &job.signal) && job.signal != "USR1" && job.signal != "USR2" && job.signal != "TERM") {
    d.Error(r.PosOfKey("signal"), fmt::format("job.signal = '{}' must be USR1, USR2 or TERM (the worker checkpoints "
                                              "on USR1 and TERM){}",
                                              job.signal, Suggest(job.signal, {"USR1", "USR2", "TERM"})));
  }
  if (r.String("work_dir", &job.work_dir) && !IsSingleLine(job.work_dir)) {
    d.Error(r.PosOfKey("work_dir"), "job.work_dir must be one line");
  }
  r.Int("steps", &job.steps, 0, int64_t{1} << 40);
  if (r.Int("epochs", &job.epochs, 1, 1 << 20) && job.steps > 0) {
    d.Error(r.PosOfKey("epochs"), fmt::format("job.epochs = {} and job.steps = {} both set the job's length; give one "
                                              "(epochs: passes over the data, [data] samples or the index giving its "
                                              "size; steps: optimizer steps)",
                                              job.epochs, job.steps));
  }
  r.Int("checkpoint_every", &job.checkpoint_every, 0, int64_t{1} << 40);
  r.Number("checkpoint_minutes", &job.checkpoint_minutes, 0, 7 * 24 * 60.0);
  r.Int("keep_checkpoints", &job.keep_checkpoints, 1, 1000);
  r.Bool("checkpoint_async", &job.checkpoint_async);
  r.Number("comm_timeout_s", &job.comm_timeout_s, 0, 7 * 24 * 3600.0);
  r.Int("max_in_flight", &job.max_in_flight, 0, 1 << 20);
  r.Number("spool_gib", &job.spool_gib, 1e-6, 1e9);
  if (r.String("spool_dtype", &job.spool_dtype) && !plan::IsSpoolDtype(job.spool_dtype)) {
    d.Error(r.PosOfKey("spool_dtype"), fmt::format("job.spool_dtype = '{}' must be bf16, f16 or f32{}", job.spool_dtype,
                                                   Suggest(job.spool_dtype, {"bf16", "f16", "f32"})));
  }
  std::string schedule;
  if (r.String("schedule", &schedule)) {
    // The spec's spellings -> scheduler::PolicyName (what plan.schedule_policy holds).
    static const std::vector<std::pair<std::string, std::string>> kPolicies = {{"wavefront", "wavefront"},
                                                                               {"fifo", "fifo"},
                                                                               {"fifo_contiguous", "fifo-contiguous"},
                                                                               {"fifo-contiguous", "fifo-contiguous"},
                                                                               {"balance_only", "balance"},
                                                                               {"balance", "balance"}};
    auto it = std::find_if(kPolicies.begin(), kPolicies.end(), [&](const auto& p) { return p.first == schedule; });
    if (it == kPolicies.end()) {
      d.Error(r.PosOfKey("schedule"),
              fmt::format("job.schedule = '{}' must be wavefront, fifo, fifo_contiguous or balance_only{}", schedule,
                          Suggest(schedule, {"wavefront", "fifo", "fifo_contiguous", "balance_only"})));
    } else {
      job.schedule = it->second;
    }
  }
  r.Finish();
}

namespace {

// [cluster.gpu.<name>] type / kernels: the tables the step model prices the
// type with (GpuTypeSpec::kernels), or the note saying what instead.
void ReadGpuKernels(Diagnostics& d, TableReader& r, const std::string& base_dir, bool tflops_given, GpuTypeSpec& g) {
  const std::string where = "[cluster.gpu." + g.name + "]";
  const bool has_type = r.String("type", &g.type);
  const bool has_kernels = r.String("kernels", &g.kernels_path);
  r.Number("memory_bandwidth_tbps", &g.memory_bandwidth_tbps, 1e-6, 1e6);
  if (has_type && has_kernels) {
    d.Error(r.PosOfKey("kernels"),
            fmt::format("{}: give `type` (a built-in GPU type) or `kernels` (a profile file), not both", where));
    return;
  }
  std::optional<DeviceProfile> profile;
  if (has_type) {
    auto p = BuiltinDeviceProfile(g.type);
    if (!p.ok()) {
      d.Error(r.PosOfKey("type"), fmt::format("{}: type = '{}': {}", where, g.type, p.status().message()));
      return;
    }
    profile = *p;
    g.kernels_origin = "builtin:" + g.type;
    if (!tflops_given) g.tflops_bf16 = p->peak_flops / 1e12;
  } else if (has_kernels) {
    if (g.kernels_path.empty() || !IsSingleLine(g.kernels_path)) {
      d.Error(
          r.PosOfKey("kernels"),
          fmt::format("{}: kernels must be the path of a device profile (maestro profile --kernels -o FILE)", where));
      return;
    }
    auto p = LoadDeviceProfileFile(JoinPath(base_dir, g.kernels_path));
    if (!p.ok()) {
      d.Error(r.PosOfKey("kernels"),
              fmt::format("{}: kernels = '{}': {} (write one with `maestro profile --kernels -o FILE` on the "
                          "machine)",
                          where, g.kernels_path, p.status().message()));
      return;
    }
    profile = *p;
    g.kernels_origin = "file:" + g.kernels_path;
    if (!tflops_given) g.tflops_bf16 = p->peak_flops / 1e12;
  } else if (!g.cpu) {
    auto p = BuiltinDeviceProfile(kDefaultDeviceProfile);
    if (!p.ok()) {  // a build without compiler/devices/h100_sxm.json
      d.Error(g.pos, fmt::format("{}: {}", where, p.status().message()));
      return;
    }
    profile = ScaledToPeak(*p, g.tflops_bf16 * 1e12);
    g.kernels_origin = fmt::format("default:{}", kDefaultDeviceProfile);
    g.kernels_note = fmt::format(
        "GPU type '{}' names no `type` or `kernels`: priced with the {} tables scaled by its tflops_bf16 "
        "({:.4g} / {:.4g}); docs/step_model.md, \"Unknown GPU types\"",
        g.name, kDefaultDeviceProfile, g.tflops_bf16, p->peak_flops / 1e12);
  } else {
    g.kernels_note = fmt::format(
        "CPU type '{}' has no `kernels` file: priced with the efficiency curve (mfu {:.2g}); "
        "`maestro profile --kernels -o FILE` measures this machine's tables",
        g.name, g.mfu);
  }
  if (profile && g.memory_bandwidth_tbps > 0) profile->memory_bytes_per_s = g.memory_bandwidth_tbps * 1e12;
  if (profile) g.kernels = std::make_shared<const DeviceProfile>(std::move(*profile));
}

}  // namespace

void ReadCluster(Diagnostics& d, const toml::table& t, const std::string& base_dir, ClusterSpec& c) {
  TableReader r(d, t, "[cluster]");
  c.pos = r.pos();
  r.Int("nodes", &c.nodes, 1, 100000);
  r.Int("gpus_per_node", &c.gpus_per_node, 1, 1024);
  r.String("default_gpu", &c.default_gpu);
  r.Bool("share_nodes", &c.share_nodes);
  r.Number("checkpoint_write_gbps", &c.checkpoint_write_gbps, 1e-3, 1e6);
  if (const toml::table* gpus = r.Table("gpu")) {
    for (const auto& [k, v] : *gpus) {
      GpuTypeSpec g;
      g.name = std::string(k.str());
      g.pos = PosOf(k.source());
      if (!IsIdentifier(g.name))
        d.Error(g.pos, fmt::format("GPU type name '{}' must be letters, digits, '_' or '-'", g.name));
      const toml::table* gt = v.as_table();
      if (!gt) {
        d.Error(PosOf(v.source()), fmt::format("[cluster.gpu.{}] must be a table", g.name));
        continue;
      }
      TableReader gr(d, *gt, "[cluster.gpu." + g.name + "]");
      gr.Bool("cpu", &g.cpu);
      if (g.cpu) {
        g.memory_gb = 4;
        g.tflops_bf16 = 0.1;
        g.intra_node_gbps = 5;
        g.inter_node_gbps = 1;
        g.mfu = 0.5;
      }
      gr.Number("memory_gb", &g.memory_gb, 1e-3, 1e6);
      gr.Number("tflops_bf16", &g.tflops_bf16, 1e-6, 1e9);
      gr.Number("intra_node_gbps", &g.intra_node_gbps, 1e-6, 1e9);
      gr.Number("inter_node_gbps", &g.inter_node_gbps, 1e-6, 1e9);
      gr.Number("mfu", &g.mfu, 0.01, 1.0);
      ReadGpuKernels(d, gr, base_dir, gt->get("tflops_bf16") != nullptr, g);
      gr.Int("nodes", &g.nodes, 1, 100000);
      gr.Int("gpus_per_node", &g.gpus_per_node, 1, 1024);
      if (gr.String("partition", &g.partition) && !g.partition.empty() && !IsSbatchValue(g.partition, "")) {
        d.Error(gr.PosOfKey("partition"), fmt::format("partition '{}' cannot go on an #SBATCH line", g.partition));
      }
      if (gr.String("constraint", &g.constraint) && !g.constraint.empty() && !IsSbatchValue(g.constraint, "&|[]*!()")) {
        d.Error(gr.PosOfKey("constraint"),
                fmt::format("constraint '{}' may hold only letters, digits and _.,:/=+@%-&|[]*!()", g.constraint));
      }
      gr.Finish();
      c.gpu_types.push_back(std::move(g));
    }
  }
  r.Finish();
}

namespace {

// An array of 1 or 3 positive (`positive`) or any finite numbers.
void ReadChannelValues(Diagnostics& d, TableReader& r, const std::string& key, bool positive,
                       std::vector<double>* out) {
  const toml::node* n = r.Get(key);
  if (!n) return;
  const toml::array* arr = n->as_array();
  const std::string want = fmt::format("data.{} must be an array of 1 or 3 {}numbers (per channel, on x/255)", key,
                                       positive ? "positive " : "");
  if (!arr || (arr->size() != 1 && arr->size() != 3)) {
    d.Error(r.PosOfKey(key), want);
    return;
  }
  for (const auto& el : *arr) {
    std::optional<double> v = el.value<double>();
    if (!v || !std::isfinite(*v) || (positive && !(*v > 0))) {
      d.Error(PosOf(el.source()), want);
      return;
    }
    out->push_back(*v);
  }
}

// The keys of a JSONL manifest's samples; each is refused without a manifest.
void ReadManifestKeys(Diagnostics& d, TableReader& r, DataSpec& data) {
  const bool manifest = !data.manifest.empty();
  const auto needs_manifest = [&](const std::string& key) {
    if (!manifest) {
      d.Error(r.PosOfKey(key), fmt::format("data.{} applies to the samples of a JSONL manifest; set data.manifest, or "
                                           "drop {}",
                                           key, key));
    }
  };
  if (r.Int("image_token_id", &data.image_token_id, 0, int64_t{1} << 40)) needs_manifest("image_token_id");
  if (r.Int("max_images_per_sample", &data.max_images_per_sample, 1, 4096)) needs_manifest("max_images_per_sample");
  if (r.Int("audio_token_id", &data.audio_token_id, 0, int64_t{1} << 40)) needs_manifest("audio_token_id");
  if (r.Int("max_audios_per_sample", &data.max_audios_per_sample, 1, 4096)) needs_manifest("max_audios_per_sample");
  if (r.String("image_resolution", &data.image_resolution)) {
    if (data.image_resolution != plan::kImageResolutionFixed && data.image_resolution != plan::kImageResolutionNative) {
      d.Error(r.PosOfKey("image_resolution"),
              fmt::format("data.image_resolution = '{}' must be \"fixed\" (every image resized to the ViT's "
                          "image_size) or \"native\" (each image at its own size, the Qwen2-VL family){}",
                          data.image_resolution,
                          Suggest(data.image_resolution, {plan::kImageResolutionFixed, plan::kImageResolutionNative})));
    }
    needs_manifest("image_resolution");
  }
  // Bounds: up to 2^40 pixels (a 1M x 1M image) keeps every product in range.
  if (r.Int("image_min_pixels", &data.image_min_pixels, 1, int64_t{1} << 40)) needs_manifest("image_min_pixels");
  if (r.Int("image_max_pixels", &data.image_max_pixels, 1, int64_t{1} << 40)) needs_manifest("image_max_pixels");
  if (r.Int("video_token_id", &data.video_token_id, 0, int64_t{1} << 40)) needs_manifest("video_token_id");
  if (r.String("on_bad_sample", &data.on_bad_sample)) {
    if (data.on_bad_sample != "error" && data.on_bad_sample != "skip") {
      d.Error(r.PosOfKey("on_bad_sample"),
              fmt::format("data.on_bad_sample = '{}' must be \"error\" (stop at the first bad sample) or \"skip\" "
                          "(log, count and leave it out){}",
                          data.on_bad_sample, Suggest(data.on_bad_sample, {"error", "skip"})));
    }
    needs_manifest("on_bad_sample");
  }
  if (r.Bool("allow_absolute_image_paths", &data.allow_absolute_image_paths)) {
    needs_manifest("allow_absolute_image_paths");
  }
  const size_t means = data.image_mean.size(), stds = data.image_std.size();
  ReadChannelValues(d, r, "image_mean", false, &data.image_mean);
  ReadChannelValues(d, r, "image_std", true, &data.image_std);
  if (data.image_mean.size() != means) needs_manifest("image_mean");
  if (data.image_std.size() != stds) needs_manifest("image_std");
}

}  // namespace

namespace {

// A modality's [[data.modality.mix]] entries (compiler/sample_mix.h checks
// them against the encoder once the models are known).
std::vector<MixEntry> ReadModalityMix(Diagnostics& d, TableReader& modality) {
  std::vector<MixEntry> out;
  const toml::node* n = modality.Get("mix");
  if (!n) return out;
  const toml::array* arr = n->as_array();
  if (!arr || arr->empty()) {
    d.Error(PosOf(n->source()), "data.modality.mix must be a non-empty array of tables: [[data.modality.mix]]");
    return out;
  }
  constexpr int64_t kMaxSide = int64_t{1} << 20, kMaxFrames = int64_t{1} << 16;
  for (const auto& el : *arr) {
    const toml::table* t = el.as_table();
    if (!t) {
      d.Error(PosOf(el.source()), "each [[data.modality.mix]] must be a table");
      continue;
    }
    TableReader r(d, *t, "[[data.modality.mix]]");
    MixEntry e;
    e.pos = r.pos();
    r.Number("weight", &e.weight, 1e-9, 1e9);
    r.Int("count", &e.count, 1, 1 << 16);
    r.Int("height", &e.height, 1, kMaxSide);
    r.Int("width", &e.width, 1, kMaxSide);
    r.Int("frames", &e.frames, 1, kMaxFrames);
    r.Finish();
    out.push_back(e);
  }
  return out;
}

}  // namespace

void ReadData(Diagnostics& d, const toml::table& t, const std::string& base_dir, DataSpec& data) {
  TableReader r(d, t, "[data]");
  data.pos = r.pos();
  if (r.String("manifest", &data.manifest)) {
    if (!IsSingleLine(data.manifest)) {
      d.Error(r.PosOfKey("manifest"), "data.manifest must be one line");
    } else if (!data.manifest.empty()) {
      data.manifest = JoinPath(base_dir, data.manifest);
    }
  }
  if (r.String("corpus", &data.corpus)) {
    if (!IsSingleLine(data.corpus) || data.corpus.empty()) {
      d.Error(r.PosOfKey("corpus"), "data.corpus must be one non-empty line: a Megatron corpus prefix");
    } else if (!data.manifest.empty()) {
      d.Error(r.PosOfKey("corpus"), "data.corpus and data.manifest exclude each other: keep one");
    }
    data.corpus = JoinPath(base_dir, data.corpus);
  }
  if (r.String("test_corpus", &data.test_corpus)) {
    if (!IsSingleLine(data.test_corpus) || data.test_corpus.empty()) {
      d.Error(r.PosOfKey("test_corpus"), "data.test_corpus must be one non-empty line: a Megatron corpus prefix");
    } else if (data.corpus.empty()) {
      d.Error(r.PosOfKey("test_corpus"),
              "data.test_corpus is the held-out split of a Megatron corpus: set data.corpus (the training corpus) "
              "too, or remove test_corpus");
    }
    data.test_corpus = JoinPath(base_dir, data.test_corpus);
  }
  if (r.String("sample_rule", &data.sample_rule) && data.sample_rule != "pack" && data.sample_rule != "split") {
    d.Error(r.PosOfKey("sample_rule"), fmt::format("data.sample_rule = '{}' must be \"pack\" or \"split\"{}",
                                                   data.sample_rule, Suggest(data.sample_rule, {"pack", "split"})));
  }
  r.Int("eos_id", &data.eos_id, -1, int64_t{1} << 40);
  r.Int("pad_id", &data.pad_id, 0, int64_t{1} << 40);
  ReadManifestKeys(d, r, data);
  r.Int("samples", &data.samples, 1, int64_t{1} << 40);
  if (!r.Int("global_batch", &data.global_batch, 1, 1 << 24) && !t.get("global_batch"))
    r.RequireMissing("global_batch");
  if (!r.Int("seq_len", &data.seq_len, 1, 1 << 24) && !t.get("seq_len")) r.RequireMissing("seq_len");
  int64_t seed = 0;
  if (r.Int("seed", &seed, 0, std::numeric_limits<int64_t>::max())) data.seed = static_cast<uint64_t>(seed);
  if (r.String("dataset", &data.dataset) && !data.dataset.empty() && !data.corpus.empty()) {
    d.Error(r.PosOfKey("dataset"), "data.dataset (built-in data) and data.corpus exclude each other: keep one");
  }
  if (!data.dataset.empty() && !data.manifest.empty()) {
    d.Error(r.PosOfKey("dataset"), "data.dataset (built-in data) and data.manifest exclude each other: keep one");
  }
  if (!data.dataset.empty() && data.dataset != "fashion_mnist_captions" && data.dataset != "text") {
    d.Error(r.PosOfKey("dataset"),
            fmt::format("data.dataset = '{}' must be \"fashion_mnist_captions\", \"text\" or \"\" (chosen from the "
                        "modalities){}",
                        data.dataset, Suggest(data.dataset, {"fashion_mnist_captions", "text"})));
  }
  if (const toml::node* n = r.Get("modality")) {
    const toml::array* arr = n->as_array();
    if (!arr) {
      d.Error(PosOf(n->source()), "data.modality must be an array of tables: [[data.modality]]");
    } else {
      for (const auto& el : *arr) {
        if (data.modalities.size() == static_cast<size_t>(kMaxModalities)) {
          // The runtime's scheduler holds a sample's tokens per modality in a
          // fixed array; a plan with more would be refused by `maestro run`.
          d.Error(PosOf(el.source()),
                  fmt::format("more than {} [[data.modality]] tables (this is one of {}): the runtime schedules at "
                              "most {} modalities; merge some",
                              kMaxModalities, arr->size(), kMaxModalities));
          break;
        }
        const toml::table* mt = el.as_table();
        if (!mt) {
          d.Error(PosOf(el.source()), "each [[data.modality]] must be a table");
          continue;
        }
        TableReader mr(d, *mt, "[[data.modality]]");
        plan::ModalityDesc m;
        if (!mr.String("name", &m.name)) {
          if (!mt->get("name")) mr.RequireMissing("name");
        } else if (!IsIdentifier(m.name) || m.name == "always") {
          d.Error(mr.PosOfKey("name"),
                  fmt::format("modality name '{}' must be an identifier other than 'always'", m.name));
        }
        if (!mr.Number("fraction", &m.fraction, 1e-9, 1.0) && !mt->get("fraction")) mr.RequireMissing("fraction");
        mr.Int("tokens", &m.tokens, 0, 1 << 24);
        std::vector<MixEntry> mix = ReadModalityMix(d, mr);
        if (!mix.empty() && mt->get("tokens")) {
          d.Error(mr.PosOfKey("tokens"),
                  fmt::format("modality '{}' has both tokens and a [[data.modality.mix]]: the mix gives each sample's "
                              "tokens; drop tokens",
                              m.name));
        }
        mr.Finish();
        for (const auto& other : data.modalities) {
          if (other.name == m.name) d.Error(mr.pos(), fmt::format("modality '{}' is declared twice", m.name));
        }
        data.modalities.push_back(m);
        data.modality_pos.push_back(mr.pos());
        data.modality_mixes.push_back(std::move(mix));
      }
    }
  }
  r.Finish();
}

// ---- [[section]], [[edge]], [[profile]] ----------------------------------------

namespace {

void ReadOptimizer(Diagnostics& d, const toml::table& t, const std::string& where, plan::OptimizerDesc& o) {
  TableReader r(d, t, where);
  if (r.String("kind", &o.kind) && o.kind != "adamw" && o.kind != "sgd") {
    d.Error(r.PosOfKey("kind"), fmt::format("optimizer kind '{}' is not supported (adamw, sgd){}", o.kind,
                                            Suggest(o.kind, {"adamw", "sgd"})));
  }
  r.Number("lr", &o.lr, 0, 10);
  r.Number("weight_decay", &o.weight_decay, 0, 10);
  r.Number("beta1", &o.beta1, 0, 1);
  r.Number("beta2", &o.beta2, 0, 1);
  r.Number("grad_clip", &o.grad_clip, 0, 1e9);
  r.Int("warmup_steps", &o.warmup_steps, 0, int64_t{1} << 40);
  if (r.String("schedule", &o.schedule) && o.schedule != "cosine" && o.schedule != "constant") {
    d.Error(r.PosOfKey("schedule"), fmt::format("schedule '{}' must be cosine or constant{}", o.schedule,
                                                Suggest(o.schedule, {"cosine", "constant"})));
  }
  r.Finish();
}

void ReadLoss(Diagnostics& d, const toml::table& t, const std::string& where, plan::LossDesc& loss) {
  TableReader r(d, t, where + " loss");
  if (r.String("kind", &loss.kind) && loss.kind != "lm" && loss.kind != "kd") {
    d.Error(r.PosOfKey("kind"), fmt::format("{}: loss kind '{}' must be lm (next-token cross-entropy) or kd "
                                            "(distillation from a teacher's hidden states){}",
                                            where, loss.kind, Suggest(loss.kind, {"lm", "kd"})));
  }
  r.Number("alpha", &loss.kd_alpha, 0.0, 1.0);
  r.Number("temperature", &loss.temperature, 1e-3, 1e3);
  int64_t top_k = 0;
  if (r.Int("top_k", &top_k, 0, int64_t{1} << 22)) loss.top_k = static_cast<int>(top_k);
  int64_t draws = 0;
  if (r.Int("draws", &draws, 1, plan::kMaxSampledDraws)) loss.draws = static_cast<int>(draws);
  if (loss.kind == "lm") {
    for (const char* key : {"alpha", "temperature", "top_k", "draws"}) {
      if (t.get(key)) {
        d.Error(r.PosOfKey(key), fmt::format("{}: loss.{} applies to kind = \"kd\" only; remove it or set "
                                             "kind = \"kd\"",
                                             where, key));
      }
    }
  }
  r.Finish();
}

}  // namespace

void ReadSection(Diagnostics& d, const toml::table& t, SectionSpec& s, std::vector<EdgeSpec>& edges,
                 const std::string& base_dir) {
  TableReader r(d, t, "[[section]]");
  s.pos = r.pos();
  if (!r.String("name", &s.name)) {
    if (!t.get("name")) r.RequireMissing("name");
  } else if (!IsIdentifier(s.name)) {
    d.Error(r.PosOfKey("name"), fmt::format("section name '{}' must be 1-64 letters, digits, '_' or '-'", s.name));
  }
  const std::string where = s.name.empty() ? "[[section]]" : "section '" + s.name + "'";
  if (!r.String("model", &s.model) && !t.get("model")) r.RequireMissing("model");
  s.model_pos = r.PosOfKey("model");
  std::string mode;
  if (r.String("mode", &mode)) {
    if (mode == "train") {
      s.mode = plan::SectionMode::kTrain;
    } else if (mode == "forward") {
      s.mode = plan::SectionMode::kForward;
    } else {
      d.Error(r.PosOfKey("mode"), fmt::format("{}: mode '{}' must be train or forward{}", where, mode,
                                              Suggest(mode, {"train", "forward"})));
    }
  }
  r.String("activation", &s.activation);
  s.activation_pos = r.PosOfKey("activation");
  r.Int("tokens", &s.tokens, 1, 1 << 24);
  r.Int("tp", &s.tp, 1, 1024);
  r.Int("pp", &s.pp, 1, 1024);
  r.Int("cp", &s.cp, 1, 1024);
  r.Int("ep", &s.ep, 1, 1024);
  r.Int("dp", &s.dp, 1, 1 << 20);
  r.Int("micro_batch", &s.micro_batch, 1, 1 << 16);
  // recompute: true (full), false (none), or "none" / "selective" / "full".
  if (const toml::node* n = r.Get("recompute"); n != nullptr && n->is_string()) {
    const std::string g = n->as_string()->get();
    if (g == "none" || g == "selective" || g == "full") {
      s.recompute = g == "full"        ? plan::RecomputeGranularity::kFull
                    : g == "selective" ? plan::RecomputeGranularity::kSelective
                                       : plan::RecomputeGranularity::kNone;
    } else {
      d.Error(r.PosOfKey("recompute"), fmt::format("{}: recompute = \"{}\": must be true, false, \"none\", "
                                                   "\"selective\" or \"full\"",
                                                   where, g));
    }
  } else {
    bool rc = false;
    if (r.Bool("recompute", &rc))
      s.recompute = rc ? plan::RecomputeGranularity::kFull : plan::RecomputeGranularity::kNone;
  }
  r.String("gpu_type", &s.gpu_type);
  s.gpu_type_pos = r.PosOfKey("gpu_type");
  if (r.Int("run_ahead", &s.run_ahead, 0, plan::kMaxRunAhead)) {
    s.run_ahead_pos = r.PosOfKey("run_ahead");
    if (s.run_ahead > 0 && s.mode != plan::SectionMode::kForward) {
      d.Error(s.run_ahead_pos, fmt::format("{}: run_ahead applies to a forward-only section (mode = \"forward\"); "
                                           "remove it or set run_ahead = 0",
                                           where));
    }
  }
  if (const toml::table* o = r.Table("optimizer")) ReadOptimizer(d, *o, where + " optimizer", s.optimizer);
  std::string init;
  if (r.String("init", &init)) {
    if (init.empty() || !IsSingleLine(init)) {
      d.Error(r.PosOfKey("init"), fmt::format("{}: init must be the path of a .mckpt checkpoint or of a run "
                                              "directory, on one line",
                                              where));
    } else {
      s.init_from = JoinPath(base_dir, init);  // may not exist yet: an earlier run writes it
    }
  }
  if (r.String("init_section", &s.init_section)) {
    if (!IsIdentifier(s.init_section)) {
      d.Error(r.PosOfKey("init_section"),
              fmt::format("{}: init_section '{}' must be a section name (letters, digits, '_' or '-')", where,
                          s.init_section));
    } else if (!t.get("init")) {
      d.Error(r.PosOfKey("init_section"),
              fmt::format("{}: init_section names a section of the checkpoint in 'init'; add init = \"<run dir "
                          "or .mckpt>\"",
                          where));
    }
  }
  if (const toml::table* l = r.Table("loss")) {
    s.has_loss = true;
    s.loss_pos = r.PosOfKey("loss");
    ReadLoss(d, *l, where, s.loss);
  }
  std::vector<std::string> inputs;
  std::vector<SourcePos> input_pos;
  if (r.StringList("inputs", &inputs, &input_pos)) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      EdgeSpec e;
      const auto dot = inputs[i].find('.');
      e.from = inputs[i].substr(0, dot);
      e.tensor = dot == std::string::npos ? e.from + "_out" : inputs[i].substr(dot + 1);
      e.to = s.name;
      e.pos = e.from_pos = input_pos[i];
      e.to_pos = s.pos;
      edges.push_back(e);
    }
  }
  r.Finish();
}

void ReadEdge(Diagnostics& d, const toml::table& t, EdgeSpec& e) {
  TableReader r(d, t, "[[edge]]");
  e.pos = r.pos();
  if (!r.String("from", &e.from) && !t.get("from")) r.RequireMissing("from");
  if (!r.String("to", &e.to) && !t.get("to")) r.RequireMissing("to");
  e.from_pos = r.PosOfKey("from");
  e.to_pos = r.PosOfKey("to");
  if (!r.String("tensor", &e.tensor)) e.tensor = e.from + "_out";
  r.Int("fanout", &e.fanout, 1, 1 << 20);
  r.Int("fanin", &e.fanin, 1, 1 << 20);
  r.Int("bytes_per_sample", &e.bytes_per_sample, 1, int64_t{1} << 40);
  if (e.fanout && e.fanin) d.Error(r.PosOfKey("fanin"), "an edge pins fanout or fanin, not both");
  r.Finish();
}

void ReadProfile(Diagnostics& d, const toml::table& t, ProfileSpec& p) {
  TableReader r(d, t, "[[profile]]");
  p.pos = r.pos();
  if (!r.String("section", &p.section) && !t.get("section")) r.RequireMissing("section");
  r.Int("gpus", &p.gpus, 1, 1 << 20);
  r.Int("micro_batch", &p.micro_batch, 1, 1 << 16);
  if (!r.Number("seconds", &p.seconds, 1e-9, 1e9) && !t.get("seconds")) r.RequireMissing("seconds");
  r.Number("forward_seconds", &p.forward_seconds, 1e-9, 1e9);
  r.Number("optimizer_seconds", &p.optimizer_seconds, 0.0, 1e9);
  if (p.forward_seconds > p.seconds) {
    d.Error(r.PosOfKey("forward_seconds"), "forward_seconds is part of seconds (forward + backward): at most seconds");
  }
  r.Finish();
}

}  // namespace maestro::compiler::internal
