// SPDX-License-Identifier: Apache-2.0
// ViT encoder, audio encoder, MLP projector, BuildModel and ParameterCount
// (one torch translation unit for the encoder side).
#include "runtime/models/encoders.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "hf/name_map.h"
#include "plan/model_desc.h"
#include "plan/tensor_parallel_split.h"
#include "runtime/models/decoder.h"
#include "runtime/models/parameter_count.h"
#include "runtime/parallel/vit_context_parallel.h"
#include "runtime/recompute.h"
#include "runtime/torch_compat.h"

namespace maestro::runtime {
namespace {

Status RequireKind(const plan::ModelDesc& desc, plan::ModelKind kind, const char* builder) {
  if (desc.kind != kind) {
    return Status::InvalidArgument(std::string(builder) + ": model kind is " + plan::ModelKindName(desc.kind) +
                                   ", not " + plan::ModelKindName(kind));
  }
  return ValidateModelDesc(desc);
}

template <typename Holder>
StatusOr<Holder> Build(const plan::ModelDesc& desc, const ModelBuildOptions& options, plan::ModelKind kind,
                       const char* builder) {
  auto valid = RequireKind(desc, kind, builder);
  if (!valid.ok()) return valid;
  ParamFactory params(options);
  return Holder(desc, params);
}

}  // namespace

ConvImpl::ConvImpl(std::vector<int64_t> kernel, int64_t in_channels, int64_t out_channels, int64_t stride,
                   int64_t padding, bool with_bias, ParamFactory& params, bool stride_is_kernel)
    : stride_(stride_is_kernel ? kernel : std::vector<int64_t>(kernel.size(), stride)),
      padding_(kernel.size(), padding) {
  std::vector<int64_t> shape{out_channels, in_channels};
  shape.insert(shape.end(), kernel.begin(), kernel.end());
  weight = register_parameter("weight", params.Normal(shape));
  if (with_bias) bias = register_parameter("bias", params.Zeros({out_channels}));
}

torch::Tensor ConvImpl::forward(const torch::Tensor& x) {
  switch (stride_.size()) {
    case 1: return torch::conv1d(x, weight, bias, stride_, padding_);
    case 2: return torch::conv2d(x, weight, bias, stride_, padding_);
    default: return torch::conv3d(x, weight, bias, stride_, padding_);
  }
}

namespace {

// Replaces `param`'s data by this rank's shard (a copy, so the full tensor is freed).
void KeepShard(torch::Tensor& param, TensorParallelSplit split, int rank, int size) {
  if (!param.defined()) return;
  torch::NoGradGuard guard;
  param.set_data(TensorParallelShardOf(param, split, rank, size).clone());
}
constexpr TensorParallelSplit kRows{0, 1}, kColumns{1, 1};

// A row-parallel layer: x (..., in/n) -> (..., out), the partial products
// summed over the TP group and the bias (whole on every rank) added once.
// Unsharded (tp null or of size 1): layer(x) as it always was.
torch::Tensor RowParallel(LinearImpl& layer, const torch::Tensor& x, TensorParallelReducer* tp) {
  if (tp == nullptr || tp->size() == 1) return layer.forward(x);
  auto y = LeaveTensorParallel(torch::linear(x, layer.weight), tp);
  return layer.bias.defined() ? y + layer.bias : y;
}

}  // namespace

SelfAttentionImpl::SelfAttentionImpl(int64_t hidden, int64_t heads, QkvLayout layout, ParamFactory& params)
    : heads_(heads), head_dim_(hidden / heads) {
  if (layout == QkvLayout::kFused) {
    qkv = register_module("qkv", Linear(hidden, 3 * hidden, true, params));
  } else {
    q_proj = register_module("q_proj", Linear(hidden, hidden, true, params));
    k_proj = register_module("k_proj", Linear(hidden, hidden, layout != QkvLayout::kWhisper, params));
    v_proj = register_module("v_proj", Linear(hidden, hidden, true, params));
  }
  out = register_module("out", Linear(hidden, hidden, true, params));
}

void SelfAttentionImpl::Shard(int rank, int size) {
  if (qkv) {
    KeepShard(qkv->weight, {0, 3}, rank, size);
    KeepShard(qkv->bias, {0, 3}, rank, size);
  } else {
    for (Linear* proj : {&q_proj, &k_proj, &v_proj}) {
      KeepShard((*proj)->weight, kRows, rank, size);
      KeepShard((*proj)->bias, kRows, rank, size);
    }
  }
  KeepShard(out->weight, kColumns, rank, size);
  heads_ /= size;
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const RopeTables* rope, TensorParallelReducer* tp,
                                         const EncoderContextParallel* cp) {
  // c: this rank's heads' width (the hidden size when unsharded).
  const int64_t b = x.size(0), t = x.size(1), d = head_dim_, c = heads_ * head_dim_;
  torch::Tensor q, k, v;  // (B, H, T, D)
  if (qkv) {
    auto heads = qkv(x).view({b, t, 3, heads_, d}).permute({2, 0, 3, 1, 4});  // (3, B, H, T, D)
    q = heads[0];
    k = heads[1];
    v = heads[2];
  } else {
    q = q_proj(x).view({b, t, heads_, d}).transpose(1, 2);
    k = k_proj(x).view({b, t, heads_, d}).transpose(1, 2);
    v = v_proj(x).view({b, t, heads_, d}).transpose(1, 2);
  }
  if (rope != nullptr) {  // in fp32, as HF's apply_rotary_pos_emb_vision
    q = ApplyRope(q.to(torch::kFloat32), *rope).to(x.scalar_type());
    k = ApplyRope(k.to(torch::kFloat32), *rope).to(x.scalar_type());
  }
  // Held by value: selective recomputation runs the core again in backward.
  std::shared_ptr<const EncoderSequenceSplit> split = cp != nullptr ? cp->split : nullptr;
  if (split != nullptr && split->cp_size() > 1) {  // this rank's queries against every rank's keys and values
    k = GatherKeysOrValues(k, *cp);
    v = GatherKeysOrValues(v, *cp);
  }
  auto core = [split](const std::vector<torch::Tensor>& qkv) {
    if (split != nullptr) return split->Attention(qkv[0], qkv[1], qkv[2]);
    return compat::ScaledDotProductAttention(qkv[0], qkv[1], qkv[2], /*causal=*/false);
  };
  auto y = recompute_core ? RunRecomputed(core, {q, k, v}) : core({q, k, v});  // (B, H, T, D)
  return RowParallel(*out, y.transpose(1, 2).reshape({b, t, c}), tp);          // (B, T, C)
}

EncoderBlockImpl::EncoderBlockImpl(int64_t hidden, int64_t heads, int64_t ffn_hidden, double eps, QkvLayout layout,
                                   MlpActivation activation, ParamFactory& params, bool rms_norm_swiglu)
    : activation_(activation) {
  if (rms_norm_swiglu) {
    attn_rms_norm = register_module("attn_norm", RmsNorm(hidden, eps, params));
  } else {
    attn_norm = register_module("attn_norm", LayerNorm(hidden, eps, params));
  }
  attn = register_module("attn", SelfAttention(hidden, heads, layout, params));
  if (rms_norm_swiglu) {
    mlp_rms_norm = register_module("mlp_norm", RmsNorm(hidden, eps, params));
    mlp = register_module("mlp", SwiGluMlp(hidden, ffn_hidden, params, /*gelu_tanh=*/false, /*with_bias=*/true));
    return;
  }
  mlp_norm = register_module("mlp_norm", LayerNorm(hidden, eps, params));
  fc1 = register_module("fc1", Linear(hidden, ffn_hidden, true, params));
  fc2 = register_module("fc2", Linear(ffn_hidden, hidden, true, params));
}

void EncoderBlockImpl::Shard(int rank, int size) {
  attn->Shard(rank, size);
  if (mlp) {
    mlp->Shard(rank, size);
    return;
  }
  KeepShard(fc1->weight, kRows, rank, size);
  KeepShard(fc1->bias, kRows, rank, size);
  KeepShard(fc2->weight, kColumns, rank, size);
}

torch::Tensor EncoderBlockImpl::forward(const torch::Tensor& x, const RopeTables* rope,
                                        const EncoderContextParallel* cp) {
  if (mlp) {  // Qwen2.5-VL
    auto h = x + attn->forward(EnterTensorParallel(attn_rms_norm(x), tp), rope, tp, cp);
    return h + RowParallel(*mlp->down_proj, mlp->Inner(EnterTensorParallel(mlp_rms_norm(h), tp)), tp);
  }
  auto h = x + attn->forward(EnterTensorParallel(attn_norm(x), tp), rope, tp, cp);
  auto inner = fc1(EnterTensorParallel(mlp_norm(h), tp));  // (B, T, F/n)
  torch::Tensor act;
  switch (activation_) {
    case MlpActivation::kQuickGelu: act = QuickGelu(inner); break;
    case MlpActivation::kGeluTanh: act = torch::gelu(inner, "tanh"); break;
    case MlpActivation::kGelu: act = compat::Gelu(inner); break;
  }
  return h + RowParallel(*fc2, act, tp);
}

AttnPoolHeadImpl::AttnPoolHeadImpl(int64_t hidden, int64_t heads, int64_t ffn_hidden, double eps, ParamFactory& params)
    : heads_(heads) {
  probe = register_parameter("probe", params.Normal({1, 1, hidden}));
  in_proj = register_module("in_proj", Linear(hidden, 3 * hidden, true, params));
  out_proj = register_module("out_proj", Linear(hidden, hidden, true, params));
  norm = register_module("norm", LayerNorm(hidden, eps, params));
  mlp_fc1 = register_module("mlp_fc1", Linear(hidden, ffn_hidden, true, params));
  mlp_fc2 = register_module("mlp_fc2", Linear(ffn_hidden, hidden, true, params));
}

torch::Tensor AttnPoolHeadImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads_;
  auto w = in_proj->weight.chunk(3, 0);  // q, k, v rows: (C, C) each
  auto bias = in_proj->bias.chunk(3, 0);
  auto query = probe.to(x.scalar_type()).expand({b, 1, c});
  auto q = torch::linear(query, w[0], bias[0]).view({b, 1, heads_, d}).transpose(1, 2);  // (B, H, 1, D)
  auto k = torch::linear(x, w[1], bias[1]).view({b, t, heads_, d}).transpose(1, 2);      // (B, H, T, D)
  auto v = torch::linear(x, w[2], bias[2]).view({b, t, heads_, d}).transpose(1, 2);
  auto y = compat::ScaledDotProductAttention(q, k, v, /*causal=*/false);  // (B, H, 1, D)
  y = out_proj(y.transpose(1, 2).reshape({b, 1, c}));                     // (B, 1, C)
  y = y + mlp_fc2(torch::gelu(mlp_fc1(norm(y)), "tanh"));
  return y.select(1, 0);  // (B, C)
}

namespace {
torch::nn::ModuleList MakeEncoderBlocks(const plan::ModelDesc& desc, QkvLayout layout, MlpActivation activation,
                                        ParamFactory& params) {
  torch::nn::ModuleList blocks;
  for (int64_t i = 0; i < desc.layers; ++i) {
    const bool qwen25 = desc.kind == plan::ModelKind::kVit && VitLayout(desc) == plan::kVitLayoutQwen25Vl;
    blocks->push_back(
        EncoderBlock(desc.hidden, desc.heads, desc.ffn_hidden, LayerNormEps(desc), layout, activation, params, qwen25));
  }
  return blocks;
}

// x: (B, T, C) -> (B, T, C). Full recomputation runs each block through
// RunRecomputed (the rope tables, fixed, are captured by value; so is the CP
// context, which outlives the backward: its all-gathers run again there, in
// the same order on every CP rank). Block i attends through window_cp
// instead of cp when windowed[i] (Qwen2.5-VL's window attention).
torch::Tensor RunBlocks(const torch::nn::ModuleList& blocks, torch::Tensor x, plan::RecomputeGranularity recompute,
                        const RopeTables* rope = nullptr, const EncoderContextParallel* full_cp = nullptr,
                        const EncoderContextParallel* window_cp = nullptr,
                        const std::vector<bool>* windowed = nullptr) {
  for (size_t i = 0; i < blocks->size(); ++i) {
    auto* b = (*blocks)[i]->as<EncoderBlockImpl>();
    const EncoderContextParallel* cp = windowed != nullptr && (*windowed)[i] ? window_cp : full_cp;
    if (recompute == plan::RecomputeGranularity::kFull) {
      std::optional<RopeTables> tables;
      if (rope != nullptr) tables = *rope;
      std::optional<EncoderContextParallel> context;
      if (cp != nullptr) context = *cp;
      x = RunRecomputed(
          [b, tables, context](const std::vector<torch::Tensor>& in) {
            return b->forward(in[0], tables ? &*tables : nullptr, context ? &*context : nullptr);
          },
          {x});
    } else {
      x = b->forward(x, rope, cp);
    }
  }
  return x;
}

void SetAttentionRecompute(const torch::nn::ModuleList& blocks, plan::RecomputeGranularity recompute) {
  for (const auto& block : *blocks) {
    block->as<EncoderBlockImpl>()->attn->recompute_core = recompute == plan::RecomputeGranularity::kSelective;
  }
}
}  // namespace

VitEncoderImpl::VitEncoderImpl(const plan::ModelDesc& desc, ParamFactory& params)
    : desc_(desc), layout_(VitLayout(desc)) {
  const int64_t c = desc.hidden, p = desc.patch_size;
  const auto activation = layout_ == plan::kVitLayoutSiglip ? MlpActivation::kGeluTanh
                          : QuickGelu(desc)                 ? MlpActivation::kQuickGelu
                                                            : MlpActivation::kGelu;
  const double eps = LayerNormEps(desc);
  if (layout_ == plan::kVitLayoutSiglip) {
    patch_embed =
        register_module("patch_embed", Conv(std::vector<int64_t>{p, p}, desc.channels, c, p, 0, true, params));
    pos_embed = register_parameter("pos_embed", params.Normal({num_patches(), c}));
    blocks = register_module("blocks", MakeEncoderBlocks(desc, QkvLayout::kSeparate, activation, params));
    final_norm = register_module("final_norm", LayerNorm(c, eps, params));
    if (plan::AttnPoolHead(desc))
      head = register_module("head", AttnPoolHead(c, desc.heads, desc.ffn_hidden, eps, params));
    return;
  }
  if (layout_ == plan::kVitLayoutClip) {
    patch_embed =
        register_module("patch_embed", Conv(std::vector<int64_t>{p, p}, desc.channels, c, p, 0, false, params));
    class_embedding = register_parameter("class_embedding", params.Normal({c}));
    pos_embed = register_parameter("pos_embed", params.Normal({num_patches() + 1, c}));
    pre_norm = register_module("pre_norm", LayerNorm(c, eps, params));
    blocks = register_module("blocks", MakeEncoderBlocks(desc, QkvLayout::kSeparate, activation, params));
    final_norm = register_module("final_norm", LayerNorm(c, eps, params));
    return;
  }
  if (plan::IsQwenVisionLayout(layout_)) {
    auto it = desc.extra.find("temporal_patch");
    const int64_t temporal = it == desc.extra.end() ? 1 : static_cast<int64_t>(it->second);
    patch_embed = register_module("patch_embed", Conv(std::vector<int64_t>{temporal, p, p}, desc.channels, c, 0, 0,
                                                      false, params, /*stride_is_kernel=*/true));
    blocks = register_module("blocks", MakeEncoderBlocks(desc, QkvLayout::kFused, activation, params));
    for (int64_t i = 0; i < desc.layers; ++i) windowed_.push_back(!plan::IsFullAttentionVitBlock(desc, i));
  } else {
    patch_embed =
        register_module("patch_embed", Conv(std::vector<int64_t>{p, p}, desc.channels, c, p, 0, true, params));
    pos_embed = register_parameter("pos_embed", params.Normal({1, num_patches(), c}));
    blocks = register_module("blocks", MakeEncoderBlocks(desc, QkvLayout::kFused, activation, params));
    final_norm = register_module("final_norm", LayerNorm(c, eps, params));
  }
  const int64_t merge = SpatialMerge(desc);
  if (merge > 0) {
    const int64_t in = c * merge * merge;
    const int64_t mid = MergerHidden(desc);
    if (layout_ == plan::kVitLayoutQwen25Vl) {
      merger_rms_norm = register_module("merger_norm", RmsNorm(c, eps, params));
    } else {
      merger_norm = register_module("merger_norm", LayerNorm(c, eps, params));
    }
    merger_fc1 = register_module("merger_fc1", Linear(in, mid, /*with_bias=*/true, params));
    merger_fc2 = register_module("merger_fc2", Linear(mid, desc.out_dim, /*with_bias=*/true, params));
  }
}

torch::Tensor VitEncoderImpl::Pool(const torch::Tensor& last_hidden_state) {
  TORCH_CHECK(head, "VitEncoder::Pool: no attention-pooling head (a SigLIP tower with extra.attn_pool_head has one)");
  return head(last_hidden_state);
}

int64_t VitEncoderImpl::output_tokens() const {
  return VitOutputTokens(desc_);
}

int64_t VitEncoderImpl::output_dim() const {
  return VitOutputDim(desc_);
}

int64_t VitEncoderImpl::num_patches() const {
  const int64_t side = desc_.image_size / desc_.patch_size;
  return side * side;
}

void VitEncoderImpl::SetRecompute(plan::RecomputeGranularity granularity) {
  recompute_ = granularity;
  SetAttentionRecompute(blocks, granularity);
}

torch::Tensor VitEncoderImpl::forward(const torch::Tensor& images) {
  TORCH_CHECK(images.dim() == 4 && images.size(1) == desc_.channels && images.size(2) == desc_.image_size &&
                  images.size(3) == desc_.image_size,
              "VitEncoder: images must be (B, ", desc_.channels, ", ", desc_.image_size, ", ", desc_.image_size,
              "), got ", images.sizes());
  if (plan::IsQwenVisionLayout(layout_)) {  // one path: packed, each image's grid (1, S/P, S/P)
    const int64_t b = images.size(0), g = desc_.image_size / desc_.patch_size;
    auto patches = FlattenImagePatches(images, patch_embed->weight.size(2), desc_.patch_size, SpatialMerge(desc_));
    auto merged = ForwardPacked(patches, std::vector<PatchGrid>(static_cast<size_t>(b), PatchGrid{1, g, g}));
    return merged.view({b, output_tokens(), output_dim()});
  }
  if (context_parallel != nullptr && context_parallel->group().size() > 1) return ForwardContextParallel(images);
  const int64_t b = images.size(0), c = desc_.hidden;
  torch::Tensor x;
  if (layout_ == plan::kVitLayoutClip) {
    x = patch_embed(images).flatten(2).transpose(1, 2);  // (B, N, C)
    x = torch::cat({class_embedding.view({1, 1, c}).expand({b, 1, c}).to(x.scalar_type()), x}, 1) + pos_embed;
    return RunBlocks(blocks, pre_norm(x), recompute_);  // (B, 1+N, C): last_hidden_state
  }
  x = patch_embed(images).flatten(2).transpose(1, 2);  // (B, N, C): built-in and SigLIP
  x = final_norm(RunBlocks(blocks, x + pos_embed, recompute_));
  return Merge(x);
}

torch::Tensor VitEncoderImpl::ForwardContextParallel(const torch::Tensor& images) {
  launcher::Backend& group = *context_parallel;
  const int64_t b = images.size(0), c = desc_.hidden;
  // The stem runs on every image (one matmul per patch: cheap next to the
  // blocks); each rank keeps its chunk of the tokens (images in order).
  torch::Tensor x;  // (B, tokens per image, C)
  if (layout_ == plan::kVitLayoutClip) {
    x = patch_embed(images).flatten(2).transpose(1, 2);
    x = torch::cat({class_embedding.view({1, 1, c}).expand({b, 1, c}).to(x.scalar_type()), x}, 1) + pos_embed;
  } else {
    x = patch_embed(images).flatten(2).transpose(1, 2) + pos_embed;
  }
  const int64_t tokens = x.size(1);
  const auto split = std::make_shared<const EncoderSequenceSplit>(std::vector<int64_t>(static_cast<size_t>(b), tokens),
                                                                  group.group().my_index, group.group().size());
  const EncoderContextParallel cp{&group, split};
  CountContextParallelForward(*split);
  auto local = split->Local(x.reshape({b * tokens, c})).unsqueeze(0);  // (1, chunk, C)
  if (layout_ == plan::kVitLayoutClip) {
    local = RunBlocks(blocks, pre_norm(local), recompute_, nullptr, &cp);
  } else {
    local = final_norm(RunBlocks(blocks, local, recompute_, nullptr, &cp));
  }
  // Every rank's rows, padding dropped: (B, tokens, C) whole on each CP rank.
  auto whole = split->DropPadding(GatherRows(local[0], group)).reshape({b, tokens, c});
  return Merge(whole);
}

torch::Tensor VitEncoderImpl::ForwardPacked(const torch::Tensor& patches, const std::vector<PatchGrid>& grids) {
  TORCH_CHECK(plan::IsQwenVisionLayout(layout_),
              "VitEncoder::ForwardPacked: InvalidArgument: packed, variable-size input is for the Qwen2-VL and "
              "Qwen2.5-VL towers (extra.vit_layout 2 or 5), not extra.vit_layout ",
              layout_);
  const int64_t m = SpatialMerge(desc_), c = desc_.hidden, p = desc_.patch_size, cin = desc_.channels;
  const int64_t temporal = patch_embed->weight.size(2), width = cin * temporal * p * p;
  TORCH_CHECK(patches.dim() == 2 && patches.size(1) == width,
              "VitEncoder::ForwardPacked: InvalidArgument: patches must be (N, C*T*P*P = ", width, "), got ",
              patches.sizes());
  TORCH_CHECK(!grids.empty(), "VitEncoder::ForwardPacked: InvalidArgument: no grids");
  int64_t n = 0;
  for (const PatchGrid& g : grids) {
    TORCH_CHECK(g.t >= 1 && g.h >= m && g.w >= m && g.h % m == 0 && g.w % m == 0,
                "VitEncoder::ForwardPacked: InvalidArgument: a grid (t ", g.t, ", h ", g.h, ", w ", g.w,
                ") must have t >= 1 and h, w positive multiples of the spatial merge ", m);
    n += g.t * g.h * g.w;
  }
  TORCH_CHECK(patches.size(0) == n, "VitEncoder::ForwardPacked: InvalidArgument: ", patches.size(0),
              " patches for grids of ", n);
  auto x = patch_embed(patches.reshape({n, cin, temporal, p, p})).reshape({n, c});
  RopeTables rope = VisionRope2d(grids, m, HeadDim(desc_), x.device());
  const std::vector<int64_t> segments = TemporalSegments(grids);
  torch::Tensor order;  // Qwen2.5-VL: merge groups window by window
  std::vector<int64_t> windows;
  if (const int64_t window = plan::VitMergerWindow(desc_); window > 0) {
    VisionWindows w = VisionWindowIndex(grids, m, window);
    order = w.groups.to(x.device());
    windows = std::move(w.lengths);
    auto rows = (order.unsqueeze(1) * (m * m) + torch::arange(m * m, order.options())).flatten();  // patches
    x = x.index_select(0, rows);
    rope = {rope.cos.index_select(0, rows), rope.sin.index_select(0, rows)};
  }
  // Without CP, a split over one rank is the variable-length attention:
  // each segment attends to itself (equal lengths batched), no padding.
  launcher::Backend* group =
      context_parallel != nullptr && context_parallel->group().size() > 1 ? context_parallel : nullptr;
  const int rank = group != nullptr ? group->group().my_index : 0, size = group != nullptr ? group->group().size() : 1;
  const auto full = std::make_shared<const EncoderSequenceSplit>(segments, rank, size);
  // Both splits cut the same N rows at the same chunk boundaries.
  const auto windowed = windows.empty() ? full : std::make_shared<const EncoderSequenceSplit>(windows, rank, size);
  const EncoderContextParallel full_cp{group, full}, window_cp{group, windowed};
  if (group != nullptr) {
    CountContextParallelForward(*full);
    x = full->Local(x);
    rope = {full->Local(rope.cos), full->Local(rope.sin)};
  }
  blocks_input_rows_ = x.size(0);
  x = RunBlocks(blocks, x.unsqueeze(0), recompute_, &rope, &full_cp, &window_cp, &windowed_)[0];
  if (group != nullptr) x = full->DropPadding(GatherRows(x, *group));  // whole on every CP rank
  auto merged = MergePacked(x);
  return order.defined() ? merged.index_select(0, torch::argsort(order)) : merged;
}

torch::Tensor VitEncoderImpl::MergePacked(const torch::Tensor& x) {
  const int64_t m = SpatialMerge(desc_);
  auto normed = merger_rms_norm ? merger_rms_norm(x) : merger_norm(x);
  normed = normed.reshape({x.size(0) / (m * m), m * m * desc_.hidden});
  return RowParallel(*merger_fc2, compat::Gelu(merger_fc1(EnterTensorParallel(normed, tp))), tp);
}

torch::Tensor VitEncoderImpl::Merge(torch::Tensor x) {
  const int64_t merge = SpatialMerge(desc_);
  if (merge == 0) return x;
  const int64_t b = x.size(0), c = desc_.hidden, side = desc_.image_size / desc_.patch_size;
  // (B, N, C) -> (B, side/m, m, side/m, m, C) -> (B, N/m^2, m^2 C): each m x m
  // block of neighbouring patches (row-major inside), blocks row-major.
  x = merger_norm(x).reshape({b, side / merge, merge, side / merge, merge, c});
  x = x.permute({0, 1, 3, 2, 4, 5}).reshape({b, output_tokens(), merge * merge * c});
  return RowParallel(*merger_fc2, compat::Gelu(merger_fc1(EnterTensorParallel(x, tp))), tp);
}

torch::Tensor SinusoidalPositions(int64_t length, int64_t channels) {
  const int64_t half = channels / 2;
  const double increment = std::log(10000.0) / static_cast<double>(half - 1);
  auto inv_timescales = torch::exp(-increment * torch::arange(half, torch::kFloat32));              // (C/2)
  auto scaled = torch::arange(length, torch::kFloat32).unsqueeze(1) * inv_timescales.unsqueeze(0);  // (L, C/2)
  return torch::cat({scaled.sin(), scaled.cos()}, 1);                                               // (L, C)
}

AudioEncoderImpl::AudioEncoderImpl(const plan::ModelDesc& desc, ParamFactory& params) : desc_(desc) {
  conv1 = register_module("conv1", Conv(std::vector<int64_t>{3}, desc.mel_bins, desc.hidden, 1, 1, true, params));
  conv2 = register_module("conv2", Conv(std::vector<int64_t>{3}, desc.hidden, desc.hidden, 2, 1, true, params));
  embed_positions = register_parameter(
      "embed_positions", params.Fixed(SinusoidalPositions(AudioPositions(desc), desc.hidden)), /*requires_grad=*/false);
  blocks = register_module("blocks", MakeEncoderBlocks(desc, QkvLayout::kWhisper, MlpActivation::kGelu, params));
  final_norm = register_module("final_norm", LayerNorm(desc.hidden, LayerNormEps(desc), params));
}

void AudioEncoderImpl::SetRecompute(plan::RecomputeGranularity granularity) {
  recompute_ = granularity;
  SetAttentionRecompute(blocks, granularity);
}

torch::Tensor AudioEncoderImpl::forward(const torch::Tensor& mel) {
  TORCH_CHECK(mel.dim() == 3 && mel.size(1) == desc_.mel_bins && mel.size(2) >= 1 && mel.size(2) <= desc_.audio_frames,
              "AudioEncoder: mel must be (B, ", desc_.mel_bins, ", frames <= ", desc_.audio_frames, "), got ",
              mel.sizes());
  auto x = compat::Gelu(conv2(compat::Gelu(conv1(mel))));  // (B, C, ceil(F/2))
  x = x.transpose(1, 2);                                   // (B, ceil(F/2), C)
  x = x + embed_positions.narrow(0, 0, x.size(1));
  return final_norm(RunBlocks(blocks, x, recompute_));
}

MlpProjectorImpl::MlpProjectorImpl(const plan::ModelDesc& desc, ParamFactory& params) {
  fc1 = register_module("fc1", Linear(desc.in_dim, desc.out_dim, true, params));
  fc2 = register_module("fc2", Linear(desc.out_dim, desc.out_dim, true, params));
}

torch::Tensor MlpProjectorImpl::forward(const torch::Tensor& x) {
  return RowParallel(*fc2, compat::Gelu(fc1(EnterTensorParallel(x, tp))), tp);
}

namespace {

void ShardBlocks(torch::nn::ModuleList& blocks, TensorParallelReducer* tp) {
  for (const auto& block : *blocks) {
    auto* b = block->as<EncoderBlockImpl>();
    b->Shard(tp->rank(), tp->size());
    b->tp = tp;
  }
}

}  // namespace

Status CheckEncoderSplitsOverTp(const plan::ModelDesc& desc, int n) {
  if (desc.kind == plan::ModelKind::kDecoder) {
    return Status::InvalidArgument(
        "ShardEncoderForTensorParallel: a decoder shards with ShardDecoderForTensorParallel");
  }
  return plan::CheckEncoderTensorParallelSplit(desc, n);  // the one rule, shared with the planner
}

Status ShardEncoderForTensorParallel(torch::nn::Module& model, const plan::ModelDesc& desc, TensorParallelReducer* tp) {
  const int n = tp->size();
  if (n == 1) return Status::Ok();
  MAESTRO_RETURN_IF_ERROR(CheckEncoderSplitsOverTp(desc, n));
  switch (desc.kind) {
    case plan::ModelKind::kVit: {
      auto* vit = model.as<VitEncoderImpl>();
      ShardBlocks(vit->blocks, tp);
      if (vit->merger_fc1) {
        KeepShard(vit->merger_fc1->weight, kRows, tp->rank(), n);
        KeepShard(vit->merger_fc1->bias, kRows, tp->rank(), n);
        KeepShard(vit->merger_fc2->weight, kColumns, tp->rank(), n);
        vit->tp = tp;
      }
      break;
    }
    case plan::ModelKind::kAudioEncoder: ShardBlocks(model.as<AudioEncoderImpl>()->blocks, tp); break;
    case plan::ModelKind::kProjector: {
      auto* projector = model.as<MlpProjectorImpl>();
      KeepShard(projector->fc1->weight, kRows, tp->rank(), n);
      KeepShard(projector->fc1->bias, kRows, tp->rank(), n);
      KeepShard(projector->fc2->weight, kColumns, tp->rank(), n);
      projector->tp = tp;
      break;
    }
    case plan::ModelKind::kDecoder: break;
  }
  return Status::Ok();
}

Status ShardModelForTensorParallel(torch::nn::Module& model, const plan::ModelDesc& desc, TensorParallelReducer* tp) {
  if (desc.kind == plan::ModelKind::kDecoder) return ShardDecoderForTensorParallel(*model.as<DecoderLMImpl>(), tp);
  return ShardEncoderForTensorParallel(model, desc, tp);
}

TensorParallelSplit TensorParallelSplitOf(const std::string& name) {
  if (const int dim = TensorParallelShardDim(name); dim >= 0)
    return {dim, 1};  // the decoder's, and CLIP's / Whisper's q/k/v
  // `suffix` is the whole name or its last components ("fc1.weight" is the
  // projector's and a block's, not "merger_fc1.weight").
  auto is = [&](const char* suffix) {
    const std::string s(suffix);
    if (name == s) return true;
    return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
           name[name.size() - s.size() - 1] == '.';
  };
  if (is("attn.qkv.weight") || is("attn.qkv.bias")) return {0, 3};
  for (const char* rows :
       {"fc1.weight", "fc1.bias", "merger_fc1.weight", "merger_fc1.bias", "mlp.gate_proj.bias", "mlp.up_proj.bias"}) {
    if (is(rows)) return kRows;
  }
  for (const char* cols : {"attn.out.weight", "fc2.weight", "merger_fc2.weight"}) {
    if (is(cols)) return kColumns;
  }
  return {};
}

StatusOr<VitEncoder> BuildVitEncoder(const plan::ModelDesc& desc, const ModelBuildOptions& options) {
  return Build<VitEncoder>(desc, options, plan::ModelKind::kVit, "BuildVitEncoder");
}
StatusOr<AudioEncoder> BuildAudioEncoder(const plan::ModelDesc& desc, const ModelBuildOptions& options) {
  return Build<AudioEncoder>(desc, options, plan::ModelKind::kAudioEncoder, "BuildAudioEncoder");
}
StatusOr<MlpProjector> BuildMlpProjector(const plan::ModelDesc& desc, const ModelBuildOptions& options) {
  return Build<MlpProjector>(desc, options, plan::ModelKind::kProjector, "BuildMlpProjector");
}

StatusOr<std::shared_ptr<torch::nn::Module>> BuildModel(const plan::ModelDesc& desc, const ModelBuildOptions& options) {
  auto as_module = [](auto built) -> StatusOr<std::shared_ptr<torch::nn::Module>> {
    if (!built.ok()) return built.status();
    return std::static_pointer_cast<torch::nn::Module>(built->ptr());
  };
  switch (desc.kind) {
    case plan::ModelKind::kDecoder: return as_module(BuildDecoder(desc, options));
    case plan::ModelKind::kVit: return as_module(BuildVitEncoder(desc, options));
    case plan::ModelKind::kAudioEncoder: return as_module(BuildAudioEncoder(desc, options));
    case plan::ModelKind::kProjector: return as_module(BuildMlpProjector(desc, options));
  }
  return Status::InvalidArgument("BuildModel: unknown model kind " + std::to_string(static_cast<int>(desc.kind)));
}

StatusOr<int64_t> ParameterCount(const plan::ModelDesc& desc) {
  ModelBuildOptions meta;
  meta.device = torch::kMeta;
  auto model = BuildModel(desc, meta);
  if (!model.ok()) return model.status();
  int64_t count = 0;
  for (const auto& p : (*model)->parameters()) count += p.numel();
  return count;
}

}  // namespace maestro::runtime
