// SPDX-License-Identifier: Apache-2.0
#include "launcher/selftest.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
// GCC 12 reports a false -Wnull-dereference inside nlohmann::json's inlined code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <nlohmann/json.hpp>
#pragma GCC diagnostic pop
#include <vector>

#include "base/checks.h"
#include "launcher/failure.h"
#include "launcher/nccl_backend.h"

namespace maestro::launcher {

uint64_t Checksum(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

void FillPattern(void* data, size_t bytes, uint64_t seed) {
  auto* p = static_cast<uint8_t*>(data);
  uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (size_t i = 0; i < bytes; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    p[i] = static_cast<uint8_t>(x >> 56);
  }
}

namespace {

// Host memory, mirrored on the GPU when the backend wants CUDA buffers.
class Staged {
 public:
  static StatusOr<std::unique_ptr<Staged>> Make(Device device, size_t bytes) {
    auto s = std::make_unique<Staged>();
    s->host.assign(bytes, 0);
    s->device_ = device;
    if (device == Device::kCuda) {
#ifdef MAESTRO_HAVE_NCCL
      MAESTRO_ASSIGN_OR_RETURN(s->dev_, CudaMemory::Allocate(bytes));
#else
      return Status::Internal("a CUDA buffer in a build without CUDA");
#endif
    }
    return s;
  }
  Buffer buffer(DType dtype) {
    void* data = host.data();
#ifdef MAESTRO_HAVE_NCCL
    if (dev_) data = dev_->data();
#endif
    return Buffer{data, host.size() / DTypeSize(dtype), dtype, device_};
  }
  Status Upload() {
#ifdef MAESTRO_HAVE_NCCL
    if (dev_) return dev_->CopyFromHost(host.data(), host.size());
#endif
    return Status::Ok();
  }
  Status Download() {
#ifdef MAESTRO_HAVE_NCCL
    if (dev_) return dev_->CopyToHost(host.data(), host.size());
#endif
    return Status::Ok();
  }
  std::vector<uint8_t> host;

 private:
  Device device_ = Device::kCpu;
#ifdef MAESTRO_HAVE_NCCL
  std::unique_ptr<CudaMemory> dev_;
#endif
};

double Seconds(int64_t from_ns) {
  return static_cast<double>(MonotonicNanos() - from_ns) * 1e-9;
}

std::string GBps(double bytes_per_s) {
  if (bytes_per_s <= 0) return "-";
  return fmt::format("{:.2f} GB/s", bytes_per_s / 1e9);
}

// All-reduce check + bus bandwidth on one group. Returns the table row.
StatusOr<nlohmann::json> CheckGroup(Backend& g, const SelfTestOptions& o, int* failures) {
  const GroupInfo& info = g.group();
  const size_t n = std::max<size_t>(1, o.check_bytes / sizeof(float));
  MAESTRO_ASSIGN_OR_RETURN(auto buf, Staged::Make(g.device(), n * sizeof(float)));
  std::vector<float> mine(n);
  for (size_t j = 0; j < n; ++j) mine[j] = static_cast<float>(info.world_rank + 1) + static_cast<float>(j % 7);
  std::memcpy(buf->host.data(), mine.data(), n * sizeof(float));
  MAESTRO_RETURN_IF_ERROR(buf->Upload());
  MAESTRO_RETURN_IF_ERROR(Complete(g.AllReduce(buf->buffer(DType::kF32), ReduceOp::kSum)));
  MAESTRO_RETURN_IF_ERROR(buf->Download());
  float rank_sum = 0;
  for (int r : info.ranks) rank_sum += static_cast<float>(r + 1);
  std::string check = "ok";
  for (size_t j = 0; j < n; ++j) {
    float got;
    std::memcpy(&got, buf->host.data() + j * sizeof(float), sizeof(float));
    const float want = rank_sum + static_cast<float>(info.size()) * static_cast<float>(j % 7);
    if (got != want) {
      check = fmt::format("FAILED: element {} is {} instead of {}", j, got, want);
      ++*failures;
      break;
    }
  }
  double busbw = 0;
  if (info.size() > 1 && o.bandwidth_iterations > 0) {
    MAESTRO_ASSIGN_OR_RETURN(auto big, Staged::Make(g.device(), o.bandwidth_bytes));
    MAESTRO_RETURN_IF_ERROR(big->Upload());
    MAESTRO_RETURN_IF_ERROR(Complete(g.AllReduce(big->buffer(DType::kF32), ReduceOp::kSum)));  // warm-up
    const int64_t t0 = MonotonicNanos();
    for (int i = 0; i < o.bandwidth_iterations; ++i) {
      MAESTRO_RETURN_IF_ERROR(Complete(g.AllReduce(big->buffer(DType::kF32), ReduceOp::kSum)));
    }
    const double t = Seconds(t0) / o.bandwidth_iterations;
    const double G = info.size();
    busbw = 2.0 * (G - 1) / G * static_cast<double>(o.bandwidth_bytes) / t;
  }
  return nlohmann::json{{"kind", "group"},     {"desc", info.description}, {"size", info.size()},
                        {"backend", g.name()}, {"check", check},           {"busbw", busbw}};
}

// Sends a pattern one way over `link` and checks it on arrival. `down` picks
// the direction (activations) or the other (gradients).
Status CheckDirection(LinkChannel& link, bool down, const SelfTestOptions& o, std::string* verdict, int* failures) {
  const bool i_send = link.is_upstream() == down;
  const uint64_t seed = (static_cast<uint64_t>(link.link().edge) << 32) ^
                        (static_cast<uint64_t>(link.index_in_edge()) << 8) ^ (down ? 1u : 2u);
  MAESTRO_ASSIGN_OR_RETURN(auto buf, Staged::Make(link.backend().device(), o.check_bytes));
  if (i_send) {
    FillPattern(buf->host.data(), buf->host.size(), seed);
    MAESTRO_RETURN_IF_ERROR(buf->Upload());
    MAESTRO_RETURN_IF_ERROR(Complete(down ? link.SendActivation(buf->buffer(DType::kU8), 0)
                                          : link.SendGradient(buf->buffer(DType::kU8), 0)));
    return Status::Ok();
  }
  MAESTRO_RETURN_IF_ERROR(
      Complete(down ? link.RecvActivation(buf->buffer(DType::kU8), 0) : link.RecvGradient(buf->buffer(DType::kU8), 0)));
  MAESTRO_RETURN_IF_ERROR(buf->Download());
  std::vector<uint8_t> want(o.check_bytes);
  FillPattern(want.data(), want.size(), seed);
  const uint64_t got_sum = Checksum(buf->host.data(), buf->host.size());
  const uint64_t want_sum = Checksum(want.data(), want.size());
  if (got_sum == want_sum) {
    *verdict = "ok";
  } else {
    *verdict = fmt::format("FAILED: checksum {:016x} instead of {:016x}", got_sum, want_sum);
    ++*failures;
  }
  return Status::Ok();
}

// Bytes per second of `iterations` messages in one direction (the sender
// times them up to a 1-byte acknowledgement); 0 on the receiving side.
StatusOr<double> MeasureDirection(LinkChannel& link, bool down, const SelfTestOptions& o) {
  const bool i_send = link.is_upstream() == down;
  const Device dev = link.backend().device();
  MAESTRO_ASSIGN_OR_RETURN(auto buf, Staged::Make(dev, o.bandwidth_bytes));
  MAESTRO_ASSIGN_OR_RETURN(auto ack, Staged::Make(dev, 1));
  MAESTRO_RETURN_IF_ERROR(buf->Upload());
  const int iters = o.bandwidth_iterations;
  const int64_t t0 = MonotonicNanos();
  for (int i = 1; i <= iters; ++i) {
    Buffer b = buf->buffer(DType::kU8);
    if (i_send) {
      MAESTRO_RETURN_IF_ERROR(Complete(down ? link.SendActivation(b, i) : link.SendGradient(b, i)));
    } else {
      MAESTRO_RETURN_IF_ERROR(Complete(down ? link.RecvActivation(b, i) : link.RecvGradient(b, i)));
    }
  }
  Buffer a = ack->buffer(DType::kU8);
  if (i_send) {
    MAESTRO_RETURN_IF_ERROR(Complete(down ? link.RecvGradient(a, iters + 1) : link.RecvActivation(a, iters + 1)));
    return static_cast<double>(o.bandwidth_bytes) * iters / Seconds(t0);
  }
  MAESTRO_RETURN_IF_ERROR(Complete(down ? link.SendGradient(a, iters + 1) : link.SendActivation(a, iters + 1)));
  return 0.0;
}

StatusOr<nlohmann::json> CheckLink(LinkChannel& link, const SelfTestOptions& o, int* failures) {
  std::string down_verdict = "-", up_verdict = "-";
  MAESTRO_RETURN_IF_ERROR(CheckDirection(link, true, o, &down_verdict, failures));
  MAESTRO_RETURN_IF_ERROR(CheckDirection(link, false, o, &up_verdict, failures));
  double down_bw = 0, up_bw = 0;
  if (o.bandwidth_iterations > 0) {
    MAESTRO_ASSIGN_OR_RETURN(down_bw, MeasureDirection(link, true, o));
    MAESTRO_ASSIGN_OR_RETURN(up_bw, MeasureDirection(link, false, o));
  }
  // Each end knows one verdict and one bandwidth; rank 0 merges the halves.
  return nlohmann::json{
      {"kind", "link"},
      {"desc", link.backend().group().description},
      {"edge", link.link().edge},
      {"index", link.index_in_edge()},
      {"backend", link.backend().name()},
      {link.is_upstream() ? "check_up" : "check_down", link.is_upstream() ? up_verdict : down_verdict},
      {link.is_upstream() ? "down_bw" : "up_bw", link.is_upstream() ? down_bw : up_bw}};
}

// Every rank's rows to every rank (two all-gathers: lengths, then text).
StatusOr<std::vector<std::string>> GatherText(Backend& world, const std::string& mine) {
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(static_cast<size_t>(world.group().size()));
  MAESTRO_RETURN_IF_ERROR(Complete(world.AllGather(Buffer{&len, 1, DType::kI64, Device::kCpu}, CpuBuffer(lens))));
  const int64_t max_len = std::max<int64_t>(1, *std::max_element(lens.begin(), lens.end()));
  std::vector<uint8_t> padded(static_cast<size_t>(max_len), 0);
  std::memcpy(padded.data(), mine.data(), mine.size());
  std::vector<uint8_t> all(padded.size() * lens.size());
  MAESTRO_RETURN_IF_ERROR(Complete(world.AllGather(CpuBuffer(padded), CpuBuffer(all))));
  std::vector<std::string> out;
  for (size_t r = 0; r < lens.size(); ++r) {
    out.emplace_back(reinterpret_cast<const char*>(all.data() + r * padded.size()), static_cast<size_t>(lens[r]));
  }
  return out;
}

}  // namespace

StatusOr<SelfTestSummary> RunSelfTest(const plan::Plan& plan, const RankPlace& place, Communicators& comms,
                                      const SelfTestOptions& options, std::FILE* out) {
  int failures = 0;
  nlohmann::json rows = nlohmann::json::array();
  // Groups, in the same order on every rank (TP, CP, DP, PP): groups of one
  // kind are disjoint, so every rank's sequence completes.
  for (plan::GroupKind kind :
       {plan::GroupKind::kTP, plan::GroupKind::kCP, plan::GroupKind::kDP, plan::GroupKind::kPP}) {
    Backend& g = comms.group(kind);
    MAESTRO_ASSIGN_OR_RETURN(nlohmann::json row, CheckGroup(g, options, &failures));
    if (g.group().my_index == 0 && g.group().size() > 1) rows.push_back(row);
  }
  // Links in the plan's global order (comms.links() keeps it).
  for (LinkChannel& link : comms.links()) {
    MAESTRO_ASSIGN_OR_RETURN(nlohmann::json row, CheckLink(link, options, &failures));
    rows.push_back(row);
  }
  MAESTRO_ASSIGN_OR_RETURN(const auto texts, GatherText(comms.world(), rows.dump()));
  int total_failures = failures;
  MAESTRO_RETURN_IF_ERROR(
      Complete(comms.world().AllReduce(Buffer{&total_failures, 1, DType::kI32, Device::kCpu}, ReduceOp::kSum)));

  SelfTestSummary summary;
  summary.failures = total_failures;
  std::vector<nlohmann::json> groups;
  std::map<std::pair<int, int>, nlohmann::json> links;
  for (const auto& t : texts) {
    for (const auto& row : nlohmann::json::parse(t)) {
      if (row["kind"] == "group") {
        groups.push_back(row);
      } else {
        auto& l = links[{row["edge"].get<int>(), row["index"].get<int>()}];
        if (l.is_null()) l = nlohmann::json::object();
        l.update(row);
      }
    }
  }
  summary.groups = static_cast<int>(groups.size());
  summary.links = static_cast<int>(links.size());
  if (place.world_rank == 0 && out != nullptr) {
    std::fprintf(out, "maestro-worker self-test: %d ranks, %zu sections, %zu edges, timeout %.1f s\n", place.world_size,
                 plan.sections.size(), plan.edges.size(),
                 static_cast<double>(comms.world().timeout().count()) / 1000.0);
    size_t gw = 5, lw = 4;  // column widths: the longest name
    for (const auto& g : groups) gw = std::max(gw, g["desc"].get<std::string>().size());
    for (const auto& [key, l] : links) lw = std::max(lw, l["desc"].get<std::string>().size());
    const int gwi = static_cast<int>(gw), lwi = static_cast<int>(lw);
    std::fprintf(out, "\n%-*s  %-7s %-5s %-6s %s\n", gwi, "GROUP", "BACKEND", "RANKS", "CHECK", "ALL-REDUCE BUS BW");
    for (const auto& g : groups) {
      std::fprintf(out, "%-*s  %-7s %-5d %-6s %s\n", gwi, g["desc"].get<std::string>().c_str(),
                   g["backend"].get<std::string>().c_str(), g["size"].get<int>(), g["check"].get<std::string>().c_str(),
                   GBps(g["busbw"].get<double>()).c_str());
    }
    if (groups.empty()) std::fprintf(out, "(no group has more than one rank)\n");
    std::fprintf(out, "\n%-*s  %-7s %-6s %-6s %-12s %s\n", lwi, "LINK", "BACKEND", "DOWN", "UP", "DOWN BW", "UP BW");
    for (const auto& [key, l] : links) {
      std::fprintf(out, "%-*s  %-7s %-6s %-6s %-12s %s\n", lwi, l["desc"].get<std::string>().c_str(),
                   l["backend"].get<std::string>().c_str(), l.value("check_down", "?").c_str(),
                   l.value("check_up", "?").c_str(), GBps(l.value("down_bw", 0.0)).c_str(),
                   GBps(l.value("up_bw", 0.0)).c_str());
    }
    if (links.empty()) std::fprintf(out, "(the plan has no cross-section links)\n");
    std::fprintf(out, "\nself-test %s: %d groups, %d links, %d failed checks\n",
                 total_failures == 0 ? "PASSED" : "FAILED", summary.groups, summary.links, total_failures);
    std::fflush(out);
  }
  if (total_failures > 0) {
    return Status::Corruption(
        fmt::format("self-test: {} check(s) failed job-wide ({} on rank {}); rank 0's table "
                    "names them",
                    total_failures, failures, place.world_rank));
  }
  return summary;
}

}  // namespace maestro::launcher
