// SPDX-License-Identifier: Apache-2.0
#include "runtime/collectives.h"

#include <chrono>

#include "base/checks.h"

namespace maestro::runtime {

using launcher::Buffer;

Status Wait(StatusOr<launcher::WorkPtr> work) {
  return launcher::Complete(std::move(work));
}

Status TimedWait(StatusOr<launcher::WorkPtr> work, double* blocked_seconds) {
  const auto start = std::chrono::steady_clock::now();
  Status s = Wait(std::move(work));
  *blocked_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

Status BroadcastInts(launcher::Backend& group, std::vector<int64_t>& values) {
  int64_t n = static_cast<int64_t>(values.size());
  Buffer nb{&n, 1, launcher::DType::kI64, launcher::Device::kCpu};
  MAESTRO_RETURN_IF_ERROR(Wait(group.Broadcast(nb, 0)));
  values.resize(static_cast<size_t>(n));
  if (n > 0) MAESTRO_RETURN_IF_ERROR(Wait(group.Broadcast(launcher::CpuBuffer(values), 0)));
  return Status::Ok();
}

Status SendBytes(launcher::Backend& group, const std::string& bytes, int peer, int tag) {
  int64_t n = static_cast<int64_t>(bytes.size());
  MAESTRO_RETURN_IF_ERROR(Wait(group.Send(Buffer{&n, 1, launcher::DType::kI64, launcher::Device::kCpu}, peer, tag)));
  if (n == 0) return Status::Ok();
  std::string copy = bytes;
  return Wait(group.Send(Buffer{copy.data(), copy.size(), launcher::DType::kU8, launcher::Device::kCpu}, peer, tag));
}

StatusOr<std::string> RecvBytes(launcher::Backend& group, int peer, int tag) {
  int64_t n = 0;
  MAESTRO_RETURN_IF_ERROR(Wait(group.Recv(Buffer{&n, 1, launcher::DType::kI64, launcher::Device::kCpu}, peer, tag)));
  std::string bytes(static_cast<size_t>(n), '\0');
  if (n > 0) {
    MAESTRO_RETURN_IF_ERROR(
        Wait(group.Recv(Buffer{bytes.data(), bytes.size(), launcher::DType::kU8, launcher::Device::kCpu}, peer, tag)));
  }
  return bytes;
}

}  // namespace maestro::runtime
