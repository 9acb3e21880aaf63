// SPDX-License-Identifier: Apache-2.0
// Activation recomputation (runtime/recompute.h) against the same model
// without it: a decoder (GQA, RoPE, SwiGLU), a ViT, a Qwen2-VL vision tower
// (2-D RoPE tables captured by the recomputed block) and a Whisper encoder,
// each with full and with selective recomputation, give the same output,
// loss, input gradient and parameter gradients, fp32 on the CPU within 1e-5
// relative (max|a - b| <= 1e-5 max|b| per tensor), and under bf16 autocast
// within bf16's tolerance (the weights' gradients reach the fp32 masters
// through the recomputation: a grad-free weight cast in autocast's cache
// would drop them). The recomputation is proved to happen: the model's
// forward runs again in backward (a counter on the recomputed function), and
// without grad mode nothing is recomputed.
#include "runtime/recompute.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "runtime/torch_compat.h"
#include "tests/fixtures/models.h"

namespace maestro::runtime {
namespace {

using plan::ModelDesc;
using plan::RecomputeGranularity;

struct Result {
  torch::Tensor output;                                      // the model's output, fp32
  torch::Tensor input_grad;                                  // d loss / d input (float inputs only)
  std::vector<std::pair<std::string, torch::Tensor>> grads;  // every parameter's
};

// Builds the model of `desc` (seed 7), sets `g`, runs forward on `input`
// (under bf16 autocast when `bf16`), loss = sum(output * probe), backward.
Result Run(const ModelDesc& desc, RecomputeGranularity g, const torch::Tensor& input, bool bf16) {
  ModelBuildOptions build;
  build.seed = 7;
  auto module = BuildModel(desc, build).ValueOrDie();
  torch::Tensor in = input.is_floating_point() ? input.clone().requires_grad_(true) : input;
  torch::Tensor out;
  {
    compat::AutocastGuard autocast(torch::kCPU, bf16);
    if (desc.kind == plan::ModelKind::kDecoder) {
      auto* lm = module->as<DecoderLMImpl>();
      lm->SetRecompute(g);
      out = lm->forward(in);
    } else if (desc.kind == plan::ModelKind::kVit) {
      auto* vit = module->as<VitEncoderImpl>();
      vit->SetRecompute(g);
      out = vit->forward(in);
    } else {
      auto* audio = module->as<AudioEncoderImpl>();
      audio->SetRecompute(g);
      out = audio->forward(in);
    }
  }
  torch::manual_seed(11);
  auto probe = torch::randn(out.sizes());
  auto loss = (out.to(torch::kFloat32) * probe).sum();
  loss.backward();
  compat::ClearAutocastCache();
  Result r;
  r.output = out.detach().to(torch::kFloat32);
  if (in.is_floating_point()) r.input_grad = in.grad();
  for (const auto& p : module->named_parameters()) {
    if (p.value().requires_grad()) r.grads.emplace_back(p.key(), p.value().grad());
  }
  return r;
}

void ExpectClose(const torch::Tensor& got, const torch::Tensor& want, double rel, const std::string& what) {
  ASSERT_TRUE(want.defined()) << what;
  ASSERT_TRUE(got.defined()) << what << ": no gradient with recomputation";
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = want.abs().max().item<double>();
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LE(diff, rel * scale + 1e-12) << what << ": max diff " << diff << " vs max " << scale;
}

void ExpectSame(const ModelDesc& desc, const torch::Tensor& input, RecomputeGranularity g, bool bf16, double rel) {
  const std::string name = std::string(plan::ModelKindName(desc.kind)) + " " + plan::RecomputeGranularityName(g) +
                           (bf16 ? " bf16" : " fp32");
  const Result plain = Run(desc, RecomputeGranularity::kNone, input, bf16);
  const Result recomputed = Run(desc, g, input, bf16);
  ExpectClose(recomputed.output, plain.output, rel, name + " output");
  if (plain.input_grad.defined()) ExpectClose(recomputed.input_grad, plain.input_grad, rel, name + " input grad");
  ASSERT_EQ(recomputed.grads.size(), plain.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    ExpectClose(recomputed.grads[i].second, plain.grads[i].second, rel, name + " " + plain.grads[i].first);
  }
}

torch::Tensor Ids() {
  torch::manual_seed(3);
  return torch::randint(0, 50, {2, 7}, torch::kLong);
}
torch::Tensor Images(int64_t side) {
  torch::manual_seed(5);
  return torch::randn({2, 3, side, side});
}

constexpr double kFp32 = 1e-5;
constexpr double kBf16 = 2e-2;  // bf16 keeps 8 mantissa bits; the two runs round differently

TEST(Recompute, DecoderFullAndSelectiveEqualPlainFp32) {
  ExpectSame(fixtures::TinyDecoderModel(), Ids(), RecomputeGranularity::kFull, false, kFp32);
  ExpectSame(fixtures::TinyDecoderModel(), Ids(), RecomputeGranularity::kSelective, false, kFp32);
}

TEST(Recompute, VitFullAndSelectiveEqualPlainFp32) {
  ExpectSame(fixtures::TinyVitModel(), Images(8), RecomputeGranularity::kFull, false, kFp32);
  ExpectSame(fixtures::TinyVitModel(), Images(8), RecomputeGranularity::kSelective, false, kFp32);
}

TEST(Recompute, Qwen2VlVisionRopeAndWhisperEqualPlainFp32) {
  ExpectSame(fixtures::TinyQwen2VlVisionModel(), Images(16), RecomputeGranularity::kFull, false, kFp32);
  ExpectSame(fixtures::TinyQwen2VlVisionModel(), Images(16), RecomputeGranularity::kSelective, false, kFp32);
  ExpectSame(fixtures::TinyQwen25VlVisionModel(), Images(24), RecomputeGranularity::kFull, false, kFp32);
  ExpectSame(fixtures::TinyQwen25VlVisionModel(), Images(24), RecomputeGranularity::kSelective, false, kFp32);
  torch::manual_seed(9);
  const auto mel = torch::randn({2, 10, 11});
  ExpectSame(fixtures::TinyAudioModel(), mel, RecomputeGranularity::kFull, false, kFp32);
  ExpectSame(fixtures::TinyAudioModel(), mel, RecomputeGranularity::kSelective, false, kFp32);
}

TEST(Recompute, DecoderAndVitUnderBf16AutocastEqualPlain) {
  for (auto g : {RecomputeGranularity::kFull, RecomputeGranularity::kSelective}) {
    ExpectSame(fixtures::TinyDecoderModel(), Ids(), g, true, kBf16);
    ExpectSame(fixtures::TinyVitModel(), Images(8), g, true, kBf16);
  }
}

// RunRecomputed itself: the function runs once in forward and once more in
// backward; without grad mode, or when no input needs a gradient, once.
TEST(Recompute, RunsTheForwardAgainInBackwardOnlyWhenTraining) {
  int calls = 0;
  auto weight = torch::randn({4, 4}, torch::requires_grad());
  RecomputedForward f = [&](const std::vector<torch::Tensor>& in) {
    ++calls;
    return torch::tanh(torch::matmul(in[0], weight));
  };
  auto x = torch::randn({3, 4}, torch::requires_grad());
  auto y = RunRecomputed(f, {x});
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(y.grad_fn() == nullptr);
  y.sum().backward();
  EXPECT_EQ(calls, 2);
  // The same gradients as the plain call.
  auto x2 = x.detach().clone().requires_grad_(true);
  auto w_grad = weight.grad().clone();
  weight.mutable_grad().zero_();
  torch::tanh(torch::matmul(x2, weight)).sum().backward();
  ExpectClose(x.grad(), x2.grad(), kFp32, "input grad");
  ExpectClose(w_grad, weight.grad(), kFp32, "weight grad");
  {
    torch::NoGradGuard no_grad;
    RunRecomputed(f, {x});
  }
  RunRecomputed(f, {x.detach()});
  EXPECT_EQ(calls, 4);
}

}  // namespace
}  // namespace maestro::runtime
