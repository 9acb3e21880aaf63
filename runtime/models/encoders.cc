// SPDX-License-Identifier: Apache-2.0
// ViT encoder, audio encoder, MLP projector, BuildModel and ParameterCount
// (one torch translation unit for the encoder side).
#include "runtime/models/encoders.h"

#include <cmath>
#include <string>

#include "runtime/models/decoder.h"
#include "runtime/models/model_desc.h"
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

ConvImpl::ConvImpl(int spatial_dims, int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
                   int64_t padding, ParamFactory& params)
    : spatial_dims_(spatial_dims), stride_(stride), padding_(padding) {
  std::vector<int64_t> shape{out_channels, in_channels};
  for (int i = 0; i < spatial_dims; ++i) shape.push_back(kernel);
  weight = register_parameter("weight", params.Normal(shape));
  bias = register_parameter("bias", params.Zeros({out_channels}));
}

torch::Tensor ConvImpl::forward(const torch::Tensor& x) {
  if (spatial_dims_ == 1) return torch::conv1d(x, weight, bias, {stride_}, {padding_});
  return torch::conv2d(x, weight, bias, {stride_, stride_}, {padding_, padding_});
}

SelfAttentionImpl::SelfAttentionImpl(int64_t hidden, int64_t heads, ParamFactory& params) : heads_(heads) {
  qkv = register_module("qkv", Linear(hidden, 3 * hidden, true, params));
  out = register_module("out", Linear(hidden, hidden, true, params));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
  auto qkv_heads = qkv(x).view({b, t, 3, heads_, c / heads_}).permute({2, 0, 3, 1, 4});  // (3, B, H, T, D)
  auto y = compat::ScaledDotProductAttention(qkv_heads[0], qkv_heads[1], qkv_heads[2], /*causal=*/false);
  return out(y.transpose(1, 2).reshape({b, t, c}));  // (B, T, C)
}

EncoderBlockImpl::EncoderBlockImpl(int64_t hidden, int64_t heads, int64_t ffn_hidden, double eps,
                                   ParamFactory& params) {
  attn_norm = register_module("attn_norm", LayerNorm(hidden, eps, params));
  attn = register_module("attn", SelfAttention(hidden, heads, params));
  mlp_norm = register_module("mlp_norm", LayerNorm(hidden, eps, params));
  fc1 = register_module("fc1", Linear(hidden, ffn_hidden, true, params));
  fc2 = register_module("fc2", Linear(ffn_hidden, hidden, true, params));
}

torch::Tensor EncoderBlockImpl::forward(const torch::Tensor& x) {
  auto h = x + attn(attn_norm(x));
  return h + fc2(compat::Gelu(fc1(mlp_norm(h))));
}

namespace {
torch::nn::ModuleList MakeEncoderBlocks(const plan::ModelDesc& desc, ParamFactory& params) {
  torch::nn::ModuleList blocks;
  for (int64_t i = 0; i < desc.layers; ++i) {
    blocks->push_back(EncoderBlock(desc.hidden, desc.heads, desc.ffn_hidden, LayerNormEps(desc), params));
  }
  return blocks;
}

torch::Tensor RunBlocks(const torch::nn::ModuleList& blocks, torch::Tensor x) {
  for (const auto& block : *blocks) x = block->as<EncoderBlockImpl>()->forward(x);
  return x;
}
}  // namespace

VitEncoderImpl::VitEncoderImpl(const plan::ModelDesc& desc, ParamFactory& params) : desc_(desc) {
  patch_embed =
      register_module("patch_embed", Conv(2, desc.channels, desc.hidden, desc.patch_size, desc.patch_size, 0, params));
  pos_embed = register_parameter("pos_embed", params.Normal({1, num_patches(), desc.hidden}));
  blocks = register_module("blocks", MakeEncoderBlocks(desc, params));
  final_norm = register_module("final_norm", LayerNorm(desc.hidden, LayerNormEps(desc), params));
  const int64_t merge = SpatialMerge(desc);
  if (merge > 0) {
    const int64_t in = desc.hidden * merge * merge;
    const int64_t mid = MergerHidden(desc);
    merger_norm = register_module("merger_norm", LayerNorm(desc.hidden, LayerNormEps(desc), params));
    merger_fc1 = register_module("merger_fc1", Linear(in, mid, /*with_bias=*/true, params));
    merger_fc2 = register_module("merger_fc2", Linear(mid, desc.out_dim, /*with_bias=*/true, params));
  }
}

int64_t VitEncoderImpl::output_tokens() const {
  const int64_t merge = SpatialMerge(desc_);
  return merge > 0 ? num_patches() / (merge * merge) : num_patches();
}

int64_t VitEncoderImpl::output_dim() const {
  return SpatialMerge(desc_) > 0 ? desc_.out_dim : desc_.hidden;
}

int64_t VitEncoderImpl::num_patches() const {
  const int64_t side = desc_.image_size / desc_.patch_size;
  return side * side;
}

torch::Tensor VitEncoderImpl::forward(const torch::Tensor& images) {
  TORCH_CHECK(images.dim() == 4 && images.size(1) == desc_.channels && images.size(2) == desc_.image_size &&
                  images.size(3) == desc_.image_size,
              "VitEncoder: images must be (B, ", desc_.channels, ", ", desc_.image_size, ", ", desc_.image_size,
              "), got ", images.sizes());
  auto x = patch_embed(images).flatten(2).transpose(1, 2);  // (B, N, C)
  x = final_norm(RunBlocks(blocks, x + pos_embed));
  const int64_t merge = SpatialMerge(desc_);
  if (merge == 0) return x;
  // (B, N, C) -> (B, side/m, m, side/m, m, C) -> (B, N/m^2, m^2 C), row-major blocks.
  const int64_t b = x.size(0), c = x.size(2), side = desc_.image_size / desc_.patch_size;
  x = merger_norm(x).reshape({b, side / merge, merge, side / merge, merge, c});
  x = x.permute({0, 1, 3, 2, 4, 5}).reshape({b, output_tokens(), merge * merge * c});
  return merger_fc2(compat::Gelu(merger_fc1(x)));
}

torch::Tensor SinusoidalPositions(int64_t length, int64_t channels) {
  const int64_t half = channels / 2;
  const double increment = std::log(10000.0) / static_cast<double>(half - 1);
  auto inv_timescales = torch::exp(-increment * torch::arange(half, torch::kFloat32));              // (C/2)
  auto scaled = torch::arange(length, torch::kFloat32).unsqueeze(1) * inv_timescales.unsqueeze(0);  // (L, C/2)
  return torch::cat({scaled.sin(), scaled.cos()}, 1);                                               // (L, C)
}

AudioEncoderImpl::AudioEncoderImpl(const plan::ModelDesc& desc, ParamFactory& params) : desc_(desc) {
  conv1 = register_module("conv1", Conv(1, desc.mel_bins, desc.hidden, 3, 1, 1, params));
  conv2 = register_module("conv2", Conv(1, desc.hidden, desc.hidden, 3, 2, 1, params));
  positions = register_buffer("positions", params.Fixed(SinusoidalPositions((desc.audio_frames + 1) / 2, desc.hidden)));
  blocks = register_module("blocks", MakeEncoderBlocks(desc, params));
  final_norm = register_module("final_norm", LayerNorm(desc.hidden, LayerNormEps(desc), params));
}

torch::Tensor AudioEncoderImpl::forward(const torch::Tensor& mel) {
  TORCH_CHECK(mel.dim() == 3 && mel.size(1) == desc_.mel_bins && mel.size(2) >= 1 && mel.size(2) <= desc_.audio_frames,
              "AudioEncoder: mel must be (B, ", desc_.mel_bins, ", frames <= ", desc_.audio_frames, "), got ",
              mel.sizes());
  auto x = compat::Gelu(conv2(compat::Gelu(conv1(mel))));  // (B, C, ceil(F/2))
  x = x.transpose(1, 2);                                   // (B, ceil(F/2), C)
  x = x + positions.narrow(0, 0, x.size(1));
  return final_norm(RunBlocks(blocks, x));
}

MlpProjectorImpl::MlpProjectorImpl(const plan::ModelDesc& desc, ParamFactory& params) {
  fc1 = register_module("fc1", Linear(desc.in_dim, desc.out_dim, true, params));
  fc2 = register_module("fc2", Linear(desc.out_dim, desc.out_dim, true, params));
}

torch::Tensor MlpProjectorImpl::forward(const torch::Tensor& x) {
  return fc2(compat::Gelu(fc1(x)));
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
