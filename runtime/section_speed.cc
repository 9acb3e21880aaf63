// SPDX-License-Identifier: Apache-2.0
#include "runtime/section_speed.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <functional>

#include "base/checks.h"
#include "plan/issue_probe.h"
#include "plan/loss_chunk.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "runtime/torch_compat.h"
#include "runtime/vocab_loss.h"

// The CUDA caching allocator's statistics through the accelerator API
// (libtorch 2.9+); older ones report none (-1), and so does a build with
// -DMAESTRO_NO_DEVICE_STATS (scripts/gpu-kit.sh retries with it when a
// libtorch's headers disagree).
#if MAESTRO_TORCH_AT_LEAST(2, 9) && __has_include(<ATen/DeviceAccelerator.h>) && !defined(MAESTRO_NO_DEVICE_STATS)
#include <ATen/DeviceAccelerator.h>
#define MAESTRO_DEVICE_STATS 1
#else
#define MAESTRO_DEVICE_STATS 0
#endif

namespace maestro::runtime {
namespace {

using Clock = std::chrono::steady_clock;

void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Resets the peak of device 0's allocated bytes (CUDA, libtorch 2.9+).
void ResetDevicePeak(const torch::Device& device) {
#if MAESTRO_DEVICE_STATS
  if (device.is_cuda()) at::accelerator::resetPeakStats(device.has_index() ? device.index() : 0);
#else
  (void)device;
#endif
}

// The peak of allocated bytes since ResetDevicePeak; -1 when unknown.
int64_t DevicePeakBytes(const torch::Device& device) {
#if MAESTRO_DEVICE_STATS
  if (device.is_cuda()) {
    const auto stats = at::accelerator::getDeviceStats(device.has_index() ? device.index() : 0);
    return stats.allocated_bytes[0].peak;  // [0]: the aggregate over both pools
  }
#else
  (void)device;
#endif
  return -1;
}

// Ops counted over one step (MeasureSectionTraining): a start callback
// cannot capture, so the counts are globals, one counting at a time
// (section_speed.h: one call at a time).
std::atomic<int64_t> g_aten_ops{0}, g_autograd_nodes{0};

std::unique_ptr<at::ObserverContext> CountOp(const at::RecordFunction& fn) {
  (fn.scope() == at::RecordScope::BACKWARD_FUNCTION ? g_autograd_nodes : g_aten_ops)
      .fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

// Counts every op and autograd node while it lives (all threads).
class OpCounter {
 public:
  OpCounter() {
    g_aten_ops = 0;
    g_autograd_nodes = 0;
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&CountOp).scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  }
  ~OpCounter() { at::removeCallback(handle_); }
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;

 private:
  at::CallbackHandle handle_;
};

// One model under measurement: forward (the loss included) and backward.
struct Trainee {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor()> loss;  // () -> scalar fp32, with the graph
  int64_t tokens_per_step = 0;
  int64_t samples_per_step = 0;
};

// A decoder on (B, T) random ids: "mixed" through runtime/vocab_loss.cc (the
// runner's loss), else the logits' fp32 cross-entropy whole.
StatusOr<Trainee> DecoderTrainee(const plan::ModelDesc& desc, const SectionSpeedOptions& o,
                                 const ModelBuildOptions& build) {
  if (o.seq_len < 2) return Status::InvalidArgument("MeasureSectionTraining: a decoder needs seq_len >= 2");
  auto model = BuildDecoder(desc, build);
  if (!model.ok()) return model.status();
  DecoderLM lm = *model;
  torch::manual_seed(2);
  // (B, T + 1) ids: the model reads the first T, the loss targets the last T.
  const auto ids = torch::randint(0, desc.vocab, {o.micro_batch, o.seq_len + 1},
                                  torch::TensorOptions().dtype(torch::kInt64).device(build.device));
  const auto inputs = ids.narrow(1, 0, o.seq_len);   // (B, T)
  const auto targets = ids.narrow(1, 1, o.seq_len);  // (B, T)
  Trainee t;
  t.module = lm.ptr();
  t.tokens_per_step = static_cast<int64_t>(o.micro_batch) * o.seq_len;
  t.samples_per_step = o.micro_batch;
  if (o.precision == "mixed") {
    const int64_t chunk = plan::LossChunkPositions(o.micro_batch, o.seq_len);
    t.loss = [lm, inputs, targets, chunk]() mutable {
      const auto hidden = lm->ForwardEmbeds(lm->Embed(inputs));  // (B, T, C)
      torch::Tensor logits;
      return PerSampleLoss(lm.get(), hidden, targets, TeacherRows{}, plan::LossDesc{}, {}, chunk, &logits).mean();
    };
  } else {
    const int64_t vocab = desc.vocab;
    t.loss = [lm, inputs, targets, vocab]() mutable {
      auto logits = lm->forward(inputs);  // (B, T, V)
      return torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}).to(torch::kFloat32),
                                                  targets.reshape({-1}));
    };
  }
  return t;
}

// A ViT on (B, channels, S, S) random images; the loss is the mean square
// of its output rows (B, N', C').
StatusOr<Trainee> VitTrainee(const plan::ModelDesc& desc, const SectionSpeedOptions& o,
                             const ModelBuildOptions& build) {
  auto model = BuildVitEncoder(desc, build);
  if (!model.ok()) return model.status();
  VitEncoder vit = *model;
  torch::manual_seed(2);
  const auto dtype = o.precision == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  const auto images = torch::randn({o.micro_batch, desc.channels, desc.image_size, desc.image_size},
                                   torch::TensorOptions().dtype(dtype).device(build.device));
  Trainee t;
  t.module = vit.ptr();
  t.tokens_per_step = static_cast<int64_t>(o.micro_batch) * vit->num_patches();
  t.samples_per_step = o.micro_batch;
  t.loss = [vit, images]() mutable { return vit->forward(images).to(torch::kFloat32).square().mean(); };
  return t;
}

Status CheckOptions(const plan::ModelDesc& desc, const SectionSpeedOptions& o) {
  if (o.device != "cuda" && o.device != "cpu") {
    return Status::InvalidArgument("MeasureSectionTraining: device must be \"cuda\" or \"cpu\", not \"" + o.device +
                                   "\"");
  }
  if (o.precision != "bf16" && o.precision != "mixed" && o.precision != "fp32") {
    return Status::InvalidArgument("MeasureSectionTraining: precision must be bf16, mixed or fp32, not \"" +
                                   o.precision + "\"");
  }
  if (desc.kind != plan::ModelKind::kDecoder && desc.kind != plan::ModelKind::kVit) {
    return Status::InvalidArgument(std::string("MeasureSectionTraining: measures decoders and ViTs, not ") +
                                   plan::ModelKindName(desc.kind));
  }
  std::string why;
  if (o.device == "cuda" && !CudaUsable(&why)) return Status::FailedPrecondition(why);
  if (o.micro_batch < 1 || o.steps < 1 || o.warmup < 0) {
    return Status::InvalidArgument("MeasureSectionTraining: micro_batch >= 1, steps >= 1, warmup >= 0");
  }
  return Status::Ok();
}

}  // namespace

SectionSpeedOptions IssueProbeOptions(const plan::ModelDesc& probe, bool cuda, int steps) {
  SectionSpeedOptions o;
  o.device = cuda ? "cuda" : "cpu";
  o.precision = cuda ? "mixed" : "fp32";
  o.micro_batch = probe.kind == plan::ModelKind::kVit ? plan::kIssueProbeImages : 1;
  o.seq_len = plan::kIssueProbeTokens;
  o.warmup = 3;
  o.steps = steps;
  o.phases = true;
  return o;
}

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

// Builds the trainee, warms up, times `steps` whole steps, then (with
// phases) the phases apart and the optimizer alone: one function because
// every timed loop shares the model, its optimizer and the device syncs.
StatusOr<SectionSpeed> MeasureSectionTraining(const plan::ModelDesc& desc, const SectionSpeedOptions& o) {
  MAESTRO_RETURN_IF_ERROR(CheckOptions(desc, o));
  const torch::Device device = o.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const bool mixed = o.precision == "mixed";
  ModelBuildOptions build;
  build.seed = 1;
  build.device = device;
  build.dtype = o.precision == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  auto trainee = desc.kind == plan::ModelKind::kDecoder ? DecoderTrainee(desc, o, build) : VitTrainee(desc, o, build);
  if (!trainee.ok()) return trainee.status();
  auto& module = *trainee->module;
  module.train();
  SectionSpeed out;
  for (const auto& p : module.parameters()) out.params += p.numel();
  torch::optim::AdamW optimizer(module.parameters(), torch::optim::AdamWOptions(1e-4).weight_decay(0.0));
  const bool fused = mixed && compat::FusedAdamWAvailable(device);
  const auto optimizer_step = [&](bool use_fused) {
    if (use_fused) {
      compat::FusedAdamWStep(optimizer);
    } else {
      optimizer.step();
    }
    if (mixed) compat::ClearAutocastCache();  // the weights changed: drop their cached bf16 casts
  };
  const auto forward = [&] {
    compat::AutocastGuard autocast(device, mixed);
    return trainee->loss();
  };
  const auto step = [&] {
    optimizer.zero_grad();
    forward().backward();
    optimizer_step(fused);
  };
  try {
    for (int i = 0; i < o.warmup; ++i) step();
    Synchronize(device);
    ResetDevicePeak(device);
    const auto t0 = Clock::now();
    for (int i = 0; i < o.steps; ++i) step();
    Synchronize(device);
    out.seconds_per_step = SecondsSince(t0) / o.steps;
    out.peak_allocated_bytes = DevicePeakBytes(device);
    {
      optimizer.zero_grad();
      OpCounter counter;
      forward().backward();
      Synchronize(device);  // autograd's device thread has run every node
      out.aten_ops = g_aten_ops.load();
      out.autograd_nodes = g_autograd_nodes.load();
    }
    optimizer_step(fused);
    if (o.phases) {
      double f = 0, b = 0, s = 0;
      for (int i = 0; i < o.steps; ++i) {
        optimizer.zero_grad();
        auto t = Clock::now();
        auto loss = forward();
        Synchronize(device);
        f += SecondsSince(t);
        t = Clock::now();
        loss.backward();
        Synchronize(device);
        b += SecondsSince(t);
        t = Clock::now();
        optimizer_step(fused);
        Synchronize(device);
        s += SecondsSince(t);
      }
      out.forward_seconds = f / o.steps;
      out.backward_seconds = b / o.steps;
      out.optimizer_seconds = s / o.steps;
      // The optimizer alone, on the gradients of the last step.
      const auto time_optimizer = [&](bool use_fused) {
        Synchronize(device);
        const auto t1 = Clock::now();
        for (int i = 0; i < o.steps; ++i) optimizer_step(use_fused);
        Synchronize(device);
        return SecondsSince(t1) / o.steps;
      };
      if (compat::FusedAdamWAvailable(device) && o.precision != "bf16") {
        out.optimizer_fused_seconds = time_optimizer(true);
      }
      out.optimizer_loop_seconds = time_optimizer(false);
    }
  } catch (const c10::Error& e) {
    return Status::Internal("MeasureSectionTraining: " + std::string(e.what()));
  }
  out.tokens_per_step = trainee->tokens_per_step;
  out.tokens_per_second = static_cast<double>(trainee->tokens_per_step) / out.seconds_per_step;
  out.samples_per_second = static_cast<double>(trainee->samples_per_step) / out.seconds_per_step;
  out.device = device.str();
  out.dtype = o.precision == "fp32" ? "fp32" : "bf16";
  out.precision = o.precision;
  return out;
}

}  // namespace maestro::runtime
