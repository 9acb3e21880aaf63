// SPDX-License-Identifier: Apache-2.0
// The workload spec's in-memory form: one struct per table of spec.toml
// (docs/spec.md documents each key and its default), the place in the file
// each value came from, the runtime's limits on a spec, and the located
// messages every reader of the spec writes ("spec.toml:12:3: ...", "did you
// mean"). Values only: compiler/spec.h reads a spec into them (through
// compiler/toml_reader.h, compiler/spec_tables.h and compiler/spec_graph.h,
// which all use these types).
//
// Owns: SourcePos, JobSpec, GpuTypeSpec, ClusterSpec, DataSpec, ModelSpec,
// SectionSpec, EdgeSpec, ProfileSpec, Spec and their lookups, kMaxSections,
// kMaxModalities, kMaxEdges, AtPos, EditDistance, Suggest.
// May call: base (text), plan (ModelDesc), compiler/device_profile.h, fmt.
// Thread safety: values; the functions are pure.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/device_profile.h"
#include "plan/plan.h"

namespace maestro::compiler {

// The runtime's limits, which the spec reader enforces with a located error
// (docs/spec.md, "Limits"): the scheduler holds at most this many sections
// and a sample's tokens per modality in fixed arrays (scheduler/problem.h,
// checked equal in spec.cc), so `maestro run` refuses a plan with more.
inline constexpr int kMaxSections = 32;   // [[section]] tables
inline constexpr int kMaxModalities = 8;  // [[data.modality]] tables
// Edges ([[edge]] tables and sections' inputs): as many as a DAG of
// kMaxSections sections has pairs.
inline constexpr int kMaxEdges = kMaxSections * (kMaxSections - 1) / 2;

// A place in the spec, 1-based; {0,0} when the value was defaulted.
struct SourcePos {
  int line = 0;
  int column = 0;
};

struct JobSpec {
  std::string name = "maestro";
  std::string account;    // "" = none
  std::string partition;  // default partition of every component ("" = Slurm's default)
  std::string qos;
  std::string time = "01:00:00";
  bool requeue = false;
  int signal_seconds = 0;       // > 0: #SBATCH --signal=B:<signal>@<seconds>
  std::string signal = "USR1";  // USR1 | USR2 | TERM
  std::string output = "maestro-%j.out";
  std::string error;  // "" = merged with output
  std::string work_dir = ".";
  int64_t steps = 0;                                            // 0 = one epoch
  int64_t epochs = 0;                                           // passes over the data (0: by steps; not with steps)
  int64_t checkpoint_every = 0;                                 // steps between checkpoints (0: none by count)
  double checkpoint_minutes = plan::kDefaultCheckpointMinutes;  // wall minutes between checkpoints (0: none)
  int keep_checkpoints = plan::kDefaultKeepCheckpoints;         // committed checkpoints kept (>= 1)
  bool checkpoint_async = true;                                 // periodic checkpoints written by a background thread
  double comm_timeout_s = 0.0;                                  // 0: the worker's default
  std::string schedule = "wavefront";                           // a scheduler::PolicyName (canonical spelling)
  // The in-flight cap of training sections that feed others
  // (plan::Plan::schedule_max_in_flight): -1 = the compiler chooses, 0 = no
  // cap, N = at most N micro-batches between forward and backward.
  int max_in_flight = -1;
  double spool_gib = plan::kDefaultSpoolGib;  // the spools' disk, all writing ranks together
  std::string spool_dtype = "bf16";           // spooled hidden states and top-K values
  SourcePos pos;
};

// One kind of accelerator (or a CPU slot when cpu = true) and the nodes that
// carry it. Bandwidths are per GPU, in GB/s.
struct GpuTypeSpec {
  std::string name;
  bool cpu = false;                // CPU-only ranks: gpus_per_task 0
  double memory_gb = 80.0;         // per GPU (per task when cpu)
  double tflops_bf16 = 989.0;      // dense peak per GPU
  double intra_node_gbps = 450.0;  // NVLink, per GPU, one direction
  double inter_node_gbps = 50.0;   // network, per GPU
  double mfu = 0.55;               // best achievable share of peak for large GEMMs
  int nodes = 0;                   // 0: [cluster].nodes
  int gpus_per_node = 0;           // 0: [cluster].gpus_per_node
  std::string partition;           // "" = [job].partition
  std::string constraint;          // Slurm --constraint ("" = none)
  // The step model's tables (compiler/step_model.h, docs/step_model.md):
  // `type` names a built-in device profile (compiler/devices/<type>.json),
  // `kernels` a profile file (`maestro profile --kernels -o FILE`), resolved
  // against the spec's folder. Neither: a GPU type is priced with the
  // default tables (h100_sxm) scaled to its tflops_bf16 (kernels_note says
  // so); a CPU slot with the legacy efficiency curve.
  std::string type, kernels_path;
  double memory_bandwidth_tbps = 0;  // > 0: overrides the tables' memory bandwidth
  std::shared_ptr<const DeviceProfile> kernels;
  std::string kernels_origin, kernels_note;
  SourcePos pos;
};

// [cluster] checkpoint_write_gbps's default: 2 GB/s per node. An assumed
// figure, not a measurement of any cluster: what one client node sustains
// writing a few large files to a parallel file system (the same figure as
// plan/plan.h kDefaultCheckpointMinutes' reasoning). A user sets their file
// system's, measured for instance with `maestro-bench checkpoint` on a node
// (its raw write throughput; docs/datalayer.md records this machine's).
inline constexpr double kDefaultCheckpointWriteGBps = 2.0;

struct ClusterSpec {
  int nodes = 1;
  int gpus_per_node = 8;
  std::string default_gpu;  // "" = the first declared type
  // Sections of one GPU type (and partition, constraint) may share nodes:
  // one het component per node group (plan schema 3). false: every section
  // its own het component on whole nodes or part of one node of its own.
  bool share_nodes = true;
  // The file system's sustained write speed per node, GB/s (1e9 bytes), for
  // the checkpoint's predicted write (compiler/checkpoint_cost.h).
  double checkpoint_write_gbps = kDefaultCheckpointWriteGBps;
  std::vector<GpuTypeSpec> gpu_types;
  // Set by EffectiveSpec for --local (never by the reader): one node whose
  // gpus_per_node slots every section shares.
  bool local = false;
  int local_cores = 0;  // --local-cores (0: one core per slot)
  SourcePos pos;
  const GpuTypeSpec* Find(const std::string& name) const;
};

// One kind of sample in a [[data.modality.mix]] (compiler/sample_mix.h):
// drawn with `weight` among the samples that carry the modality, it holds
// `count` items of `height` x `width` pixels (native resolution; 0 = the
// ViT's image_size), videos of `frames` frames when frames > 0.
struct MixEntry {
  double weight = 1.0;
  int64_t count = 1;
  int64_t height = 0, width = 0;
  int64_t frames = 0;
  SourcePos pos;
};

struct DataSpec {
  std::string manifest;  // resolved against the spec's folder ("" = none)
  int64_t global_batch = 0;
  int64_t seq_len = 0;
  int64_t samples = 0;  // the dataset's size as given (0: counted where cheap: compiler/job_pricing.h)
  uint64_t seed = 0;
  std::string dataset;  // "" | "fashion_mnist_captions" | "text" (built-in data when manifest is "")
  // A Megatron-LM indexed corpus (<prefix>.bin + .idx), resolved against the
  // spec's folder, and how its documents become samples.
  std::string corpus;
  std::string sample_rule = "pack";  // "pack" | "split"
  int64_t eos_id = -1;               // appended after every document (-1 = none)
  int64_t pad_id = 0;
  // A JSONL manifest's samples (docs/data.md, "### Training on a manifest"):
  // the placeholder id (-1 = unset), K images per sample at most, the bad
  // sample policy, paths outside the manifest's folder, mean/std overrides.
  int64_t image_token_id = -1;
  int64_t max_images_per_sample = 1;
  std::string on_bad_sample = "error";  // "error" | "skip"
  bool allow_absolute_image_paths = false;
  std::vector<double> image_mean, image_std;
  // ... and its audio clips (docs/data.md, "## Audio"): the placeholder id
  // (-1 = unset), K clips per sample at most.
  int64_t audio_token_id = -1;
  int64_t max_audios_per_sample = 1;
  // Native-resolution images and videos (plan/native_vision.h): "fixed" |
  // "native", smart_resize's pixel bounds, the video placeholder id (-1 =
  // unset).
  std::string image_resolution = "fixed";
  int64_t image_min_pixels = plan::kDefaultImageMinPixels;
  int64_t image_max_pixels = plan::kDefaultImageMaxPixels;
  int64_t video_token_id = -1;
  // A held-out corpus of the same tokenizer (resolved like `corpus`): the
  // test split whose loss the run reports at its end. Needs `corpus`.
  std::string test_corpus;
  std::vector<plan::ModalityDesc> modalities;
  std::vector<SourcePos> modality_pos;
  // Per modality (parallel to `modalities`): its [[data.modality.mix]]
  // entries, empty when it has none (every sample carries `tokens`).
  std::vector<std::vector<MixEntry>> modality_mixes;
  SourcePos pos;
};

// A named model: a built-in shape or an imported Hugging Face config.json.
struct ModelSpec {
  std::string name;
  plan::ModelDesc desc;
  SourcePos pos;
};

struct SectionSpec {
  std::string name;
  std::string model;  // a key of [models]
  plan::SectionMode mode = plan::SectionMode::kTrain;
  std::string activation = "always";  // "always" or a modality name
  int64_t tokens = 0;                 // tokens per active sample; 0 = derived
  plan::OptimizerDesc optimizer;
  // Pins (0 / empty = the planner chooses).
  int tp = 0, pp = 0, cp = 0, ep = 0, dp = 0, micro_batch = 0;
  // `recompute`: true = full, false = none, or "none" / "selective" / "full".
  std::optional<plan::RecomputeGranularity> recompute;
  std::string gpu_type;
  // Initial weights: "" = the run's seed; else a .mckpt file or a run
  // directory, already joined to the spec's directory (need not exist yet).
  std::string init_from;
  std::string init_section;  // "" = this section's name
  // Global batches a forward-only section computes ahead (docs/run_ahead.md);
  // -1 = the planner chooses.
  int run_ahead = -1;
  plan::LossDesc loss;
  bool has_loss = false;  // `loss` was written in the spec
  SourcePos pos, model_pos, activation_pos, gpu_type_pos, loss_pos, run_ahead_pos;
};

struct EdgeSpec {
  std::string from, to, tensor;
  int fanout = 0;                // pinned DP_to / DP_from (0 = planner)
  int fanin = 0;                 // pinned DP_from / DP_to (0 = planner)
  int64_t bytes_per_sample = 0;  // 0 = derived from the upstream model
  SourcePos pos, from_pos, to_pos;
};

// A measured section time (the runtime writes these): one micro-batch of
// `micro_batch` samples on one replica of `gpus` GPUs (tp*pp*cp) takes
// `seconds` (forward+backward for train sections, forward otherwise).
struct ProfileSpec {
  std::string section;
  int gpus = 1;
  int micro_batch = 1;
  double seconds = 0.0;            // forward (+ backward) of one micro-batch on one replica
  double forward_seconds = 0.0;    // its forward part (0: unknown; the model's 1 : 2 split)
  double optimizer_seconds = 0.0;  // the replica's optimizer step per training step (0: unknown)
  SourcePos pos;
};

struct Spec {
  std::string path;      // as given (messages use it)
  std::string base_dir;  // directory of the spec; relative paths start here
  JobSpec job;
  ClusterSpec cluster;
  DataSpec data;
  std::vector<ModelSpec> models;
  std::vector<SectionSpec> sections;
  std::vector<EdgeSpec> edges;
  std::vector<ProfileSpec> profiles;

  int section_index(const std::string& name) const;
  const ModelSpec* FindModel(const std::string& name) const;
};

// Formats "path:line:col: message" (or "path: message" without a position),
// one line: control characters, NULs and bytes that are not UTF-8 in the
// path and the message (a spec's strings) are escaped (base/text.h).
std::string AtPos(const std::string& path, SourcePos pos, const std::string& message);

// Levenshtein distance, for "did you mean" suggestions.
int EditDistance(const std::string& a, const std::string& b);
// " (did you mean 'x'?)" or "" when no candidate is close.
std::string Suggest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace maestro::compiler
