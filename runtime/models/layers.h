// SPDX-License-Identifier: Apache-2.0
// The building blocks every runtime model is made of, with deterministic
// parameter creation.
//
// Owns: ModelBuildOptions (seed, device, dtype), ParamFactory (creates every
// parameter in construction order from one seeded generator, or only its
// shape on the meta device), and the small layers: Linear, RmsNorm,
// LayerNorm, Embedding, QuickGelu. They are written on the functional torch API rather
// than torch::nn::Linear & co. so that the same code builds on the meta
// device (parameter counting), on CPU and on CUDA, with one init scheme.
// Runtime-internal: includes torch; only runtime/*.cc include it.
// May call: libtorch. Thread-safety: a module is used by one thread at a time.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdint>
#include <utility>

namespace maestro::runtime {

struct ModelBuildOptions {
  uint64_t seed = 0;                     // same seed, same desc -> same weights, bit for bit
  torch::Device device = torch::kCPU;    // torch::kMeta: shapes only, nothing allocated
  torch::Dtype dtype = torch::kFloat32;  // parameter dtype
  double init_std = 0.02;                // std of every weight matrix / embedding
};

// Creates parameters in call order from one CPU generator seeded with
// options.seed, so the weights do not depend on the device or thread count.
class ParamFactory {
 public:
  explicit ParamFactory(const ModelBuildOptions& options)
      : options_(options), generator_(at::detail::createCPUGenerator(options.seed)) {}

  bool meta() const { return options_.device.type() == torch::kMeta; }

  // (shape) drawn from N(0, init_std^2).
  torch::Tensor Normal(at::IntArrayRef shape) {
    if (meta()) return Empty(shape);
    auto t = torch::empty(shape, torch::TensorOptions().dtype(torch::kFloat32));
    t.normal_(0.0, options_.init_std, generator_);
    return t.to(options_.device, options_.dtype);
  }
  torch::Tensor Zeros(at::IntArrayRef shape) { return meta() ? Empty(shape) : torch::zeros(shape, TensorOptions()); }
  torch::Tensor Ones(at::IntArrayRef shape) { return meta() ? Empty(shape) : torch::ones(shape, TensorOptions()); }
  // A fixed (non-trained) tensor computed by the caller, on the model's device.
  torch::Tensor Fixed(const torch::Tensor& value) {
    return meta() ? Empty(value.sizes()) : value.to(options_.device, options_.dtype);
  }
  torch::TensorOptions TensorOptions() const {
    return torch::TensorOptions().dtype(options_.dtype).device(options_.device);
  }

 private:
  torch::Tensor Empty(at::IntArrayRef shape) const { return torch::empty(shape, TensorOptions()); }

  ModelBuildOptions options_;
  at::Generator generator_;
};

// y = x W^T + b. weight (out, in), bias (out) or none.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool with_bias, ParamFactory& params) {
    weight = register_parameter("weight", params.Normal({out_features, in_features}));
    if (with_bias) bias = register_parameter("bias", params.Zeros({out_features}));
  }
  // x: (..., in) -> (..., out)
  torch::Tensor forward(const torch::Tensor& x) { return torch::linear(x, weight, bias); }

  torch::Tensor weight, bias;  // bias undefined when built without one
};
TORCH_MODULE(Linear);

// RMSNorm (Llama): x / sqrt(mean(x^2) + eps) * weight, computed in fp32.
// unit_offset (Gemma): x / sqrt(mean(x^2) + eps) * (1 + weight) all in fp32,
// then cast to x's dtype; the weight starts at 0.
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps, ParamFactory& params, bool unit_offset = false)
      : eps_(eps), unit_offset_(unit_offset) {
    weight = register_parameter("weight", unit_offset ? params.Zeros({dim}) : params.Ones({dim}));
  }
  // x: (..., C) -> (..., C), same dtype as x.
  torch::Tensor forward(const torch::Tensor& x) {
    auto x32 = x.to(torch::kFloat32);
    auto normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    if (unit_offset_) return (normed * (1.0 + weight.to(torch::kFloat32))).to(x.scalar_type());
    return weight * normed.to(x.scalar_type());
  }

  torch::Tensor weight;  // (C)

 private:
  double eps_;
  bool unit_offset_;
};
TORCH_MODULE(RmsNorm);

// LayerNorm with affine weight and bias.
class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t dim, double eps, ParamFactory& params) : dim_(dim), eps_(eps) {
    weight = register_parameter("weight", params.Ones({dim}));
    bias = register_parameter("bias", params.Zeros({dim}));
  }
  // x: (..., C) -> (..., C), in the weights' dtype. A bf16 x under fp32
  // weights (mixed precision) is normalized in fp32, as CUDA's autocast does
  // by itself; the CPU's autocast (libtorch 1.13) would pass it through to a
  // kernel that refuses mixed dtypes.
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::layer_norm(x.scalar_type() == weight.scalar_type() ? x : x.to(weight.scalar_type()), {dim_}, weight,
                             bias, eps_);
  }

  torch::Tensor weight, bias;  // (C), (C)

 private:
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(LayerNorm);

// CLIP's and Qwen2-VL's "quick_gelu": x * sigmoid(1.702 x).
inline torch::Tensor QuickGelu(const torch::Tensor& x) {
  return x * torch::sigmoid(1.702 * x);
}

// Token embedding table.
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t vocab, int64_t dim, ParamFactory& params) {
    weight = register_parameter("weight", params.Normal({vocab, dim}));
  }
  // ids: (B, T) int64 in [0, vocab) -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& ids) { return torch::embedding(weight, ids); }

  torch::Tensor weight;  // (V, C)
};
TORCH_MODULE(Embedding);

}  // namespace maestro::runtime
