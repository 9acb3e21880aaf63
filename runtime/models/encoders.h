// SPDX-License-Identifier: Apache-2.0
// The encoder-side models as torch modules: ViT encoder, audio encoder and
// the MLP projector, plus BuildModel for any ModelDesc.
//
// Owns:
//   EncoderBlock (pre-LN): x + attn(ln(x)), then x + fc2(act(fc1(ln(x))));
//     act: exact (erf) GELU, quick_gelu (CLIP, Qwen2-VL) or gelu_tanh
//     (SigLIP's gelu_pytorch_tanh); attention
//     non-causal, either a fused qkv (3C, C) + bias, or separate q/k/v
//     projections (CLIP; Whisper: k without bias), and out (C, C) + bias;
//     optionally rotary positions on q and k (Qwen2-VL's 2-D RoPE).
//   VitEncoder, one of four layouts (extra.vit_layout, hf/name_map.h):
//     built-in: images (B, Cin, S, S) -> Conv2d(Cin, C, P, stride P) + bias ->
//       (B, N, C), N = (S/P)^2, + learned positions (1, N, C) -> blocks ->
//       final LayerNorm -> (B, N, C), optionally the patch merger.
//     CLIP (CLIPVisionModel): Conv2d without bias -> [class_embedding;
//       patches] (B, 1+N, C) + position embedding (1+N, C) -> pre_layrnorm ->
//       blocks (separate q/k/v/out with biases, quick_gelu) -> (B, 1+N, C):
//       HF's last_hidden_state, the CLS row first. post_layernorm
//       (final_norm) is kept for loading and export but, as in HF, only
//       feeds the pooled CLS output, which a section does not produce: it
//       gets no gradient.
//     SigLIP (SiglipVisionModel): Conv2d + bias ("valid": the last
//       image_size % P pixels dropped) -> (B, N, C), N = floor(S/P)^2, + a
//       position embedding (N, C), no class token -> blocks (separate q/k/v/out
//       with biases, gelu_tanh, LayerNorm eps 1e-6) -> post_layernorm
//       (final_norm) -> (B, N, C): HF's last_hidden_state. With
//       extra.attn_pool_head (vision_use_head) the attention-pooling head is
//       built, loaded and exported; it makes HF's pooler_output (Pool), which a
//       section does not produce: it gets no gradient.
//     Qwen2-VL (its vision tower): the image repeated over temporal_patch
//       frames -> Conv3d(Cin, C, (T, P, P)) without bias -> (B, N, C) ->
//       blocks (fused qkv + bias, 2-D RoPE over patch row / column, quick_gelu,
//       LayerNorm eps 1e-6) -> PatchMerger -> (B, N/m^2, out_dim); no final
//       norm. Fixed-size images run as packed input (ForwardPacked): one
//       code path for both.
//     Qwen2.5-VL (Qwen2_5_VisionTransformerPretrainedModel): as Qwen2-VL
//       with RMSNorms (eps 1e-6; the merger's ln_q too), a SwiGLU MLP
//       with biases (down(silu(gate(x)) * up(x))) and window attention:
//       merge groups reordered window by window (runtime/models/qwen_vision.h
//       VisionWindowIndex) before the blocks, blocks outside
//       fullatt_block_indexes attending inside their window, the merged
//       rows put back in order after the merger.
//   Packed, variable-size input (the Qwen towers): ForwardPacked takes every
//     image's and video's patches in HF's order with their PatchGrids; each
//     temporal patch of each item is its own attention segment (no padding
//     to a common size: EncoderSequenceSplit's block-diagonal attention).
//   AudioEncoder (WhisperEncoder): mel (B, M, F) -> Conv1d(M, C, 3, pad 1) ->
//     GELU -> Conv1d(C, C, 3, stride 2, pad 1) -> GELU -> (B, ceil(F/2), C)
//     + embed_positions (a frozen parameter, Whisper's sinusoids at init) ->
//     blocks (q/v/out with bias, k without) -> final LayerNorm.
//   MlpProjector (LLaVA's mlp2x_gelu): x (..., in_dim) -> Linear -> GELU ->
//     Linear -> (..., out_dim).
//   Tensor parallelism (ShardEncoderForTensorParallel), Megatron-style as
//     the decoder: in every block the attention heads (q/k/v rows, a fused
//     qkv's per q, k and v; out's columns) and the MLP's inner units (fc1's
//     rows, fc2's columns) are split over the TP ranks, and so are the
//     patch merger's and the projector's inner units (fc1 rows, fc2
//     columns). Each column-parallel -> row-parallel pair sits between
//     EnterTensorParallel and LeaveTensorParallel; a row-parallel layer's
//     bias is added once, after the all-reduce. Patch/conv embeddings,
//     positions, the class token and every LayerNorm stay replicated.
// Letters: B batch, C hidden, F ffn_hidden in blocks / frames in audio,
// N patches, M mel bins, S image side, P patch side, T temporal patch.
// Parameter names (hf/name_map.cc maps them to Hugging Face's):
//   built-in ViT: patch_embed.{weight,bias}, pos_embed,
//     blocks.<i>.{attn_norm,mlp_norm}.{weight,bias}, blocks.<i>.attn.{qkv,out}.{weight,bias},
//     blocks.<i>.{fc1,fc2}.{weight,bias}, final_norm.*, merger_norm.*, merger_fc1.*, merger_fc2.*;
//   CLIP: class_embedding, patch_embed.weight, pos_embed, pre_norm.*,
//     blocks.<i>.attn.{q_proj,k_proj,v_proj,out}.*, the block norms and fc's, final_norm.*;
//   SigLIP: patch_embed.{weight,bias}, pos_embed, blocks (as CLIP), final_norm.*,
//     head.{probe,in_proj.*,out_proj.*,norm.*,mlp_fc1.*,mlp_fc2.*};
//   Qwen2-VL: patch_embed.weight, blocks (as built-in), merger_*;
//   Qwen2.5-VL: patch_embed.weight, blocks.<i>.{attn_norm,mlp_norm}.weight,
//     blocks.<i>.attn.{qkv,out}.*, blocks.<i>.mlp.{gate_proj,up_proj,down_proj}.{weight,bias},
//     merger_norm.weight, merger_fc1.*, merger_fc2.*;
//   audio: conv1.*, conv2.*, embed_positions, blocks.<i>.attn.{q_proj,k_proj.weight,v_proj,out}.*,
//     the block norms and fc's, final_norm.*; projector fc1.*, fc2.*.
// Runtime-internal: includes torch; only runtime/*.cc include it.
// Activation recomputation: VitEncoder / AudioEncoder SetRecompute, as
// DecoderLM's (full: each block's call through RunRecomputed; selective:
// each attention's core).
// May call: libtorch, runtime/torch_compat.h, runtime/recompute.h, runtime/parallel/tensor_parallel.h,
// runtime/models/qwen_vision.h (the Qwen towers' packed-input arithmetic),
// runtime/parallel/vit_context_parallel.h, launcher (the CP group), plan,
// hf/name_map.h. Thread-safety: one thread per module at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "launcher/comm.h"
#include "plan/plan.h"
#include "runtime/models/decoder.h"
#include "runtime/models/layers.h"
#include "runtime/models/qwen_vision.h"

namespace maestro::runtime {

struct EncoderContextParallel;  // runtime/parallel/vit_context_parallel.h
// PatchGrid {t, h, w}: runtime/models/qwen_vision.h (included above), the
// grid of one image or video of VitEncoderImpl::ForwardPacked.

// Conv over the last 1, 2 or 3 dims: weight (Cout, Cin, k...), bias (Cout) or none.
class ConvImpl : public torch::nn::Module {
 public:
  // kernel: one size per spatial dim (1: Conv1d, 2: Conv2d, 3: Conv3d); stride
  // and padding the same in every dim, or stride = kernel when stride_is_kernel.
  ConvImpl(std::vector<int64_t> kernel, int64_t in_channels, int64_t out_channels, int64_t stride, int64_t padding,
           bool with_bias, ParamFactory& params, bool stride_is_kernel = false);
  // x: (B, Cin, L...) -> (B, Cout, L'...)
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight, bias;  // bias undefined when built without one

 private:
  std::vector<int64_t> stride_, padding_;
};
TORCH_MODULE(Conv);

// How an attention block holds its input projections.
enum class QkvLayout {
  kFused,     // qkv (3C, C) + bias: rows q, then k, then v (built-in ViT, Qwen2-VL)
  kSeparate,  // q_proj, k_proj, v_proj (C, C) + biases (CLIP)
  kWhisper,   // as kSeparate, k_proj without bias
};

// Bidirectional multi-head self-attention.
class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(int64_t hidden, int64_t heads, QkvLayout layout, ParamFactory& params);
  // x: (B, T, C); rope: nullptr, or (T, D) tables applied to q and k in fp32
  // -> (B, T, C)
  // tp: set on a TP shard; the output is then complete (all-reduced).
  // cp: set under context parallelism: x (1, chunk, C) is this rank's part
  // of the micro-batch's tokens; k and v are all-gathered over the CP group
  // and each query attends to its own image's keys only.
  torch::Tensor forward(const torch::Tensor& x, const RopeTables* rope = nullptr, TensorParallelReducer* tp = nullptr,
                        const EncoderContextParallel* cp = nullptr);

  Linear qkv{nullptr};                                       // kFused
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr};  // kSeparate, kWhisper
  Linear out{nullptr};                                       // (C, C) + (C)
  // Selective recomputation of the core softmax(QK^T)V (runtime/recompute.h).
  bool recompute_core = false;
  // Keeps heads [r*H/n, (r+1)*H/n): their q/k/v rows and biases
  // (column-parallel), out's columns (row-parallel; its bias whole).
  // REQUIRES: n divides H.
  void Shard(int rank, int size);

 private:
  int64_t heads_, head_dim_;
};
TORCH_MODULE(SelfAttention);

enum class MlpActivation { kGelu, kQuickGelu, kGeluTanh };

class EncoderBlockImpl : public torch::nn::Module {
 public:
  // rms_norm_swiglu (Qwen2.5-VL): RMSNorms attn_norm / mlp_norm (weight only)
  // and a SwiGLU mlp with biases; `activation` is then unused.
  EncoderBlockImpl(int64_t hidden, int64_t heads, int64_t ffn_hidden, double eps, QkvLayout layout,
                   MlpActivation activation, ParamFactory& params, bool rms_norm_swiglu = false);
  // x: (B, T, C); rope, cp as SelfAttention -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x, const RopeTables* rope = nullptr,
                        const EncoderContextParallel* cp = nullptr);

  LayerNorm attn_norm{nullptr}, mlp_norm{nullptr};
  RmsNorm attn_rms_norm{nullptr}, mlp_rms_norm{nullptr};  // rms_norm_swiglu: named attn_norm, mlp_norm
  SelfAttention attn{nullptr};
  Linear fc1{nullptr}, fc2{nullptr};    // (F, C), (C, F), with biases
  SwiGluMlp mlp{nullptr};               // rms_norm_swiglu: gate/up (F, C) + (F), down (C, F) + (C)
  TensorParallelReducer* tp = nullptr;  // set by ShardEncoderForTensorParallel
  // The attention's heads and F/n of the MLP's inner units (fc1 rows, fc2
  // columns; gate/up rows and biases, down columns). REQUIRES: n divides H and F.
  void Shard(int rank, int size);

 private:
  MlpActivation activation_;
};
TORCH_MODULE(EncoderBlock);

// SigLIP's attention-pooling head (SiglipMultiheadAttentionPoolingHead): a
// learned probe attends over the rows through one multi-head attention
// (in_proj: q, k, v rows of (3C, C) + (3C); out_proj (C, C) + (C)), giving
// y (B, 1, C); then y + fc2(gelu_tanh(fc1(norm(y)))), its one row.
// Replicated under tensor parallelism (it is not on a section's path).
class AttnPoolHeadImpl : public torch::nn::Module {
 public:
  AttnPoolHeadImpl(int64_t hidden, int64_t heads, int64_t ffn_hidden, double eps, ParamFactory& params);
  // x: (B, T, C) -> (B, C)
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor probe;                         // (1, 1, C)
  Linear in_proj{nullptr}, out_proj{nullptr};  // (3C, C) + (3C), (C, C) + (C)
  LayerNorm norm{nullptr};
  Linear mlp_fc1{nullptr}, mlp_fc2{nullptr};  // (F, C) + (F), (C, F) + (C)

 private:
  int64_t heads_;
};
TORCH_MODULE(AttnPoolHead);

class VitEncoderImpl : public torch::nn::Module {
 public:
  // REQUIRES: ValidateModelDesc(desc).ok() and desc.kind == kVit.
  VitEncoderImpl(const plan::ModelDesc& desc, ParamFactory& params);
  // images: (B, channels, image_size, image_size) float -> (B, output_tokens(), output_dim())
  // The Qwen towers run them as ForwardPacked with grids (1, S/P, S/P).
  torch::Tensor forward(const torch::Tensor& images);
  // The Qwen towers (Qwen2-VL, Qwen2.5-VL) on packed, variable-size input,
  // as HF's forward(pixel_values, grid_thw): patches (N, C*T*P*P) fp32, every
  // item's t*h*w patches in HF's order (Qwen2VLImageProcessor: each merge
  // window's m*m patches together), grids one per item, h and w multiples
  // of the spatial merge m -> (N / m^2, output_dim()), the merged rows in
  // the same order. Each temporal patch of each item attends to itself
  // only. Under context_parallel the N patches split over the CP group as
  // forward's do. TORCH_CHECK (an InvalidArgument-style message) on another
  // layout, a grid that does not tile by m, or N != sum t*h*w.
  torch::Tensor ForwardPacked(const torch::Tensor& patches, const std::vector<PatchGrid>& grids);
  // Rows the blocks ran on in the last packed forward (this CP rank's chunk
  // under CP): the sum of the real patch counts, no padding without CP.
  int64_t blocks_input_rows() const { return blocks_input_rows_; }

  const plan::ModelDesc& desc() const { return desc_; }
  int layout() const { return layout_; }  // plan::kVitLayout*
  int64_t num_patches() const;
  // Activation recomputation of the blocks (DecoderLM::SetRecompute).
  void SetRecompute(plan::RecomputeGranularity granularity);

  // SigLIP with its head: HF's pooler_output of forward()'s output.
  // last_hidden_state: (B, N, C) -> (B, C). REQUIRES: head is built.
  torch::Tensor Pool(const torch::Tensor& last_hidden_state);

  // Output rows per image: N / spatial_merge^2 with a merger, N + 1 for CLIP
  // (the class token first), else N.
  int64_t output_tokens() const;
  // Output width: out_dim with a merger, else hidden.
  int64_t output_dim() const;

  Conv patch_embed{nullptr};
  torch::Tensor class_embedding;  // CLIP: (C)
  torch::Tensor pos_embed;        // built-in: (1, N, C); CLIP: (1+N, C); SigLIP: (N, C); Qwen2-VL: none (RoPE)
  LayerNorm pre_norm{nullptr};    // CLIP's pre_layrnorm
  torch::nn::ModuleList blocks;
  LayerNorm final_norm{nullptr};  // built-in, CLIP and SigLIP (post_layernorm)
  AttnPoolHead head{nullptr};     // SigLIP with extra.attn_pool_head
  // Qwen2-VL-style patch merger, present when extra.spatial_merge = m > 0:
  // LayerNorm(C) -> each m x m block of neighbouring patches concatenated
  // (m^2 C) -> Linear(m^2 C, merger_hidden) -> GELU -> Linear(merger_hidden,
  // out_dim). merger_hidden defaults to m^2 C.
  LayerNorm merger_norm{nullptr};
  RmsNorm merger_rms_norm{nullptr};  // Qwen2.5-VL's ln_q, named merger_norm (instead of the LayerNorm)
  Linear merger_fc1{nullptr}, merger_fc2{nullptr};
  TensorParallelReducer* tp = nullptr;  // set by ShardEncoderForTensorParallel (the merger's pair)
  // Context parallelism (docs/context_parallel_vit.md): the section's CP
  // group (must outlive the model), null or of size 1 when off. forward()
  // then splits the micro-batch's patches (every image, in order) into equal
  // contiguous chunks over the group, runs the blocks on this rank's chunk
  // (k and v all-gathered, attention per image) and all-gathers the rows
  // before the final merger: the output is whole on every CP rank, and its
  // gradient must be given on CP rank 0 only (zeros elsewhere), as the
  // executor's link end does.
  launcher::Backend* context_parallel = nullptr;

 private:
  // images (B, ...) under context parallelism -> as forward.
  torch::Tensor ForwardContextParallel(const torch::Tensor& images);
  // The merger, when the model has one: x (B, N, C) -> (B, N/m^2, out_dim); else x.
  torch::Tensor Merge(torch::Tensor x);
  // The merger on packed rows: x (N, C), each m^2 consecutive rows a merge
  // group -> (N/m^2, out_dim).
  torch::Tensor MergePacked(const torch::Tensor& x);
  plan::ModelDesc desc_;
  int layout_;
  plan::RecomputeGranularity recompute_ = plan::RecomputeGranularity::kNone;
  std::vector<bool> windowed_;  // per block: attends inside its window (Qwen2.5-VL)
  int64_t blocks_input_rows_ = 0;
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
  // Activation recomputation of the blocks (DecoderLM::SetRecompute).
  void SetRecompute(plan::RecomputeGranularity granularity);

  Conv conv1{nullptr}, conv2{nullptr};
  // (AudioPositions(desc), C), requires_grad false (HF freezes it too): an
  // optimizer must leave it out.
  torch::Tensor embed_positions;
  torch::nn::ModuleList blocks;
  LayerNorm final_norm{nullptr};

 private:
  plan::ModelDesc desc_;
  plan::RecomputeGranularity recompute_ = plan::RecomputeGranularity::kNone;
};
TORCH_MODULE(AudioEncoder);

class MlpProjectorImpl : public torch::nn::Module {
 public:
  // REQUIRES: ValidateModelDesc(desc).ok() and desc.kind == kProjector.
  MlpProjectorImpl(const plan::ModelDesc& desc, ParamFactory& params);
  // x: (..., in_dim) -> (..., out_dim)
  torch::Tensor forward(const torch::Tensor& x);

  Linear fc1{nullptr}, fc2{nullptr};    // (out, in) + (out), (out, out) + (out)
  TensorParallelReducer* tp = nullptr;  // set by ShardEncoderForTensorParallel
};
TORCH_MODULE(MlpProjector);

// Each returns the model of desc with weights drawn from options.seed, or
// InvalidArgument when desc is not valid for that kind.
StatusOr<VitEncoder> BuildVitEncoder(const plan::ModelDesc& desc, const ModelBuildOptions& options = {});
StatusOr<AudioEncoder> BuildAudioEncoder(const plan::ModelDesc& desc, const ModelBuildOptions& options = {});
StatusOr<MlpProjector> BuildMlpProjector(const plan::ModelDesc& desc, const ModelBuildOptions& options = {});

// Shards `model` (a VitEncoder, AudioEncoder or MlpProjector built from
// `desc`) for TP rank tp->rank() of tp->size() (the file comment says what is
// split) and wires `tp` (which must outlive the model). The weights are
// slices of the unsharded model's, so a TP run computes what the unsharded
// one does. InvalidArgument, naming the sizes, unless tp->size() divides the
// heads and ffn_hidden (and merger_hidden with a merger; out_dim for a
// projector).
Status ShardEncoderForTensorParallel(torch::nn::Module& model, const plan::ModelDesc& desc, TensorParallelReducer* tp);
// Ok when TP of size `n` splits desc's encoder or projector (the sizes above:
// plan/tensor_parallel_split.h, the rule's one home, which the planner's
// compiler/candidates.h TpSplitsHeads calls too), else the InvalidArgument
// ShardEncoderForTensorParallel returns.
Status CheckEncoderSplitsOverTp(const plan::ModelDesc& desc, int n);
// Any kind: ShardDecoderForTensorParallel or ShardEncoderForTensorParallel.
Status ShardModelForTensorParallel(torch::nn::Module& model, const plan::ModelDesc& desc, TensorParallelReducer* tp);
// How TP splits parameter `name` (as in named_parameters()) of any model
// kind: the decoder's rows/columns (TensorParallelShardDim), a fused qkv in 3
// parts, the encoders' and projector's pairs; {-1} when replicated.
TensorParallelSplit TensorParallelSplitOf(const std::string& name);

// Any kind (decoder included) as a plain module: for parameters(), to(),
// train(), state_dict-style checkpoints. Cast with ->as<DecoderLMImpl>() etc.
StatusOr<std::shared_ptr<torch::nn::Module>> BuildModel(const plan::ModelDesc& desc,
                                                        const ModelBuildOptions& options = {});

}  // namespace maestro::runtime
