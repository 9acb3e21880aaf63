// SPDX-License-Identifier: Apache-2.0
#include "runtime/hf_export.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (fmt 11+ keeps it here; libtorch 2.11 carries fmt 12)
#include <malloc.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/checks.h"
#include "base/read_file.h"
#include "datalayer/checkpoint_store.h"
#include "datalayer/sample_index.h"
#include "hf/checkpoint.h"
#include "hf/name_map.h"
#include "plan/model_desc.h"
#include "plan/mrope.h"
#include "runtime/checkpoint_slices.h"
#include "runtime/checkpointing.h"
#include "runtime/hf_weights.h"
#include "runtime/models/encoders.h"
#include "runtime/torch_call.h"

namespace maestro::runtime {

namespace fs = std::filesystem;

namespace {

bool IsFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// (plan.json, run directory) of options.run.
Status LocateRun(const ExportOptions& options, ExportSummary* summary) {
  const fs::path run(options.run);
  std::error_code ec;
  if (!fs::is_directory(run, ec)) {
    return Status::NotFound(
        fmt::format("'{}': no such directory (give the `maestro run -o` folder or its run/)", options.run));
  }
  if (IsFile(run / "run" / "index.sqlite")) {
    summary->run_dir = (run / "run").string();
  } else if (IsFile(run / "index.sqlite")) {
    summary->run_dir = run.string();
  } else {
    return Status::NotFound(
        fmt::format("'{}' holds no run (no index.sqlite in it or in its run/): has it been trained with `maestro "
                    "run`?",
                    options.run));
  }
  if (!options.plan_path.empty()) {
    summary->plan_path = options.plan_path;
    return Status::Ok();
  }
  for (const fs::path& candidate : {run / "plan.json", fs::path(summary->run_dir) / "plan.json",
                                    fs::path(summary->run_dir).parent_path() / "plan.json"}) {
    if (IsFile(candidate)) {
      summary->plan_path = candidate.string();
      return Status::Ok();
    }
  }
  return Status::NotFound(
      fmt::format("no plan.json in '{}' or beside its run directory: pass --plan PLAN.json", options.run));
}

// The checkpoint to export: a committed step, the last commit, or the
// initial weights.
StatusOr<datalayer::CheckpointData> ReadCheckpoint(const ExportOptions& options, ExportSummary* summary) {
  MAESTRO_ASSIGN_OR_RETURN(auto index, datalayer::SampleIndex::Open(summary->run_dir + "/index.sqlite"));
  MAESTRO_ASSIGN_OR_RETURN(std::vector<int64_t> committed, index->CommittedCheckpoints());
  const std::string checkpoints = summary->run_dir + "/checkpoints";
  std::string file;
  if (options.step >= 0) {
    if (std::find(committed.begin(), committed.end(), options.step) == committed.end()) {
      return Status::NotFound(fmt::format(
          "{}: no committed checkpoint of step {} (committed and kept: {}; leave out --step for the last)",
          summary->run_dir, options.step, committed.empty() ? "none" : fmt::format("{}", fmt::join(committed, ", "))));
    }
    // A sharded checkpoint's directory, or a format-1 file of an older run.
    std::error_code ec;
    file = fs::is_directory(fs::path(checkpoints) / datalayer::ShardedCheckpointDirName(options.step), ec)
               ? datalayer::ShardedCheckpointDirName(options.step)
               : datalayer::CheckpointStore::FileName(options.step);
  } else {
    MAESTRO_ASSIGN_OR_RETURN(auto commit, index->LastCommit());
    if (commit.checkpoint_step < 0) {
      auto initial = ReadInitialWeightsFile(summary->run_dir);
      if (!initial.ok()) {
        return Status::NotFound(
            fmt::format("{}: no committed checkpoint and no initial weights: train it (`maestro run`), or write its "
                        "initial weights with `maestro run ... --steps 0`",
                        summary->run_dir));
      }
      summary->checkpoint = InitialWeightsDir(summary->run_dir);
      summary->step = -1;
      return initial;
    }
    file = commit.checkpoint_file;
  }
  MAESTRO_ASSIGN_OR_RETURN(auto store, datalayer::CheckpointStore::Open(checkpoints, 1000));
  MAESTRO_ASSIGN_OR_RETURN(auto data, store->Read(file));
  summary->checkpoint = checkpoints + "/" + file;
  summary->step = data.step;
  return data;
}

// The config.json of the export: the section's weights folder's, its
// imported hf_config (relative to the spec), or one written from the desc.
StatusOr<std::string> ExportConfig(const plan::Plan& plan, const plan::SectionPlan& s, const std::string& torch_dtype) {
  if (!s.model.weights.empty())
    return ReadSmallFile((fs::path(s.model.weights) / hf::kConfigFileName).string(), kMaxConfigBytes, "config.json");
  if (s.model.source != "builtin" && !s.model.source.empty()) {
    fs::path source(s.model.source);
    if (source.is_relative()) source = fs::path(plan.spec_path).parent_path() / source;
    auto text = ReadSmallFile(source.string(), kMaxConfigBytes, "the section's hf_config");
    if (text.ok()) return text;
    return Status::NotFound(fmt::format("section '{}': its config '{}' ({}) cannot be read: {}", s.name, s.model.source,
                                        source.string(), text.status().message()));
  }
  if (s.model.kind == plan::ModelKind::kDecoder) {
    const auto it = s.model.extra.find("max_position_embeddings");
    const int64_t max_positions =
        it != s.model.extra.end() ? static_cast<int64_t>(it->second) : std::max<int64_t>(plan.data.seq_len, 1);
    return DecoderConfigJson(s.model, max_positions, torch_dtype);
  }
  if (s.model.kind == plan::ModelKind::kProjector) {
    nlohmann::json j{{"model_type", "llava_projector"},
                     {"maestro_layout", "llava_projector"},
                     {"in_dim", s.model.in_dim},
                     {"out_dim", s.model.out_dim},
                     {"torch_dtype", torch_dtype}};
    return j.dump(2) + "\n";
  }
  return Status::InvalidArgument(fmt::format(
      "section '{}': a built-in {} has no published Hugging Face layout to export to (describe it with hf_config)",
      s.name, plan::ModelKindName(s.model.kind)));
}

StatusOr<torch::Dtype> DtypeOfName(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return torch::kBFloat16;
  if (name == "fp16" || name == "float16") return torch::kHalf;
  if (name == "fp32" || name == "float32") return torch::kFloat32;
  return Status::InvalidArgument(fmt::format("--dtype '{}': use auto, bf16, fp16 or fp32", name));
}

const char* TorchDtypeName(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kBFloat16: return "bfloat16";
    case torch::kHalf: return "float16";
    default: return "float32";
  }
}

// The config's rope_scaling object of desc's extra.rope_scaling_* keys
// (null when there is no scaling): every parameter written, so that
// compiler/model.cc imports the same ones back.
nlohmann::json RopeScalingJson(const plan::ModelDesc& desc) {
  const plan::RopeScaling s = plan::RopeScalingOf(desc);
  if (s.type == plan::RopeType::kDefault) return nullptr;
  nlohmann::json j{{"rope_type", plan::RopeTypeName(s.type)}, {"factor", s.factor}};
  if (s.type == plan::RopeType::kLlama3 || s.type == plan::RopeType::kYarn) {
    j["original_max_position_embeddings"] = static_cast<int64_t>(s.original_max_position_embeddings);
  }
  if (s.type == plan::RopeType::kLlama3) {
    j["low_freq_factor"] = s.low_freq_factor;
    j["high_freq_factor"] = s.high_freq_factor;
  }
  if (s.type == plan::RopeType::kYarn) {
    j["beta_fast"] = s.beta_fast;
    j["beta_slow"] = s.beta_slow;
    j["truncate"] = s.truncate;
    if (s.attention_factor > 0) j["attention_factor"] = s.attention_factor;
    if (s.mscale > 0) j["mscale"] = s.mscale;
    if (s.mscale_all_dim > 0) j["mscale_all_dim"] = s.mscale_all_dim;
  }
  return j;
}

// The keys every exported decoder config.json has (the Llama-shaped
// families': sizes, RoPE with its scaling, RMSNorm, SiLU), into j.
void AddDecoderConfigKeys(const plan::ModelDesc& desc, int64_t max_positions, nlohmann::json& j) {
  j["hidden_size"] = desc.hidden;
  j["num_hidden_layers"] = desc.layers;
  j["num_attention_heads"] = desc.heads;
  j["num_key_value_heads"] = KvHeads(desc);
  j["head_dim"] = HeadDim(desc);
  j["vocab_size"] = desc.vocab;
  j["max_position_embeddings"] = max_positions;
  j["rms_norm_eps"] = RmsNormEps(desc);
  j["rope_theta"] = RopeTheta(desc);
  if (nlohmann::json scaling = RopeScalingJson(desc); !scaling.is_null()) j["rope_scaling"] = std::move(scaling);
  j["tie_word_embeddings"] = desc.tie_embeddings;
  j["hidden_act"] = "silu";
}

// Gemma 3 text's config.json (model_type gemma3_text, Gemma3TextConfig's
// keys): every layer's kind in layer_types (plan::IsSlidingLayer), and
// sliding_window_pattern too when the desc has one (older transformers read
// only that); compiler/model.cc imports it back to the same desc.
StatusOr<std::string> Gemma3ConfigJson(const plan::ModelDesc& desc, int64_t max_positions,
                                       const std::string& torch_dtype) {
  if (QkvBias(desc) || !QkNorm(desc)) {
    return Status::FailedPrecondition(
        "a Gemma 3 decoder (extra.gemma3) is exported as gemma3_text, which has q/k norms and no q/k/v biases: set "
        "extra.qk_norm = 1 and drop extra.qkv_bias in the spec");
  }
  nlohmann::json j;
  j["architectures"] = {"Gemma3ForCausalLM"};
  j["model_type"] = "gemma3_text";
  AddDecoderConfigKeys(desc, max_positions, j);
  j.erase("hidden_act");  // Gemma's is hidden_activation, below
  j["intermediate_size"] = desc.ffn_hidden;
  auto local = desc.extra.find(plan::kRopeLocalBaseFreqKey);
  j["rope_local_base_freq"] = local != desc.extra.end() ? local->second : RopeTheta(desc);
  j["rope_scaling"] = RopeScalingJson(desc);
  const int64_t window = SlidingWindow(desc);
  // No window: every layer global, whatever sliding_window says.
  j["sliding_window"] = window > 0 ? window : max_positions;
  auto pattern = desc.extra.find(plan::kSlidingWindowPatternKey);
  if (pattern != desc.extra.end() && pattern->second > 0) {
    j["sliding_window_pattern"] = static_cast<int64_t>(pattern->second);
  }
  nlohmann::json types = nlohmann::json::array();
  for (int64_t i = 0; i < desc.layers; ++i) {
    types.push_back(plan::IsSlidingLayer(desc, i) ? "sliding_attention" : "full_attention");
  }
  j["layer_types"] = std::move(types);
  auto scalar = desc.extra.find(plan::kQueryPreAttnScalarKey);  // absent: head_dim (plan::AttentionScale)
  j["query_pre_attn_scalar"] = scalar != desc.extra.end() ? scalar->second : static_cast<double>(HeadDim(desc));
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["attention_bias"] = false;
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

// What an export writes: the section, its name table, the dtypes, config.json.
struct ExportedTensors {
  const plan::SectionPlan* section;
  const hf::WeightNames* names;
  torch::Dtype dtype_out;
  const std::map<std::string, torch::Dtype>* dtype_by_name;
  const std::string* config;
  torch::Dtype DtypeOf(const std::string& hf_name) const {
    auto it = dtype_by_name->find(hf_name);
    return it == dtype_by_name->end() ? dtype_out : it->second;
  }
};

// A sharded (format 2) checkpoint, streamed: each global tensor is read from
// its pieces, converted and appended to its shard file, one tensor in memory
// at a time (a model larger than this machine's memory exports), whatever
// layout wrote it.
Status StreamHfExport(const datalayer::CheckpointData& checkpoint, const ExportedTensors& what,
                      const ExportOptions& options, const std::map<std::string, std::string>& metadata,
                      ExportSummary* summary) {
  std::vector<hf::TensorSpec> specs;
  for (const auto& w : what.names->weights) {
    MAESTRO_ASSIGN_OR_RETURN(hf::TensorDType dtype, HfDtypeOf(what.DtypeOf(w.hf_name)));
    specs.push_back({w.hf_name, dtype, w.shape});
  }
  MAESTRO_ASSIGN_OR_RETURN(auto writer, hf::HfCheckpointWriter::Start(options.out_dir, *what.config, specs,
                                                                      options.max_shard_bytes, metadata));
  CheckpointTensors source(checkpoint);
  const std::string context = fmt::format("{}: section '{}'", summary->checkpoint, what.section->name);
  for (const auto& w : what.names->weights) {
    auto global = source.Read(ModelTensorName(what.section->name, w.maestro_name), w.shape,
                              datalayer::Box{std::vector<int64_t>(w.shape.size(), 0), w.shape});
    if (!global.ok()) return global.status().WithContext(context);
    torch::Tensor out;
    MAESTRO_RETURN_IF_ERROR(TorchCall(context, [&] { out = global->to(what.DtypeOf(w.hf_name)).contiguous(); }));
    *global = torch::Tensor();  // one tensor at a time: the stored copy goes before the append
    const std::string_view bytes(static_cast<const char*>(out.data_ptr()),
                                 static_cast<size_t>(out.numel()) * out.element_size());
    MAESTRO_RETURN_IF_ERROR(writer->Append(w.hf_name, bytes));
    summary->bytes += bytes.size();
    ++summary->tensors;
    out = torch::Tensor();
    // glibc keeps the freed tensors' pages in its heap (a 4 MB tensor freed
    // below the heap's top is not returned); across the tensors of a large
    // model that grew the export's resident set with the model (measured,
    // tests/runtime/hf_export_test.cc: the peaks of a 2- and a 12-block
    // decoder's exports 188 and 312 MiB; with the trim 166 and 171 MiB).
    // The trim hands them back: one tensor resident at a time.
    ::malloc_trim(0);
  }
  return writer->Finish();
}

// A format-1 (.mckpt) checkpoint holds each section's model as one torch
// archive: the model is built, loaded whole and written.
Status WholeModelHfExport(const datalayer::CheckpointData& checkpoint, const ExportedTensors& what,
                          const ExportOptions& options, const std::map<std::string, std::string>& metadata,
                          ExportSummary* summary) {
  const plan::SectionPlan& s = *what.section;
  ModelBuildOptions build;
  build.seed = 0;
  MAESTRO_ASSIGN_OR_RETURN(auto module, BuildModel(s.model, build));
  MAESTRO_RETURN_IF_ERROR(LoadWholeModel(
      checkpoint, s.name, *module,
      fmt::format("{}: section '{}' (does the model fit the plan's desc?)", summary->checkpoint, s.name)));
  MAESTRO_ASSIGN_OR_RETURN(auto tensors, ExportHfTensors(*module, s.model, what.dtype_out, *what.dtype_by_name));
  MAESTRO_RETURN_IF_ERROR(
      hf::WriteHfCheckpoint(options.out_dir, *what.config, TensorsToWrite(tensors), options.max_shard_bytes, metadata));
  summary->tensors = static_cast<int64_t>(tensors.size());
  for (const auto& t : tensors) summary->bytes += t.bytes.size();
  return Status::Ok();
}

// An M-RoPE decoder's config.json: Qwen2-VL's (model_type qwen2_vl, its
// language model's keys at the top level as the published configs have them,
// rope_scaling {"type": "mrope", "mrope_section": [t, h, w]}), which
// compiler/model.cc imports back with part = "text". The vision tower is
// its own section's export (its vision_config). Only Qwen2-VL's shape has
// a family: q/k/v biases, chunked sections, no rope scaling.
StatusOr<std::string> MropeDecoderConfigJson(const plan::ModelDesc& desc, const plan::Mrope& mrope, bool qwen2,
                                             int64_t max_positions, const std::string& torch_dtype) {
  if (!qwen2 || mrope.interleaved || plan::RopeScalingOf(desc).type != plan::RopeType::kDefault ||
      SlidingWindow(desc) > 0) {
    return Status::FailedPrecondition(
        "this decoder has M-RoPE (extra.mrope_section_*) but not Qwen2-VL's shape (q/k/v biases only, chunked "
        "sections, no rope scaling, no sliding window), the one Hugging Face family Maestro exports with M-RoPE");
  }
  nlohmann::json j;
  // A video's time rows scaled by tokens_per_second: Qwen2.5-VL's language model.
  const bool qwen25 = mrope.tokens_per_second > 0;
  j["architectures"] = {qwen25 ? "Qwen2_5_VLForConditionalGeneration" : "Qwen2VLForConditionalGeneration"};
  j["model_type"] = qwen25 ? "qwen2_5_vl" : "qwen2_vl";
  AddDecoderConfigKeys(desc, max_positions, j);
  j["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {mrope.section[0], mrope.section[1], mrope.section[2]}}};
  if (qwen25) j["vision_config"] = {{"tokens_per_second", mrope.tokens_per_second}};
  j["intermediate_size"] = desc.ffn_hidden;
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

// The config.json of a MoE decoder in the layout hf::WeightLayoutOf names
// its tensors: Qwen-MoE's (Qwen3-MoE's with q/k norms, else Qwen2-MoE's)
// or Mixtral's, with the keys compiler/model.cc DecoderFromHf reads back.
StatusOr<std::string> MoeDecoderConfigJson(const plan::ModelDesc& desc, int64_t max_positions,
                                           const std::string& torch_dtype) {
  // The tensor names decide the family: hf::WeightLayoutOf's.
  const bool qwen = hf::WeightLayoutOf(desc) == hf::WeightLayout::kQwenMoe;
  const bool qwen3 = qwen && QkNorm(desc);
  const bool qwen2 = qwen && !qwen3;
  if (qwen3 && (SharedExpertFfnHidden(desc) > 0 || QkvBias(desc))) {
    return Status::FailedPrecondition(
        "this MoE decoder has q/k norms (Qwen3-MoE) and a shared expert or q/k/v biases (Qwen2-MoE): no Hugging Face "
        "family has both, so no config.json can describe it; drop extra.qk_norm, or shared_expert_ffn_hidden and "
        "qkv_bias, in the spec");
  }
  const auto bias_it = desc.extra.find("attn_out_bias");
  if (bias_it != desc.extra.end() && bias_it->second != 0) {
    return Status::FailedPrecondition("no Hugging Face MoE family has an o_proj bias (extra.attn_out_bias)");
  }
  nlohmann::json j;
  const char* type = qwen3 ? "qwen3_moe" : qwen2 ? "qwen2_moe" : "mixtral";
  j["architectures"] = {qwen3 ? "Qwen3MoeForCausalLM" : qwen2 ? "Qwen2MoeForCausalLM" : "MixtralForCausalLM"};
  j["model_type"] = type;
  AddDecoderConfigKeys(desc, max_positions, j);
  j["num_experts_per_tok"] = desc.experts_per_token;
  j["router_aux_loss_coef"] = RouterAuxLossCoef(desc);
  j["output_router_logits"] = false;
  if (SlidingWindow(desc) > 0) {
    j["sliding_window"] = SlidingWindow(desc);
    if (qwen2 || qwen3) j["use_sliding_window"] = true;
  }
  if (!qwen2 && !qwen3) {
    j["num_local_experts"] = desc.experts;
    j["intermediate_size"] = MoeFfnHidden(desc);
  } else {
    j["num_experts"] = desc.experts;
    j["moe_intermediate_size"] = MoeFfnHidden(desc);
    // The dense layers' width; a model without dense layers never reads it.
    j["intermediate_size"] = desc.ffn_hidden > 0 ? desc.ffn_hidden : MoeFfnHidden(desc);
    j["norm_topk_prob"] = NormTopkProb(desc);
    const auto step = desc.extra.find(plan::kDecoderSparseStepKey);
    j["decoder_sparse_step"] = step != desc.extra.end() ? static_cast<int64_t>(step->second) : 1;
    nlohmann::json dense = nlohmann::json::array();
    for (int64_t i = 0; i < desc.layers; ++i) {
      const auto it = desc.extra.find(plan::kMlpOnlyLayerKeyPrefix + std::to_string(i));
      if (it != desc.extra.end() && it->second != 0) dense.push_back(i);
    }
    j["mlp_only_layers"] = std::move(dense);
    if (qwen2) {
      j["shared_expert_intermediate_size"] = SharedExpertFfnHidden(desc);
      j["qkv_bias"] = QkvBias(desc);
    } else {
      j["attention_bias"] = false;
    }
  }
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace

StatusOr<std::string> DecoderConfigJson(const plan::ModelDesc& desc, int64_t max_positions,
                                        const std::string& torch_dtype) {
  if (desc.kind != plan::ModelKind::kDecoder) {
    return Status::InvalidArgument("DecoderConfigJson: the model is not a decoder");
  }
  if (desc.experts > 0) return MoeDecoderConfigJson(desc, max_positions, torch_dtype);
  if (plan::Gemma3(desc)) return Gemma3ConfigJson(desc, max_positions, torch_dtype);
  auto flag = [&](const char* key) {
    auto it = desc.extra.find(key);
    return it != desc.extra.end() && it->second != 0.0;
  };
  const bool qkv_bias = QkvBias(desc);
  const bool attention_bias = flag("attn_out_bias");
  const bool qwen2 = qkv_bias && !attention_bias;
  // Qwen3: RMSNorm of the q and k heads; its attention_bias, like Llama's,
  // puts biases on q, k, v and o together.
  const bool qwen3 = QkNorm(desc);
  if (qwen3 && qwen2) {
    return Status::FailedPrecondition(
        "this decoder has q/k norms (Qwen3) and biases on q, k and v only (Qwen2): no Hugging Face family has both, so "
        "no config.json can describe it; drop extra.qkv_bias or extra.qk_norm in the spec");
  }
  if (const auto mrope = plan::MropeOf(desc)) {
    return MropeDecoderConfigJson(desc, *mrope, qwen2, max_positions, torch_dtype);
  }
  nlohmann::json j;
  j["architectures"] = {qwen3 ? "Qwen3ForCausalLM" : qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = qwen3 ? "qwen3" : qwen2 ? "qwen2" : "llama";
  AddDecoderConfigKeys(desc, max_positions, j);
  j["intermediate_size"] = desc.ffn_hidden;
  if (!qwen2) {
    j["attention_bias"] = attention_bias;
    j["mlp_bias"] = flag("mlp_bias");
  }
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

StatusOr<ExportSummary> ExportSectionToHf(const ExportOptions& options) {
  ExportSummary summary;
  if (options.out_dir.empty()) return Status::InvalidArgument("no output folder: pass -o DIR");
  std::error_code ec;
  if (fs::exists(options.out_dir, ec)) {
    return Status::AlreadyExists(
        fmt::format("'{}' exists: export into a new folder (an export never overwrites one)", options.out_dir));
  }
  MAESTRO_RETURN_IF_ERROR(LocateRun(options, &summary));
  MAESTRO_ASSIGN_OR_RETURN(plan::Plan compiled, plan::LoadPlan(summary.plan_path));
  const plan::Plan plan = plan::ExpandFusedSections(compiled);  // a fused section's components by name
  const int index = plan.section_index(options.section);
  if (index < 0) {
    std::vector<std::string> names;
    for (const auto& s : plan.sections) names.push_back(s.name);
    return Status::NotFound(
        fmt::format("{}: no section '{}' (sections: {})", summary.plan_path, options.section, fmt::join(names, ", ")));
  }
  const plan::SectionPlan& s = plan.sections[static_cast<size_t>(index)];
  if (s.mode != plan::SectionMode::kTrain) {
    return Status::InvalidArgument(fmt::format(
        "section '{}' is forward-only: it never changes, so its weights are those it was loaded from ({})", s.name,
        s.model.weights.empty() ? (s.init_from.empty() ? "the run's seed" : s.init_from) : s.model.weights));
  }
  MAESTRO_ASSIGN_OR_RETURN(hf::WeightNames names, hf::ExpandWeightNames(s.model));
  summary.layout = hf::WeightLayoutName(names.layout);

  // Per-tensor dtypes: those of the section's own weights under "auto".
  torch::Dtype dtype_out = torch::kFloat32;
  std::map<std::string, torch::Dtype> dtype_by_name;
  std::string config_dtype = "float32";
  if (options.dtype == "auto") {
    if (!s.model.weights.empty()) {
      MAESTRO_ASSIGN_OR_RETURN(auto source, hf::HfCheckpoint::Open(s.model.weights));
      for (const auto& w : names.weights) {
        auto located = source->Find(w.hf_name);
        if (!located.ok()) continue;
        switch (located->info->dtype) {
          case hf::TensorDType::kBF16: dtype_by_name[w.hf_name] = torch::kBFloat16; break;
          case hf::TensorDType::kF16: dtype_by_name[w.hf_name] = torch::kHalf; break;
          case hf::TensorDType::kF64: dtype_by_name[w.hf_name] = torch::kFloat64; break;
          default: dtype_by_name[w.hf_name] = torch::kFloat32; break;
        }
      }
    }
  } else {
    MAESTRO_ASSIGN_OR_RETURN(dtype_out, DtypeOfName(options.dtype));
    config_dtype = TorchDtypeName(dtype_out);
  }

  MAESTRO_ASSIGN_OR_RETURN(auto checkpoint, ReadCheckpoint(options, &summary));
  MAESTRO_ASSIGN_OR_RETURN(std::string config, ExportConfig(plan, s, config_dtype));
  const ExportedTensors what{&s, &names, dtype_out, &dtype_by_name, &config};
  std::map<std::string, std::string> metadata{
      {"format", "pt"}, {"maestro_section", s.name}, {"maestro_step", std::to_string(summary.step)}};
  MAESTRO_RETURN_IF_ERROR(checkpoint.sharded() ? StreamHfExport(checkpoint, what, options, metadata, &summary)
                                               : WholeModelHfExport(checkpoint, what, options, metadata, &summary));
  for (const auto& entry : fs::directory_iterator(options.out_dir, ec)) {
    summary.files.push_back(entry.path().filename().string());
  }
  std::sort(summary.files.begin(), summary.files.end());
  return summary;
}

}  // namespace maestro::runtime
