// SPDX-License-Identifier: Apache-2.0
#include "runtime/device_choice.h"

#include <fmt/format.h>

namespace maestro::runtime {

StatusOr<DeviceRequest> ParseDeviceRequest(const std::string& text) {
  if (text == "auto") return DeviceRequest::kAuto;
  if (text == "cpu") return DeviceRequest::kCpu;
  if (text == "cuda") return DeviceRequest::kCuda;
  return Status::InvalidArgument(fmt::format("device '{}': use auto, cpu or cuda", text));
}

StatusOr<PrecisionRequest> ParsePrecisionRequest(const std::string& text) {
  if (text == "auto") return PrecisionRequest::kAuto;
  if (text == "fp32") return PrecisionRequest::kFp32;
  if (text == "bf16") return PrecisionRequest::kBf16;
  return Status::InvalidArgument(fmt::format("precision '{}': use auto, fp32 or bf16", text));
}

const char* PrecisionName(Precision precision) {
  return precision == Precision::kBf16 ? "bf16" : "fp32";
}

std::string ComputePlacement::ToString() const {
  return fmt::format("{} {}", cuda() ? fmt::format("cuda:{}", cuda_device) : std::string("cpu"),
                     PrecisionName(precision));
}

StatusOr<ComputePlacement> ChooseCompute(DeviceRequest device, PrecisionRequest precision, const ComputeFacts& facts) {
  ComputePlacement out;
  switch (device) {
    case DeviceRequest::kCpu: break;
    case DeviceRequest::kCuda:
      if (facts.cuda_devices <= 0) {
        return Status::FailedPrecondition(
            "--device cuda: this libtorch sees no CUDA device (a CPU build of libtorch, or no GPU visible: "
            "check CUDA_VISIBLE_DEVICES); use --device auto or cpu");
      }
      out.cuda_device = facts.local_rank % facts.cuda_devices;
      break;
    case DeviceRequest::kAuto:
      if (facts.gpus_per_task <= 0) break;  // a CPU plan
      if (facts.cuda_devices <= 0) {
        out.note = "the plan gives this section GPUs but this libtorch sees no CUDA device: computing on the CPU";
        break;
      }
      {
        const int index = facts.local_gpu >= 0 ? facts.local_gpu : facts.local_rank * facts.gpus_per_task;
        if (index >= facts.cuda_devices) {
          return Status::FailedPrecondition(fmt::format(
              "the plan places this rank on GPU {} of its node but this libtorch sees {} CUDA device(s) (check "
              "CUDA_VISIBLE_DEVICES and the tasks per node), or run with --device cuda to share them",
              index, facts.cuda_devices));
        }
        out.cuda_device = index;
      }
      break;
  }
  switch (precision) {
    case PrecisionRequest::kAuto: out.precision = out.cuda() ? Precision::kBf16 : Precision::kFp32; break;
    case PrecisionRequest::kFp32: out.precision = Precision::kFp32; break;
    case PrecisionRequest::kBf16: out.precision = Precision::kBf16; break;
  }
  return out;
}

}  // namespace maestro::runtime
