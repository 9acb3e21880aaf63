// SPDX-License-Identifier: Apache-2.0
// The plan: what maestro-compile decides and every worker reads (plan.json).
//
// Owns: the plan.json schema (versioned), its JSON (de)serialization, and the
// pure functions that every module derives from a plan in the same way: the
// rank layout (global rank -> section, het component, TP/CP/DP/PP coordinates)
// and the cross-section links of the fan-out map.
// May call: base, nlohmann-json. Called by: compiler, launcher, runtime,
// scheduler, datalayer.
//
// Rank layout (schema 1 and 2). Het component k runs section k. Global ranks
// are contiguous per component, component 0 first (== SLURM_PROCID in a
// hetjob step).
//
// Rank layout (schema 3): a het component is a node group (`nodes` x
// `tasks_per_node`, one GPU type / partition / constraint) that may host the
// ranks of several sections, so that a 2-GPU ViT and a projector fill the
// rest of the last node the LLM's ranks leave. Global ranks are contiguous per
// component, component 0 first; inside a component every section's ranks are
// contiguous, and the index of a rank inside the component says its section:
// the component's sections in the order of their first_rank (which need not
// be the order of plan.sections). Slurm places a component's tasks in blocks
// of tasks_per_node, so the component's index i runs on its node
// i / tasks_per_node. Plans of schema 1 and 2 read as schema 3 plans whose
// every component hosts one section. NodeGroupsOf lists the components.
//
// Inside a section of tp*cp*dp*pp ranks, the local rank is
//     local = tp_rank + tp*(cp_rank + cp*(dp_rank + dp*pp_rank))
// i.e. TP fastest, then CP, then DP, then PP (Megatron's "tp-cp-dp-pp").
//
// Fan-out. On an edge from U (dp = a) to D (dp = b), exactly one of a | b or
// b | a holds. Fan-out k = b/a: U's DP rank i feeds D's DP ranks i*k..i*k+k-1.
// Fan-in k = a/b: U's DP ranks j*k..j*k+k-1 feed D's DP rank j. A link joins
// the sending rank of an upstream replica (last PP stage, tp = cp = 0) and the
// receiving rank of a downstream replica (first PP stage, tp = cp = 0);
// activations go down it and, when U trains, gradients come back up.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace maestro::plan {

// 2: fused sections (SectionPlan::components). A reader of version 2 reads
// version 1 plans (they have none); a version-1 reader refuses version 2.
// 3: sections share nodes (a het component is a node group hosting the ranks
// of one or more sections, see "Rank layout (schema 3)" above). A reader of
// version 3 reads versions 1 and 2; a version-2 reader refuses version 3.
inline constexpr int kPlanSchemaVersion = 3;
// The most global batches a forward-only section may run ahead (SectionPlan::run_ahead).
inline constexpr int kMaxRunAhead = 8;
inline constexpr int kOldestReadablePlanSchemaVersion = 1;

enum class SectionMode { kTrain, kForward };
const char* SectionModeName(SectionMode mode);

enum class ModelKind { kDecoder, kVit, kAudioEncoder, kProjector };
const char* ModelKindName(ModelKind kind);

// The shape of a section's model. Fields that a kind does not use stay 0.
struct ModelDesc {
  ModelKind kind = ModelKind::kDecoder;
  std::string source;  // "builtin" or the path of an imported HF config.json
  // A Hugging Face checkpoint folder (config.json + *.safetensors, joined to
  // the spec's folder) whose tensors are the model's initial weights, loaded
  // by every rank (its TP slice only) before step 0; "" = none. A section's
  // `init_from` (a Maestro run) takes precedence. Added in schema 1 (optional).
  std::string weights;
  int64_t hidden = 0;  // d_model
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;    // GQA; == heads for MHA
  int64_t head_dim = 0;    // 0: hidden / heads
  int64_t ffn_hidden = 0;  // SwiGLU / MLP inner size
  int64_t vocab = 0;       // decoder only
  bool tie_embeddings = false;
  int64_t experts = 0;  // MoE: 0 = dense
  int64_t experts_per_token = 0;
  int64_t moe_ffn_hidden = 0;
  // Encoders
  int64_t image_size = 0, patch_size = 0, channels = 0;  // ViT
  int64_t mel_bins = 0, audio_frames = 0;                // audio encoder
  // Projector
  int64_t in_dim = 0, out_dim = 0;
  // Everything else an imported config carried that the cost model reads.
  std::map<std::string, double> extra;
};

struct OptimizerDesc {
  std::string kind = "adamw";
  double lr = 3e-4;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.95;
  double grad_clip = 1.0;
  int64_t warmup_steps = 0;
  std::string schedule = "cosine";  // "constant" | "cosine"
};

// The loss a training section computes when it is a sink of the graph.
//   "lm": next-token cross-entropy over the sample's target tokens.
//   "kd": (1 - kd_alpha) * CE + kd_alpha * T^2 * KL(teacher_T || student_T),
//         T = temperature; teacher logits = the teacher's output head applied
//         (in this section) to the hidden states that arrive on the edge;
//         top_k > 0 restricts the KL to the teacher's top-k tokens per position.
struct LossDesc {
  std::string kind = "lm";
  double kd_alpha = 0.5;
  double temperature = 1.0;
  int top_k = 0;
  // Draws per position of a "teacher_sampled" edge's rows (0: the default,
  // plan/teacher_rows.h kDefaultSampledDraws).
  int draws = 0;
};

// What one micro-batch of n samples costs on one replica of a section, as the
// compiler predicted it (from measured profiles when it had them): forward
// share * (fixed_seconds + n * seconds_per_sample), the rest is backward when
// the section trains; optimizer_seconds once per step (DP sync included). The
// runtime's scheduler and its predicted timeline use the same numbers.
// seconds_per_sample == 0: absent (plans of older compilers).
struct MicroBatchCost {
  double fixed_seconds = 0.0;
  double seconds_per_sample = 0.0;
  double forward_share = 1.0;
  double optimizer_seconds = 0.0;
  bool measured = false;  // from a profile rather than the analytic model
};

// Activation recomputation of a section's transformer blocks
// (runtime/recompute.h; Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models"):
//   kNone       autograd keeps every block's activations;
//   kSelective  the attention core softmax(QK^T)V is run again in backward,
//               the rest kept (Megatron's --recompute-granularity selective);
//   kFull       each block keeps only its input and runs its whole forward
//               again in backward (--recompute-granularity full).
enum class RecomputeGranularity { kNone, kSelective, kFull };
const char* RecomputeGranularityName(RecomputeGranularity g);  // "none", "selective", "full"

// One section's parallel configuration (chosen by the planner).
struct ParallelConfig {
  int tp = 1, pp = 1, cp = 1, ep = 1, dp = 1;
  int micro_batch = 1;     // samples per micro-batch on one DP replica
  bool recompute = false;  // full activation recomputation (kFull)
  // Selective recomputation (kSelective), when `recompute` is false. Absent
  // in older plans (reads false); `recompute` wins when both are true.
  bool recompute_selective = false;
  int zero_stage = 1;  // 0 or 1 (optimizer states sharded over DP)
  // Decoder layers per pipeline stage, stage 0 first (pp entries, each >= 1,
  // summing to the model's layers); empty (and absent from plan.json): the
  // even split, StageLayerSpan. Written only when the compiler or a user
  // chooses another split (docs/pipeline.md).
  std::vector<int64_t> pp_layers = {};  // (= {}: aggregate initialisations that stop before it stay warning-free)
  int ranks() const { return tp * pp * cp * dp; }
  RecomputeGranularity recompute_granularity() const {
    return recompute ? RecomputeGranularity::kFull
                     : (recompute_selective ? RecomputeGranularity::kSelective : RecomputeGranularity::kNone);
  }
  void set_recompute_granularity(RecomputeGranularity g) {
    recompute = g == RecomputeGranularity::kFull;
    recompute_selective = g == RecomputeGranularity::kSelective;
  }
};

// Layers [first, end) of a decoder of `layers` blocks that pipeline stage
// `stage` of config.pp holds: config.pp_layers when set, else the even split
// (the first layers % pp stages one layer more: 3 over 2 stages is 2 + 1).
// The one home of the stage split: the runtime (runtime/parallel/pipeline_stages.h) and the
// memory model (compiler/memory_model.h) read it. REQUIRES: 0 <= stage < pp
// <= layers, and pp_layers valid (Validate) when set.
struct StageLayerRange {
  int64_t first = 0, end = 0;
  int64_t count() const { return end - first; }
};
StageLayerRange StageLayerSpan(const ParallelConfig& config, int64_t layers, int stage);

// Placement of one section in its Slurm het component. Schema 1 and 2: the
// component is the section's own (het_component == the section's index).
// Schema 3: the component may host several sections; `nodes`,
// `tasks_per_node`, `gpus_per_task`, `gpu_type`, `partition` and
// `constraint` are the component's, the same in each section it hosts, and
// its sections' ranks fill its nodes but the last one whole.
struct Placement {
  int het_component = 0;
  int first_rank = 0;  // global rank of the section's local rank 0
  int nodes = 1;
  int tasks_per_node = 1;
  int gpus_per_task = 0;   // 0 on CPU-only runs
  std::string gpu_type;    // a key of the spec's [cluster.gpu.*]
  std::string partition;   // Slurm partition ("" = job default)
  std::string constraint;  // Slurm --constraint ("" = none)
};

struct EdgePlan;

struct SectionPlan {
  std::string name;
  SectionMode mode = SectionMode::kTrain;
  std::string activation = "always";  // "always" or a modality name
  ModelDesc model;
  OptimizerDesc optimizer;
  ParallelConfig config;
  Placement placement;
  // Predicted by the cost model (seconds per step, bytes per GPU).
  double predicted_step_seconds = 0.0;
  double predicted_memory_bytes = 0.0;
  // Added in schema 1 (optional; 0 / "" when absent).
  int64_t tokens_per_sample = 0;       // tokens one active sample brings to this section
  double active_fraction = 1.0;        // share of the global batch that activates it
  double predicted_utilization = 0.0;  // useful FLOPs / (GPUs * peak * step)
  std::string planner_only;            // runtime features it lacks ("" = the runtime runs it)
  // Added in schema 1 (optional), read by the runtime:
  // Initial weights: "" = from the run's seed; else a checkpoint file (.mckpt)
  // or a run directory (its last committed checkpoint) whose state of section
  // `init_section` ("" = this section's name) is loaded before step 0.
  std::string init_from;
  std::string init_section;
  LossDesc loss;
  MicroBatchCost cost;  // added in schema 1 (optional)
  // Added in schema 2 (optional; empty: a section of one component, itself).
  // A fused section runs several components of the workload on the same
  // ranks: every rank runs them one after another inside each micro-batch
  // (a topological order of `component_edges`), with autograd across them in
  // one process, as the one-process reference does. Each component is a
  // SectionPlan of its own (name, mode, activation, model, optimizer, loss,
  // init_from; its config and placement are the fused section's), and its
  // name is what checkpoints, `maestro export --section` and evaluations see.
  // The fused section's own name, mode (train when a component trains),
  // activation ("always") and cost line describe the whole. A fused section
  // has no edges to other sections (the compiler fuses whole graphs:
  // docs/spec.md, "Grouping").
  std::vector<SectionPlan> components;
  std::vector<EdgePlan> component_edges;
  bool fused() const { return !components.empty(); }
  // Optional, read by the runtime (absent in older plans and written only
  // when non-zero; no schema bump): a forward-only section computes the rows
  // of the next `run_ahead` global batches while the training sections
  // finish the current one (docs/run_ahead.md). 0 = off.
  int run_ahead = 0;
};

// The DP rule of an edge, the one every module checks (docs/spec.md):
// DP_from * fanout = DP_to when `fanout` is pinned (> 0), DP_from = DP_to *
// fanin when `fanin` is pinned, and otherwise any two DP degrees: a sample's
// replicas are those whose shares of [0, 1) hold its placement slot
// (scheduler/prepared.h), and replicas u of `from` and d of `to` are linked
// when their shares [u/DP_from, (u+1)/DP_from) and [d/DP_to, (d+1)/DP_to)
// overlap (LinksOfEdge; DP_from + DP_to - gcd links).
bool EdgeDpRuleHolds(int from_dp, int to_dp, int fanout = 0, int fanin = 0);

// True when replica `up` of a section at DP `from_dp` and replica `down` of
// one at DP `to_dp` are linked: their shares of [0, 1) overlap. With one
// degree a multiple k of the other this is the fan-out (down / k == up) or
// fan-in (up / k == down) map.
bool ReplicasLinked(int up, int from_dp, int down, int to_dp);

struct EdgePlan {
  std::string from, to;           // section names
  std::string tensor;             // e.g. "image_embeddings", "teacher_hidden"
  int64_t bytes_per_sample = 0;   // activation bytes crossing per sample
  bool carries_gradient = false;  // true when `from` trains
  // Added in schema 1 (optional; 0 when absent): DP_to / DP_from when the
  // downstream DP is a multiple of the upstream one (fan-out), DP_from / DP_to
  // when the upstream one is a multiple of it (fan-in); both 0 when neither
  // divides the other (links by overlapping shares: EdgeDpRuleHolds).
  int fanout = 0;
  int fanin = 0;
  double seconds_per_sample = 0.0;  // transfer time of one sample's tensor (optional; 0: unknown)
};

// Written for readers of plan.json (tools, people); derived by FillLayout()
// from the functions below, which stay the truth for every module.
struct SectionLayout {
  std::string section;
  int het_component = 0;
  int first_rank = 0;
  int ranks = 0;
  std::string order = "tp-cp-dp-pp";  // fastest-varying first
  std::vector<std::vector<int>> tp_groups, cp_groups, dp_groups, pp_groups;
};

struct ModalityDesc {
  std::string name;       // e.g. "image"
  double fraction = 0.0;  // share of samples that carry it
  int64_t tokens = 0;     // tokens it adds to a sample
};

// transformers' Qwen2VLImageProcessor defaults (min_pixels = 56 * 56,
// max_pixels = 28 * 28 * 1280): [data] image_min_pixels / image_max_pixels.
inline constexpr int64_t kDefaultImageMinPixels = 56 * 56;
inline constexpr int64_t kDefaultImageMaxPixels = 28 * 28 * 1280;

struct DataPlan {
  std::string manifest;  // JSONL sample manifest, absolute or relative to the working directory ("" = none)
  int64_t global_batch = 1;
  int64_t seq_len = 1;
  uint64_t seed = 0;
  int64_t steps = 0;  // 0 = one epoch
  // Added in schema 1 (optional): a built-in dataset used when `manifest` is
  // "": "fashion_mnist_captions" (images + captions mixed with text) or
  // "text" (text only); "" = chosen from the modalities (image -> captions).
  std::string dataset;
  std::vector<ModalityDesc> modalities;
  // Added in schema 1 (optional): a Megatron-LM indexed corpus
  // (<prefix>.bin + .idx; "" = none) and how its documents become samples
  // ("pack" | "split", docs/data.md), the end-of-document and pad token ids.
  std::string corpus;
  std::string sample_rule = "pack";
  int64_t eos_id = -1;
  int64_t pad_id = 0;
  // Added in schema 1 (optional): how the samples of a JSONL `manifest` are
  // read (docs/data.md, "### Training on a manifest"). image_token_id: the
  // placeholder id whose positions take a ViT's rows (-1: none; the built-in
  // captions use their own, datasets::kImage); max_images_per_sample (K):
  // a ViT section's output row per sample holds K images' rows, zero-padded
  // past the sample's own; on_bad_sample: "error" | "skip"; image paths
  // outside the manifest's folder only with allow_absolute_image_paths;
  // image_mean / image_std: per channel on x/255 (empty: the ViT layout's).
  int64_t image_token_id = -1;
  int64_t max_images_per_sample = 1;
  std::string on_bad_sample = "error";
  bool allow_absolute_image_paths = false;
  std::vector<double> image_mean, image_std;
  // Added in schema 1 (optional): a manifest's audio (docs/data.md, "##
  // Audio"). audio_token_id: the placeholder id whose positions take an
  // audio encoder's rows (-1: none); max_audios_per_sample (K_audio): an
  // audio section's output row per sample holds that many clips' rows,
  // zero-padded past the sample's own.
  int64_t audio_token_id = -1;
  int64_t max_audios_per_sample = 1;
  // Added in schema 1 (optional): native-resolution images and videos
  // (plan/native_vision.h; docs/data.md, "### Native resolution (the
  // Qwen2-VL family)"). image_resolution: "fixed" (every image resized to the
  // ViT's image_size) or "native" (each image at its smart_resize size,
  // within image_min_pixels..image_max_pixels, the defaults of transformers'
  // Qwen2VLImageProcessor); video_token_id: a video's placeholder (-1: none;
  // Qwen2-VL's <|video_pad|> = 151656). K (max_images_per_sample) counts
  // images and videos.
  std::string image_resolution = "fixed";
  int64_t image_min_pixels = kDefaultImageMinPixels;
  int64_t image_max_pixels = kDefaultImageMaxPixels;
  int64_t video_token_id = -1;
  // Added in schema 1 (optional): a held-out Megatron corpus ("" = none),
  // cut by the same rule: the corpus source's test split, whose next-token
  // loss the run reports at its end (eval.json).
  std::string test_corpus;
};

// One cross-section link (see LinksOfEdge below).
struct Link {
  int edge = -1;  // index into plan.edges
  int up_dp = 0, down_dp = 0;
  int up_rank = -1;    // global rank that sends activations
  int down_rank = -1;  // global rank that receives them
};

// The default wall time between checkpoints ([job] checkpoint_minutes). A
// node that dies without a signal (no preemption notice, no time limit)
// loses the work since the last checkpoint: half the interval on average,
// 15 minutes of every GPU of the job here. A save costs the state's size over
// the file system's write speed (a 7B student with AdamW, 112 GB, takes
// about a minute at 2 GB/s), paid once per interval: a few percent at 30
// minutes. Megatron-LM and torchtitan leave the interval to the user
// (--save-interval, checkpoint.interval in steps); a step count cannot
// follow a step time that the plan changes, so Maestro's default is in time.
inline constexpr double kDefaultCheckpointMinutes = 30.0;
// The committed checkpoints a run keeps ([job] keep_checkpoints): two, so
// that one found damaged on a resume (a file system that lost writes after
// the commit) leaves an older one to restore by hand (docs/datalayer.md).
inline constexpr int kDefaultKeepCheckpoints = 2;

// The spools' disk when the spec names none ([job] spool_gib): 1 TiB on the
// job's work_dir, the 16 GiB a rank's spool had before the key existed times
// 64 writing ranks. A 7B student's top-128 rows at 4K tokens take 3 MiB a
// sample (plan/teacher_rows.h), so 1 TiB holds about 350K samples.
inline constexpr double kDefaultSpoolGib = 1024.0;

// A spool element type's name (Plan::spool_dtype): "bf16", "f16" or "f32".
bool IsSpoolDtype(const std::string& name);

struct Plan {
  int schema_version = kPlanSchemaVersion;
  std::string job_name;
  std::string spec_path;
  std::vector<SectionPlan> sections;  // schema 1, 2: index == het component
  std::vector<EdgePlan> edges;
  DataPlan data;
  double predicted_step_seconds = 0.0;
  std::string work_dir = ".";  // checkpoints, spool, metrics
  // Added in schema 1 (optional): the derived rank layout and every link of
  // every edge (FillLayout); empty when absent.
  std::vector<SectionLayout> layout;
  std::vector<Link> links;
  // Added in schema 1 (optional), read by the runtime:
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: none by count)
  // Added in schema 1 (optional): wall minutes between checkpoints, measured
  // by rank 0 from the start (or the last checkpoint) to a step's end; 0 =
  // none. Beside checkpoint_every: whichever comes first.
  double checkpoint_minutes = kDefaultCheckpointMinutes;
  // Added in schema 1 (optional): the committed checkpoints a run keeps (the
  // newest; an older one is deleted only after a newer one is committed).
  int keep_checkpoints = kDefaultKeepCheckpoints;
  // Added in schema 1 (optional): a checkpoint due by checkpoint_every or
  // checkpoint_minutes is written by a background thread while training goes
  // on (the step loop pays the copy of the rank's state, not the write); it
  // is committed at the first step end where every rank's file is durable.
  // A run's last checkpoint, and one on a signal, are written at once.
  bool checkpoint_async = true;
  double comm_timeout_s = 0.0;                // 0: the worker's default (60 s or $MAESTRO_COMM_TIMEOUT_S)
  std::string schedule_policy = "wavefront";  // scheduler::PolicyFromName
  // Added in schema 1 (optional): a training section that feeds others keeps
  // at most this many micro-batches between forward and backward (their
  // activations held; scheduler::ScheduleOptions::max_in_flight, which may go
  // one over where two capped branches meet); 0 = no cap. The compiler picks
  // it from its memory model (docs/scheduler.md, "In-flight cap").
  int schedule_max_in_flight = 0;
  // Added in schema 1 (optional): > 0 when every rank runs on one machine
  // whose `shared_cores` cores they share (the embedded default, `maestro
  // run`; ranks may outnumber cores): the step simulator then shares the
  // cores among the ranks computing at each moment. 0: one device per rank.
  int shared_cores = 0;
  // Added in schema 1 (optional): the disk every spool of forward-only
  // outputs may take together, in GiB (each writing rank gets its share:
  // runtime/output_spool.h), and the element type of spooled hidden states
  // and top-K values ("bf16", "f16", "f32"; plan/teacher_rows.h). Absent:
  // "f32", what spools held before the key (a spec's default is "bf16").
  double spool_gib = kDefaultSpoolGib;
  std::string spool_dtype = "f32";
  // Added in schema 1 (optional): whether a frozen section's spooled rows are
  // read back in later epochs (and later starts), as the compiler chose over
  // the whole job (compiler/job_pricing.h: an every-epoch alternative is
  // false). Absent: true, what the runtime did before the key.
  bool spool_reuse = true;
  // Added in schema 1 (optional): the job's "offline" alternative: before
  // its first step, each replica of a section that keeps a spool (a fused
  // section: of its frozen components that do) runs the frozen part alone
  // over its share of the train split (sample id % dp == replica), filling
  // the spool; training then reads every row it holds. Requires
  // spool_reuse. Absent: false.
  bool offline_spool_pass = false;

  int world_size() const;
  // REQUIRES: name is a section of this plan; returns -1 otherwise.
  int section_index(const std::string& name) const;
};

// ---- (de)serialization -------------------------------------------------------
std::string PlanToJson(const Plan& plan, int indent = 2);
// Checks the schema version and the layout invariants (Validate()).
StatusOr<Plan> PlanFromJson(const std::string& text, const std::string& origin = "plan.json");
StatusOr<Plan> LoadPlan(const std::string& path);
Status SavePlan(const Plan& plan, const std::string& path);

// Layout invariants: the sections' ranks tile 0..world_size-1, contiguous per
// section and per component, components numbered in rank order; a
// component's sections agree on its nodes, tasks per node, GPU type,
// partition and constraint, and their ranks fill its nodes but the last one
// whole (schema 1 and 2: component k is section k's alone, tasks == ranks); every
// edge's sections exist and their DP degrees divide one another, no cycles.
Status Validate(const Plan& plan);

// The plan as its components see it: every fused section replaced by its
// components (each with the fused section's config), its component_edges
// among the plan's edges. What the one-process reference, the evaluations
// and `maestro export` run on; ranks are renumbered so that the result
// validates, and do not describe a job's layout. A plan without fused
// sections comes back unchanged.
Plan ExpandFusedSections(const Plan& plan);

// Appends a section with the given degrees after the plan's last rank, all
// its ranks on one node, in its own het component (tests and tools that
// build plans by hand; the compiler places sections itself).
SectionPlan& AppendSingleNodeSection(Plan& plan, const std::string& name, int tp, int cp, int dp, int pp);

// ---- rank layout -------------------------------------------------------------
// One Slurm het component: a node group and the sections it hosts.
struct NodeGroup {
  int het_component = 0;
  int first_rank = 0;         // global rank of the component's first task
  int ranks = 0;              // tasks in the component (its sections' ranks)
  int nodes = 1;              // nodes it holds
  int tasks_per_node = 1;     // at most; every node but the last holds this many
  std::vector<int> sections;  // indexes into plan.sections, in rank order
};
// The plan's het components in order (component k at index k).
// REQUIRES: Validate(plan).ok().
std::vector<NodeGroup> NodeGroupsOf(const Plan& plan);
// The nodes of a component a section's ranks run on: [first, last] indexes of
// the component's nodes (Slurm's block placement of its tasks).
struct NodeSpan {
  int first = 0, last = 0;
};
NodeSpan NodeSpanOf(const Plan& plan, int section);

struct RankCoords {
  int section = -1;    // index into plan.sections (its het component: placement.het_component)
  int local_rank = 0;  // rank inside the section
  int tp = 0, cp = 0, dp = 0, pp = 0;
  // Expert parallelism (docs/moe.md): EP groups are carved from the DP
  // ranks, ep consecutive DP ranks each. ep_rank = dp % ep (which experts
  // this rank holds), expert_dp = dp / ep (its index among the ranks
  // holding the same experts).
  int ep_rank = 0, expert_dp = 0;
};

StatusOr<RankCoords> CoordsOfRank(const Plan& plan, int global_rank);
int GlobalRankOf(const Plan& plan, int section, int tp, int cp, int dp, int pp);

// Groups inside a section, as sorted lists of global ranks.
// kEP: the section's ep DP ranks j*ep .. j*ep+ep-1 with this rank's TP, CP
// and PP indexes (the all-to-all of routed tokens); kExpertDP: the dp/ep
// ranks holding the same experts (dp = ep_rank mod ep), over which routed
// experts' gradients are reduced. With ep = 1: kEP is this rank alone,
// kExpertDP is kDP. kDPxCP: the dp * cp ranks with this rank's TP and PP
// indexes (CP ranks hold equal replicas, so gradients are reduced and ZeRO-1
// shards over DP and CP together, Megatron-LM's
// get_data_parallel_group(with_context_parallel=True); docs/gradient_sync.md);
// sorted, a rank's index in it is dp * cp_size + cp. With cp = 1 it is kDP.
enum class GroupKind { kTP, kCP, kDP, kPP, kEP, kExpertDP, kDPxCP };
inline constexpr int kGroupKinds = 7;
const char* GroupKindName(GroupKind kind);
// The group of `kind` that contains `global_rank`.
std::vector<int> GroupOf(const Plan& plan, int global_rank, GroupKind kind);
// Every group of `kind` in section `section`.
std::vector<std::vector<int>> GroupsOf(const Plan& plan, int section, GroupKind kind);

// ---- cross-section links ----------------------------------------------------
// Fills plan.layout, plan.links and every edge's fanout/fanin from the
// sections' configs and placements. REQUIRES: Validate(plan).ok().
void FillLayout(Plan& plan);

// All links of edge `edge_index`: every pair of replicas whose shares of
// [0, 1) overlap (ReplicasLinked), in order of the shares (the fan-out or
// fan-in map where one DP degree divides the other).
std::vector<Link> LinksOfEdge(const Plan& plan, int edge_index);
// Every link in the plan that `global_rank` is an endpoint of.
std::vector<Link> LinksOfRank(const Plan& plan, int global_rank);

}  // namespace maestro::plan
