// SPDX-License-Identifier: Apache-2.0
// A rank's compute device as torch sees it, and the copies between it and
// the wire (what a launcher backend takes: host fp32 buffers for MPI, the
// GPU's own memory for NCCL).
//
// The wire format never changes: the rows and gradients that cross sections
// are contiguous fp32 (runtime/edge_exchange.h). A CUDA rank copies them
//   device -> host  (ToWire, kCpu): on a transfer stream of its own, into a
//                   pinned host buffer (torch's caching host allocator), after
//                   the compute stream's work so far (an event), and waits
//                   for that copy only, not for the compute queued behind it;
//   host -> device  (ToCompute): from pinned memory on the transfer stream,
//                   asynchronous; the compute stream waits on an event before
//                   its next kernel, the host does not wait at all.
// Receive buffers (WireBuffer) are pinned on a CUDA rank. On the CPU every
// call is a plain (and mostly free) fp32 conversion: the CPU build runs the
// same code paths. Streams and events use c10's device-generic API
// (c10::Stream, c10::Event, VirtualGuardImpl), so this file compiles against
// CPU-only libtorch too; they are created only on a CUDA rank.
//
// Runtime-internal (torch). May call: runtime/device_choice, launcher (the
// Device enum), libtorch. Thread safety: one thread.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "launcher/comm.h"
#include "runtime/device_choice.h"

namespace maestro::runtime {

// cuda:N or cpu.
torch::Device TorchDevice(const ComputePlacement& placement);
// Makes the placement's CUDA device the current one (streams, allocations
// without a device); nothing on the CPU.
void UseDevice(const ComputePlacement& placement);

class TransferStaging {
 public:
  explicit TransferStaging(torch::Device compute);
  ~TransferStaging();
  TransferStaging(const TransferStaging&) = delete;
  TransferStaging& operator=(const TransferStaging&) = delete;

  const torch::Device& compute() const { return compute_; }
  // True when copies go through the transfer stream (a CUDA compute device).
  bool streamed() const { return stream_ != nullptr; }

  // An fp32 buffer of `shape` to receive into on `where`: host memory
  // (pinned on a CUDA rank) or the compute device. Uninitialised.
  torch::Tensor WireBuffer(at::IntArrayRef shape, launcher::Device where) const;
  // Zeros, as WireBuffer.
  torch::Tensor WireZeros(at::IntArrayRef shape, launcher::Device where) const;
  // `t` (any device, any floating dtype; no graph kept) as a contiguous fp32
  // tensor on `where`, complete when this returns: safe to hand to a backend.
  torch::Tensor ToWire(const torch::Tensor& t, launcher::Device where);
  // A wire tensor (fp32, host or device) on the compute device, fp32,
  // ordered before the compute stream's next kernel.
  torch::Tensor ToCompute(const torch::Tensor& t);

 private:
  struct Streams;
  torch::Device compute_;
  std::unique_ptr<Streams> stream_;  // null unless the compute device is CUDA
};

}  // namespace maestro::runtime
