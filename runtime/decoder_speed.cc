// SPDX-License-Identifier: Apache-2.0
#include "runtime/decoder_speed.h"

#include <torch/torch.h>

#include <chrono>

#include "runtime/models/decoder.h"

namespace maestro::runtime {
namespace {

void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

}  // namespace

bool CudaUsable(std::string* why) {
  if (!torch::cuda::is_available()) {
    if (why != nullptr) {
      *why = at::hasCUDA() ? "libtorch has CUDA but no CUDA device is visible"
                           : "this libtorch (" + std::to_string(TORCH_VERSION_MAJOR) + "." +
                                 std::to_string(TORCH_VERSION_MINOR) + ") was built without CUDA";
    }
    return false;
  }
  return true;
}

StatusOr<DecoderSpeed> MeasureDecoderTraining(const plan::ModelDesc& desc, const DecoderSpeedOptions& options) {
  if (options.device != "cuda" && options.device != "cpu") {
    return Status::InvalidArgument("MeasureDecoderTraining: device must be \"cuda\" or \"cpu\", not \"" +
                                   options.device + "\"");
  }
  std::string why;
  if (options.device == "cuda" && !CudaUsable(&why)) return Status::FailedPrecondition(why);
  if (options.micro_batch < 1 || options.seq_len < 2 || options.steps < 1 || options.warmup < 0) {
    return Status::InvalidArgument("MeasureDecoderTraining: micro_batch >= 1, seq_len >= 2, steps >= 1, warmup >= 0");
  }
  const torch::Device device = options.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  ModelBuildOptions build;
  build.seed = 1;
  build.device = device;
  build.dtype = options.bf16 ? torch::kBFloat16 : torch::kFloat32;
  auto model = BuildDecoder(desc, build);
  if (!model.ok()) return model.status();
  DecoderLM lm = *model;
  lm->train();
  DecoderSpeed out;
  for (const auto& p : lm->parameters()) out.params += p.numel();
  torch::optim::AdamW optimizer(lm->parameters(), torch::optim::AdamWOptions(1e-4).weight_decay(0.0));
  torch::manual_seed(2);
  // (B, T + 1) ids: the model reads the first T, the loss targets the last T.
  const auto ids = torch::randint(0, desc.vocab, {options.micro_batch, options.seq_len + 1},
                                  torch::TensorOptions().dtype(torch::kInt64).device(device));
  const auto inputs = ids.narrow(1, 0, options.seq_len);   // (B, T)
  const auto targets = ids.narrow(1, 1, options.seq_len);  // (B, T)
  const auto step = [&] {
    optimizer.zero_grad();
    auto logits = lm->forward(inputs);  // (B, T, V)
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, desc.vocab}).to(torch::kFloat32),
                                                     targets.reshape({-1}));
    loss.backward();
    optimizer.step();
  };
  for (int i = 0; i < options.warmup; ++i) step();
  Synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < options.steps; ++i) step();
  Synchronize(device);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.seconds_per_step = seconds / options.steps;
  out.tokens_per_second = static_cast<double>(options.micro_batch) * options.seq_len / out.seconds_per_step;
  out.device = device.str();
  out.dtype = options.bf16 ? "bf16" : "fp32";
  return out;
}

}  // namespace maestro::runtime
