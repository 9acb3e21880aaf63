// SPDX-License-Identifier: Apache-2.0
#include "launcher/host_staged_backend.h"

#ifdef MAESTRO_HAVE_NCCL
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "launcher/checks.h"

namespace maestro::launcher {
namespace {

// The host side of one operation's device buffers, and where its outputs go.
struct Staging {
  std::vector<std::vector<uint8_t>> host;          // one per staged buffer; stable while the Work lives
  std::vector<std::pair<Buffer, size_t>> outputs;  // device buffer, index into host
};

class StagedWork final : public Work {
 public:
  StagedWork(Staging staging, WorkPtr inner, Millis default_timeout)
      : Work(default_timeout), staging_(std::move(staging)), inner_(std::move(inner)) {}
  // inner_ is destroyed first (declared last): a Work not waited on still
  // completes before its host buffers go away.

  Status WaitFor(Millis timeout) override {
    if (done_) return Status::Ok();
    MAESTRO_RETURN_IF_ERROR(inner_->WaitFor(timeout));
    for (const auto& [device, index] : staging_.outputs) {
      CUDA_CHECK(cudaMemcpy(device.data, staging_.host[index].data(), device.bytes(), cudaMemcpyHostToDevice));
    }
    if (!staging_.outputs.empty()) CUDA_CHECK(cudaDeviceSynchronize());
    done_ = true;
    return Status::Ok();
  }
  bool IsCompleted() override {
    if (done_) return true;
    if (!inner_->IsCompleted()) return false;
    return WaitFor(Millis(0)).ok();
  }

 private:
  Staging staging_;
  WorkPtr inner_;
  bool done_ = false;
};

class HostStagedBackend final : public Backend {
 public:
  explicit HostStagedBackend(std::unique_ptr<Backend> inner)
      : inner_(std::move(inner)), name_(std::string(inner_->name()) + "+host-staging") {}

  const char* name() const override { return name_.c_str(); }
  Device device() const override { return Device::kCuda; }
  const GroupInfo& group() const override { return inner_->group(); }
  Millis timeout() const override { return inner_->timeout(); }

  StatusOr<WorkPtr> AllReduce(Buffer buf, ReduceOp op) override {
    Staging s;
    MAESTRO_ASSIGN_OR_RETURN(Buffer h, Stage(s, buf, /*copy_in=*/true, /*output=*/true));
    return Finish(std::move(s), inner_->AllReduce(h, op));
  }
  StatusOr<WorkPtr> AllGather(Buffer in, Buffer out) override {
    Staging s;
    MAESTRO_ASSIGN_OR_RETURN(Buffer hin, Stage(s, in, true, false));
    MAESTRO_ASSIGN_OR_RETURN(Buffer hout, Stage(s, out, false, true));
    return Finish(std::move(s), inner_->AllGather(hin, hout));
  }
  StatusOr<WorkPtr> ReduceScatter(Buffer in, Buffer out, ReduceOp op) override {
    Staging s;
    MAESTRO_ASSIGN_OR_RETURN(Buffer hin, Stage(s, in, true, false));
    MAESTRO_ASSIGN_OR_RETURN(Buffer hout, Stage(s, out, false, true));
    return Finish(std::move(s), inner_->ReduceScatter(hin, hout, op));
  }
  StatusOr<WorkPtr> Broadcast(Buffer buf, int root) override {
    Staging s;
    MAESTRO_ASSIGN_OR_RETURN(Buffer h, Stage(s, buf, group().my_index == root, true));
    return Finish(std::move(s), inner_->Broadcast(h, root));
  }
  StatusOr<WorkPtr> Send(Buffer buf, int peer, int tag) override {
    Staging s;
    MAESTRO_ASSIGN_OR_RETURN(Buffer h, Stage(s, buf, true, false));
    return Finish(std::move(s), inner_->Send(h, peer, tag));
  }
  StatusOr<WorkPtr> Recv(Buffer buf, int peer, int tag) override {
    Staging s;
    MAESTRO_ASSIGN_OR_RETURN(Buffer h, Stage(s, buf, false, true));
    return Finish(std::move(s), inner_->Recv(h, peer, tag));
  }
  StatusOr<WorkPtr> Barrier() override { return inner_->Barrier(); }
  StatusOr<WorkPtr> AllToAll(Buffer in, Buffer out) override {
    Staging s;
    MAESTRO_ASSIGN_OR_RETURN(Buffer hin, Stage(s, in, true, false));
    MAESTRO_ASSIGN_OR_RETURN(Buffer hout, Stage(s, out, false, true));
    return Finish(std::move(s), inner_->AllToAll(hin, hout));
  }

 private:
  // A CPU buffer as it is; a CUDA one as a host buffer of the same size
  // (filled from the device when `copy_in`; copied back when `output`).
  StatusOr<Buffer> Stage(Staging& s, const Buffer& buf, bool copy_in, bool output) {
    if (buf.device == Device::kCpu) return buf;
    s.host.emplace_back(buf.bytes());
    auto& host = s.host.back();
    if (copy_in && buf.bytes() > 0) {
      CUDA_CHECK(cudaMemcpy(host.data(), buf.data, buf.bytes(), cudaMemcpyDeviceToHost));
    }
    if (output) s.outputs.emplace_back(buf, s.host.size() - 1);
    return Buffer{host.data(), buf.count, buf.dtype, Device::kCpu};
  }
  StatusOr<WorkPtr> Finish(Staging s, StatusOr<WorkPtr> inner) {
    MAESTRO_RETURN_IF_ERROR(inner.status());
    return WorkPtr(std::make_unique<StagedWork>(std::move(s), std::move(*inner), inner_->timeout()));
  }

  std::unique_ptr<Backend> inner_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Backend> StageThroughHost(std::unique_ptr<Backend> host_backend) {
  return std::make_unique<HostStagedBackend>(std::move(host_backend));
}

}  // namespace maestro::launcher
#endif
