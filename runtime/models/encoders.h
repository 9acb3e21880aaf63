// SPDX-License-Identifier: Apache-2.0
// The encoder-side models as torch modules: ViT encoder, audio encoder and
// the MLP projector, plus BuildModel for any ModelDesc.
//
// Owns:
//   EncoderBlock (pre-LN, as torch.nn.TransformerEncoderLayer(norm_first=True)):
//     x + attn(ln(x)), then x + fc2(gelu(fc1(ln(x)))); exact (erf) GELU;
//     attention: fused qkv (3C, C) + bias, non-causal, out (C, C) + bias.
//   VitEncoder:  images (B, Cin, S, S) -> Conv2d(Cin, C, P, stride P) ->
//     (B, N, C), N = (S/P)^2, + learned positions (1, N, C) -> blocks ->
//     final LayerNorm -> (B, N, C). No class token.
//   AudioEncoder (Whisper-like): mel (B, M, F) -> Conv1d(M, C, 3, pad 1) ->
//     GELU -> Conv1d(C, C, 3, stride 2, pad 1) -> GELU -> (B, ceil(F/2), C)
//     + fixed sinusoidal positions (a buffer, not a parameter) -> blocks ->
//     final LayerNorm -> (B, ceil(F/2), C).
//   MlpProjector: x (..., in_dim) -> Linear -> GELU -> Linear -> (..., out_dim).
// Letters: B batch, C hidden, F ffn_hidden in blocks / frames in audio,
// N patches, M mel bins, S image side, P patch side.
// Parameter names: patch_embed.{weight,bias}, pos_embed, conv1.*, conv2.*,
//   blocks.<i>.{attn_norm,mlp_norm}.{weight,bias}, blocks.<i>.attn.{qkv,out}.{weight,bias},
//   blocks.<i>.{fc1,fc2}.{weight,bias}, final_norm.{weight,bias}; projector fc1.*, fc2.*.
// Runtime-internal: includes torch; only runtime/*.cc include it.
// May call: libtorch, runtime/torch_compat.h, plan. Thread-safety: one thread
// per module at a time.
#pragma once

#include <memory>

#include "base/status.h"
#include "plan/plan.h"
#include "runtime/models/layers.h"

namespace maestro::runtime {

// Conv over the last 1 or 2 dims: weight (Cout, Cin, k[, k]), bias (Cout).
class ConvImpl : public torch::nn::Module {
 public:
  // spatial_dims: 1 (Conv1d) or 2 (Conv2d); square kernels.
  ConvImpl(int spatial_dims, int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
           ParamFactory& params);
  // x: (B, Cin, L) -> (B, Cout, L') for 1 dim; (B, Cin, H, W) -> (B, Cout, H', W') for 2.
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight, bias;

 private:
  int spatial_dims_;
  int64_t stride_, padding_;
};
TORCH_MODULE(Conv);

// Bidirectional multi-head self-attention with a fused qkv projection.
class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(int64_t hidden, int64_t heads, ParamFactory& params);
  // x: (B, T, C) -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x);

  Linear qkv{nullptr};  // (3C, C) + (3C): rows q, then k, then v
  Linear out{nullptr};  // (C, C) + (C)

 private:
  int64_t heads_;
};
TORCH_MODULE(SelfAttention);

class EncoderBlockImpl : public torch::nn::Module {
 public:
  EncoderBlockImpl(int64_t hidden, int64_t heads, int64_t ffn_hidden, double eps, ParamFactory& params);
  // x: (B, T, C) -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x);

  LayerNorm attn_norm{nullptr}, mlp_norm{nullptr};
  SelfAttention attn{nullptr};
  Linear fc1{nullptr}, fc2{nullptr};  // (F, C), (C, F), with biases
};
TORCH_MODULE(EncoderBlock);

class VitEncoderImpl : public torch::nn::Module {
 public:
  // REQUIRES: ValidateModelDesc(desc).ok() and desc.kind == kVit.
  VitEncoderImpl(const plan::ModelDesc& desc, ParamFactory& params);
  // images: (B, channels, image_size, image_size) float -> (B, N, C), N = (image_size/patch_size)^2
  torch::Tensor forward(const torch::Tensor& images);

  const plan::ModelDesc& desc() const { return desc_; }
  int64_t num_patches() const;

  // Output rows per image: N / spatial_merge^2 (N without a merger).
  int64_t output_tokens() const;
  // Output width: out_dim with a merger, else hidden.
  int64_t output_dim() const;

  Conv patch_embed{nullptr};
  torch::Tensor pos_embed;  // (1, N, C)
  torch::nn::ModuleList blocks;
  LayerNorm final_norm{nullptr};
  // Qwen2-VL-style patch merger, present when extra.spatial_merge = m > 0:
  // LayerNorm(C) -> each m x m block of neighbouring patches concatenated
  // (m^2 C) -> Linear(m^2 C, merger_hidden) -> GELU -> Linear(merger_hidden,
  // out_dim). merger_hidden defaults to m^2 C.
  LayerNorm merger_norm{nullptr};
  Linear merger_fc1{nullptr}, merger_fc2{nullptr};

 private:
  plan::ModelDesc desc_;
};
TORCH_MODULE(VitEncoder);

// Whisper's sinusoids: (length, C) with [sin | cos] halves, timescales
// 10000^(-i/(C/2-1)), i < C/2. REQUIRES: C even, >= 4.
torch::Tensor SinusoidalPositions(int64_t length, int64_t channels);

class AudioEncoderImpl : public torch::nn::Module {
 public:
  // REQUIRES: ValidateModelDesc(desc).ok() and desc.kind == kAudioEncoder.
  AudioEncoderImpl(const plan::ModelDesc& desc, ParamFactory& params);
  // mel: (B, mel_bins, frames), frames <= audio_frames -> (B, ceil(frames/2), C)
  torch::Tensor forward(const torch::Tensor& mel);

  const plan::ModelDesc& desc() const { return desc_; }

  Conv conv1{nullptr}, conv2{nullptr};
  torch::Tensor positions;  // buffer (ceil(audio_frames/2), C)
  torch::nn::ModuleList blocks;
  LayerNorm final_norm{nullptr};

 private:
  plan::ModelDesc desc_;
};
TORCH_MODULE(AudioEncoder);

class MlpProjectorImpl : public torch::nn::Module {
 public:
  // REQUIRES: ValidateModelDesc(desc).ok() and desc.kind == kProjector.
  MlpProjectorImpl(const plan::ModelDesc& desc, ParamFactory& params);
  // x: (..., in_dim) -> (..., out_dim)
  torch::Tensor forward(const torch::Tensor& x);

  Linear fc1{nullptr}, fc2{nullptr};  // (out, in) + (out), (out, out) + (out)
};
TORCH_MODULE(MlpProjector);

// Each returns the model of desc with weights drawn from options.seed, or
// InvalidArgument when desc is not valid for that kind.
StatusOr<VitEncoder> BuildVitEncoder(const plan::ModelDesc& desc, const ModelBuildOptions& options = {});
StatusOr<AudioEncoder> BuildAudioEncoder(const plan::ModelDesc& desc, const ModelBuildOptions& options = {});
StatusOr<MlpProjector> BuildMlpProjector(const plan::ModelDesc& desc, const ModelBuildOptions& options = {});

// Any kind (decoder included) as a plain module: for parameters(), to(),
// train(), state_dict-style checkpoints. Cast with ->as<DecoderLMImpl>() etc.
StatusOr<std::shared_ptr<torch::nn::Module>> BuildModel(const plan::ModelDesc& desc,
                                                        const ModelBuildOptions& options = {});

}  // namespace maestro::runtime
