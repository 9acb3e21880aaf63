// SPDX-License-Identifier: Apache-2.0
// launcher_comm_probe: started by the mpi-labelled tests under mpirun; checks
// the launcher's pieces from inside a real multi-rank job and exits 0 only
// when every check passed ("PROBE OK" on rank 0). Scenarios:
//   probe PLAN collectives       every op (all_to_all too) x dtype on every group; links both ways,
//                                micro-batches received out of order
//   probe PLAN store             PMIx put/commit/get rounds and a fence
//   probe PLAN kill RANK         RANK dies (SIGKILL) before a DP all-reduce
//   probe PLAN hang RANK         RANK sleeps forever before a DP all-reduce
//   probe PLAN exit RANK         RANK returns early (exit 0) before a DP all-reduce
//   probe PLAN nccl              1-rank NCCL: id through PMIx, every collective on the GPU
//   probe PLAN mpi-cuda          every collective and a ring of sends on CUDA buffers over
//                                MPI staged through the host (ranks may share one GPU)
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "base/exit_codes.h"
#include "launcher/failure.h"
#include "launcher/host_staged_backend.h"
#include "launcher/nccl_backend.h"
#include "launcher/worker_context.h"
#include "plan/plan.h"

namespace ml = maestro::launcher;
using maestro::Status;

namespace {

int g_rank = -1;

#define PROBE_OK(expr)                                                               \
  do {                                                                               \
    const ::maestro::Status probe_s_ = (expr);                                       \
    if (!probe_s_.ok()) ml::AbortJob(g_rank, probe_s_, ::maestro::kExitPeerFailure); \
  } while (0)

#define PROBE_EXPECT(cond, ...)                                                                    \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "[probe rank %d] CHECK FAILED %s:%d: %s\n", g_rank, __FILE__, __LINE__, \
                   fmt::format(__VA_ARGS__).c_str());                                              \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

int failures = 0;

// A value of dtype `dt` holding the small integer v (exact in every dtype).
void Store(std::vector<uint8_t>& buf, ml::DType dt, size_t i, double v) {
  uint8_t* p = buf.data() + i * ml::DTypeSize(dt);
  switch (dt) {
    case ml::DType::kF32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case ml::DType::kF64: std::memcpy(p, &v, 8); break;
    case ml::DType::kI32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case ml::DType::kI64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case ml::DType::kU8: *p = static_cast<uint8_t>(v); break;
    case ml::DType::kBF16: {  // small integers: the top 16 bits of the float are exact
      float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      uint16_t h = static_cast<uint16_t>(u >> 16);
      std::memcpy(p, &h, 2);
      break;
    }
    case ml::DType::kF16: {  // integers < 2048 exactly
      uint16_t h = 0;
      if (v != 0) {
        int e = 0;
        const double m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
        const uint16_t mant = static_cast<uint16_t>(std::lround((m * 2 - 1) * 1024));
        h = static_cast<uint16_t>(((e - 1 + 15) << 10) | mant);
      }
      std::memcpy(p, &h, 2);
      break;
    }
  }
}

double Load(const std::vector<uint8_t>& buf, ml::DType dt, size_t i) {
  const uint8_t* p = buf.data() + i * ml::DTypeSize(dt);
  switch (dt) {
    case ml::DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case ml::DType::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case ml::DType::kI32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case ml::DType::kI64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case ml::DType::kU8: return *p;
    case ml::DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      uint32_t u = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case ml::DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      const int e = (h >> 10) & 0x1f;
      const int m = h & 0x3ff;
      if (e == 0) return std::ldexp(m, -24);
      return std::ldexp(1024 + m, e - 25);
    }
  }
  return 0;
}

ml::Buffer Buf(std::vector<uint8_t>& v, ml::DType dt) {
  return ml::Buffer{v.data(), v.size() / ml::DTypeSize(dt), dt, ml::Device::kCpu};
}

// One operation over host vectors (each with its dtype), run on the memory
// `where`: on the vectors themselves (kCpu), or on device copies made before
// and read back after it completed (kCuda). The checks read the host vectors.
using HostBuffers = std::vector<std::pair<std::vector<uint8_t>*, ml::DType>>;
using Op = std::function<maestro::StatusOr<ml::WorkPtr>(const std::vector<ml::Buffer>&)>;
Status RunOn(ml::Device where, const HostBuffers& bufs, const Op& op) {
  std::vector<ml::Buffer> views;
  if (where == ml::Device::kCpu) {
    for (const auto& [v, dt] : bufs) views.push_back(Buf(*v, dt));
    return ml::Complete(op(views));
  }
#ifdef MAESTRO_HAVE_NCCL
  std::vector<std::unique_ptr<ml::CudaMemory>> mems;
  for (const auto& [v, dt] : bufs) {
    MAESTRO_ASSIGN_OR_RETURN(auto mem, ml::CudaMemory::Allocate(v->size()));
    MAESTRO_RETURN_IF_ERROR(mem->CopyFromHost(v->data(), v->size()));
    views.push_back(ml::Buffer{mem->data(), v->size() / ml::DTypeSize(dt), dt, ml::Device::kCuda});
    mems.push_back(std::move(mem));
  }
  MAESTRO_RETURN_IF_ERROR(ml::Complete(op(views)));
  for (size_t i = 0; i < bufs.size(); ++i) {
    MAESTRO_RETURN_IF_ERROR(mems[i]->CopyToHost(bufs[i].first->data(), bufs[i].first->size()));
  }
  return Status::Ok();
#else
  return Status::FailedPrecondition("device buffers: this build has no CUDA (MAESTRO_HAVE_NCCL is off)");
#endif
}

// Element i of group rank r's input: small, distinct, exact in every dtype.
double Value(int r, size_t i) {
  return static_cast<double>(1 + r + static_cast<int>(i % 5));
}

// Every collective of comm.h's Backend (Send/Recv: CheckLink), every dtype
// and reduction, on buffers in `where` (the NCCL backend: kCuda).
void CheckGroupOps(ml::Backend& g, ml::Device where = ml::Device::kCpu) {
  const int G = g.group().size();
  const int me = g.group().my_index;
  const size_t n = 37;  // odd on purpose
  for (ml::DType dt : {ml::DType::kF32, ml::DType::kBF16, ml::DType::kF16, ml::DType::kF64, ml::DType::kI32,
                       ml::DType::kI64, ml::DType::kU8}) {
    const size_t es = ml::DTypeSize(dt);
    for (ml::ReduceOp op : {ml::ReduceOp::kSum, ml::ReduceOp::kMax, ml::ReduceOp::kMin}) {
      std::vector<uint8_t> b(n * es);
      for (size_t i = 0; i < n; ++i) Store(b, dt, i, Value(me, i));
      PROBE_OK(RunOn(where, {{&b, dt}}, [&](const auto& x) { return g.AllReduce(x[0], op); }));
      for (size_t i = 0; i < n; ++i) {
        double want = op == ml::ReduceOp::kSum ? 0 : Value(0, i);
        for (int r = 0; r < G; ++r) {
          const double v = Value(r, i);
          want = op == ml::ReduceOp::kSum ? want + v : op == ml::ReduceOp::kMax ? std::max(want, v) : std::min(want, v);
        }
        PROBE_EXPECT(Load(b, dt, i) == want, "all_reduce {} {} on {}: element {} is {}, want {}", ml::DTypeName(dt),
                     ml::ReduceOpName(op), g.group().description, i, Load(b, dt, i), want);
      }
    }
    // all_gather: (n) -> (G*n)
    std::vector<uint8_t> in(n * es), out(G * n * es);
    for (size_t i = 0; i < n; ++i) Store(in, dt, i, Value(me, i));
    PROBE_OK(RunOn(where, {{&in, dt}, {&out, dt}}, [&](const auto& x) { return g.AllGather(x[0], x[1]); }));
    for (int r = 0; r < G; ++r) {
      for (size_t i = 0; i < n; ++i) {
        PROBE_EXPECT(Load(out, dt, r * n + i) == Value(r, i), "all_gather {} on {}: block {} element {}",
                     ml::DTypeName(dt), g.group().description, r, i);
      }
    }
    // reduce_scatter: (G*n) -> (n); block b of rank r holds Value(r, i) + b
    std::vector<uint8_t> rs_in(G * n * es), rs_out(n * es);
    for (int blk = 0; blk < G; ++blk) {
      for (size_t i = 0; i < n; ++i) Store(rs_in, dt, blk * n + i, Value(me, i) + blk);
    }
    PROBE_OK(RunOn(where, {{&rs_in, dt}, {&rs_out, dt}},
                   [&](const auto& x) { return g.ReduceScatter(x[0], x[1], ml::ReduceOp::kSum); }));
    for (size_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < G; ++r) want += Value(r, i) + me;
      PROBE_EXPECT(Load(rs_out, dt, i) == want, "reduce_scatter {} on {}: element {} is {}, want {}", ml::DTypeName(dt),
                   g.group().description, i, Load(rs_out, dt, i), want);
    }
    // all_to_all: (G*n) -> (G*n); block b of rank r's in = Value(r, i) + b lands in block r of rank b's out
    std::vector<uint8_t> a2a_in(G * n * es), a2a_out(G * n * es);
    for (int blk = 0; blk < G; ++blk) {
      for (size_t i = 0; i < n; ++i) Store(a2a_in, dt, blk * n + i, Value(me, i) + blk);
    }
    PROBE_OK(RunOn(where, {{&a2a_in, dt}, {&a2a_out, dt}}, [&](const auto& x) { return g.AllToAll(x[0], x[1]); }));
    for (int r = 0; r < G; ++r) {
      for (size_t i = 0; i < n; ++i) {
        PROBE_EXPECT(Load(a2a_out, dt, r * n + i) == Value(r, i) + me, "all_to_all {} on {}: block {} element {} is {}",
                     ml::DTypeName(dt), g.group().description, r, i, Load(a2a_out, dt, r * n + i));
      }
    }
    // broadcast from the last group rank
    std::vector<uint8_t> bc(n * es);
    for (size_t i = 0; i < n; ++i) Store(bc, dt, i, Value(me, i));
    PROBE_OK(RunOn(where, {{&bc, dt}}, [&](const auto& x) { return g.Broadcast(x[0], G - 1); }));
    for (size_t i = 0; i < n; ++i) {
      PROBE_EXPECT(Load(bc, dt, i) == Value(G - 1, i), "broadcast {} on {}: element {}", ml::DTypeName(dt),
                   g.group().description, i);
    }
  }
  PROBE_OK(ml::Complete(g.Barrier()));
  if (where != ml::Device::kCpu) return;  // the device backends' errors: NcclEveryCollective
  // Errors are Status, not crashes.
  std::vector<uint8_t> small(4), in_small_3(3);
  PROBE_EXPECT(!g.Send(Buf(small, ml::DType::kU8), G, 0).ok(), "send to a rank outside the group must fail");
  PROBE_EXPECT(!g.AllGather(Buf(small, ml::DType::kU8), Buf(small, ml::DType::kU8)).ok() || G == 1,
               "all_gather with a too small output must fail");
  PROBE_EXPECT(!g.AllToAll(Buf(small, ml::DType::kU8), Buf(in_small_3, ml::DType::kU8)).ok(),
               "all_to_all with buffers of different sizes must fail");
  PROBE_EXPECT(!g.AllReduce(ml::Buffer{small.data(), 4, ml::DType::kU8, ml::Device::kCuda}, ml::ReduceOp::kSum).ok(),
               "the MPI backend must refuse a CUDA buffer");
}

// Activations of micro-batches 0..M-1 down, gradients up; the receiver posts
// its receives in reverse order so only the tags can match them right.
void CheckLink(ml::LinkChannel& link) {
  const int M = 4;
  const size_t n = 1000;
  std::vector<std::vector<int32_t>> bufs(M, std::vector<int32_t>(n));
  auto value = [&](int mb, bool down, size_t i) {
    return static_cast<int32_t>(link.link().edge * 100000 + link.index_in_edge() * 10000 + mb * 100 + (down ? 0 : 50) +
                                static_cast<int>(i % 13));
  };
  for (bool down : {true, false}) {
    const bool i_send = link.is_upstream() == down;
    std::vector<ml::WorkPtr> works;
    if (i_send) {
      for (int mb = 0; mb < M; ++mb) {
        for (size_t i = 0; i < n; ++i) bufs[mb][i] = value(mb, down, i);
        auto w =
            down ? link.SendActivation(ml::CpuBuffer(bufs[mb]), mb) : link.SendGradient(ml::CpuBuffer(bufs[mb]), mb);
        PROBE_OK(w.status());
        works.push_back(std::move(*w));
      }
    } else {
      for (int mb = M - 1; mb >= 0; --mb) {
        auto w =
            down ? link.RecvActivation(ml::CpuBuffer(bufs[mb]), mb) : link.RecvGradient(ml::CpuBuffer(bufs[mb]), mb);
        PROBE_OK(w.status());
        works.push_back(std::move(*w));
      }
    }
    for (auto& w : works) PROBE_OK(w->Wait());
    if (!i_send) {
      for (int mb = 0; mb < M; ++mb) {
        for (size_t i = 0; i < n; ++i) {
          PROBE_EXPECT(bufs[mb][i] == value(mb, down, i), "{} {} micro-batch {} element {}: {} != {}",
                       link.backend().group().description, down ? "activation" : "gradient", mb, i, bufs[mb][i],
                       value(mb, down, i));
        }
      }
    }
    // The wrong end may not send in this direction.
    auto wrong = down ? (link.is_upstream() ? link.RecvActivation(ml::CpuBuffer(bufs[0]), 0)
                                            : link.SendActivation(ml::CpuBuffer(bufs[0]), 0))
                      : (link.is_upstream() ? link.SendGradient(ml::CpuBuffer(bufs[0]), 0)
                                            : link.RecvGradient(ml::CpuBuffer(bufs[0]), 0));
    PROBE_EXPECT(!wrong.ok(), "the wrong end of {} was allowed to use it", link.backend().group().description);
  }
}

int Collectives(const maestro::plan::Plan& plan, ml::WorkerContext& ctx) {
  auto& c = ctx.comms();
  for (auto kind : {maestro::plan::GroupKind::kTP, maestro::plan::GroupKind::kCP, maestro::plan::GroupKind::kDP,
                    maestro::plan::GroupKind::kPP}) {
    const auto want = maestro::plan::GroupOf(plan, g_rank, kind);
    PROBE_EXPECT(c.group(kind).group().ranks == want, "{} group ranks differ from the plan",
                 maestro::plan::GroupKindName(kind));
    CheckGroupOps(c.group(kind));
  }
  CheckGroupOps(c.world());
  const auto want_links = maestro::plan::LinksOfRank(plan, g_rank);
  PROBE_EXPECT(c.links().size() == want_links.size(), "rank {} has {} links, the plan says {}", g_rank,
               c.links().size(), want_links.size());
  for (auto& link : c.links()) CheckLink(link);
  int total = failures;
  PROBE_OK(
      ml::Complete(c.world().AllReduce(ml::Buffer{&total, 1, ml::DType::kI32, ml::Device::kCpu}, ml::ReduceOp::kSum)));
  if (g_rank == 0)
    std::printf("%s: %d failed checks over %d ranks, %zu links on rank 0\n", total == 0 ? "PROBE OK" : "PROBE FAILED",
                total, ctx.place().world_size, c.links().size());
  return total == 0 ? 0 : 1;
}

int StoreRounds(ml::WorkerContext& ctx) {
  auto& st = ctx.store();
  const int n = st.job_size();
  for (int round = 0; round < 3; ++round) {
    PROBE_OK(st.Put(fmt::format("probe/{}", round), fmt::format("rank {} round {}", g_rank, round)));
    PROBE_OK(st.Commit());
    const int from = (g_rank + 1 + round) % n;
    auto got = st.Get(from, fmt::format("probe/{}", round), ml::Millis(10000));
    PROBE_OK(got.status());
    PROBE_EXPECT(*got == fmt::format("rank {} round {}", from, round), "store round {}: got '{}'", round, *got);
  }
  PROBE_OK(st.Fence(ml::Millis(10000)));
  auto facts = st.Get((g_rank + 1) % n, "maestro/rank", ml::Millis(10000));
  PROBE_OK(facts.status());
  PROBE_EXPECT(facts->find(fmt::format("rank {} of {}", (g_rank + 1) % n, n)) == 0, "rank facts '{}'", *facts);
  auto missing = st.Get((g_rank + 1) % n, "probe/never-published", ml::Millis(1000));
  PROBE_EXPECT(!missing.ok() && missing.status().code() == maestro::StatusCode::kTimeout,
               "a key nobody published must time out");
  int total = failures;
  PROBE_OK(ml::Complete(
      ctx.comms().world().AllReduce(ml::Buffer{&total, 1, ml::DType::kI32, ml::Device::kCpu}, ml::ReduceOp::kSum)));
  if (g_rank == 0) std::printf("%s: store, %d failed checks\n", total == 0 ? "PROBE OK" : "PROBE FAILED", total);
  return total == 0 ? 0 : 1;
}

int Fault(ml::WorkerContext& ctx, const std::string& mode, int victim) {
  auto& dp = ctx.comms().group(maestro::plan::GroupKind::kDP);
  PROBE_OK(ml::Complete(ctx.comms().world().Barrier()));  // everyone is up
  if (g_rank == victim) {
    if (mode != "hang") {
      // Die only once the DP peer waits in the all-reduce, so that what the
      // peer reports does not depend on scheduling.
      const int peer = dp.group().ranks[dp.group().my_index == 0 ? 1 : 0];
      for (int attempt = 0; attempt < 50; ++attempt) {
        if (ctx.mpi().Survey({peer}, ml::Millis(200)).find("waiting in all_reduce") != std::string::npos) break;
      }
    }
    std::fprintf(stderr, "[probe rank %d] fault injection: %s before the DP all-reduce\n", g_rank, mode.c_str());
    std::fflush(stderr);
    if (mode == "kill") raise(SIGKILL);
    if (mode == "exit") std::_Exit(0);
    for (;;) pause();  // hang
  }
  std::vector<float> grads(1 << 20, 1.0f);  // 4 MiB
  const Status s = ml::Complete(dp.AllReduce(ml::CpuBuffer(grads), ml::ReduceOp::kSum));
  if (!s.ok()) ml::AbortJob(g_rank, s, maestro::kExitPeerFailure);
  // Ranks outside the victim's DP group wait for the rest in a world barrier,
  // three times as long, so the victim's DP peer is the one that reports.
  auto barrier = ctx.comms().world().Barrier();
  PROBE_OK(barrier.status());
  const Status b = (*barrier)->WaitFor(ctx.comms().world().timeout() * 3);
  if (!b.ok()) ml::AbortJob(g_rank, b, maestro::kExitPeerFailure);
  return 0;
}

// One rank, one GPU: NCCL's id through the PMIx store, a 4 MiB all-reduce,
// then every collective of CheckGroupOps (each dtype and reduction,
// all_gather, reduce_scatter, broadcast, all_to_all, barrier) on device
// memory, and the errors a device backend owes. Send/Recv need a second rank
// and so a second GPU (NCCL refuses two ranks on one device): not here.
int NcclEveryCollective(ml::WorkerContext& ctx) {
#ifdef MAESTRO_HAVE_NCCL
  if (ml::CudaDeviceCount() == 0) {
    std::printf("PROBE SKIP: no CUDA device\n");
    return 0;
  }
  ml::GroupInfo info;
  info.description = "nccl self-test group (rank 0)";
  info.ranks = {g_rank};
  info.my_index = 0;
  info.world_rank = g_rank;
  auto backend = ml::CreateNcclBackend(info, ctx.store(), "probe/nccl/self-test", 0, ml::Millis(30000));
  PROBE_OK(backend.status());
  ml::Backend& g = **backend;
  PROBE_EXPECT(std::string(g.name()) == "nccl" && g.device() == ml::Device::kCuda, "backend {} on {}", g.name(),
               ml::DeviceName(g.device()));
  const size_t n = 1 << 20;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 17);
  auto mem = ml::CudaMemory::Allocate(n * sizeof(float));
  PROBE_OK(mem.status());
  PROBE_OK((*mem)->CopyFromHost(host.data(), n * sizeof(float)));
  ml::Buffer dbuf{(*mem)->data(), n, ml::DType::kF32, ml::Device::kCuda};
  PROBE_OK(ml::Complete(g.AllReduce(dbuf, ml::ReduceOp::kSum)));
  std::vector<float> back(n);
  PROBE_OK((*mem)->CopyToHost(back.data(), n * sizeof(float)));
  for (size_t i = 0; i < n; ++i) PROBE_EXPECT(back[i] == host[i], "nccl all_reduce of 4 MiB: element {}", i);

  CheckGroupOps(g, ml::Device::kCuda);

  // Errors are Status, not crashes or hangs.
  PROBE_EXPECT(!g.AllReduce(ml::CpuBuffer(host), ml::ReduceOp::kSum).ok(), "NCCL must refuse CPU buffers");
  PROBE_EXPECT(!g.Send(dbuf, 1, 0).ok(), "send to group rank 1 of a 1-rank group must fail");
  PROBE_EXPECT(!g.Broadcast(dbuf, -1).ok(), "broadcast from root -1 must fail");
  PROBE_EXPECT(!g.AllGather(dbuf, dbuf.Slice(0, n - 1)).ok(), "all_gather into a too small output must fail");
  PROBE_EXPECT(!g.AllToAll(dbuf, dbuf.Slice(0, n - 1)).ok(), "all_to_all with buffers of different sizes must fail");
  std::printf("%s: nccl, every collective on %d device(s), %d failed checks\n",
              failures == 0 ? "PROBE OK" : "PROBE FAILED", ml::CudaDeviceCount(), failures);
  return failures == 0 ? 0 : 1;
#else
  (void)ctx;
  std::printf("PROBE SKIP: built without NCCL\n");
  return 0;
#endif
}

// Every collective of CheckGroupOps and a ring of sends on CUDA buffers over
// a world MPI backend staged through the host (host_staged_backend.h). All
// ranks may share device 0: MPI, unlike NCCL, does not mind.
int MpiCudaStaged(ml::WorkerContext& ctx) {
#ifdef MAESTRO_HAVE_NCCL
  int devices = ml::CudaDeviceCount();
  int have_device = devices > 0 ? 1 : 0;
  PROBE_OK(ml::Complete(ctx.comms().world().AllReduce(ml::Buffer{&have_device, 1, ml::DType::kI32, ml::Device::kCpu},
                                                      ml::ReduceOp::kMin)));
  if (have_device == 0) {
    if (g_rank == 0) std::printf("PROBE SKIP: a rank sees no CUDA device\n");
    return 0;
  }
  auto world = ctx.mpi().World(ml::Millis(30000));
  PROBE_OK(world.status());
  auto staged = ml::StageThroughHost(std::move(*world));
  ml::Backend& g = *staged;
  PROBE_EXPECT(g.device() == ml::Device::kCuda, "the staged backend must take CUDA buffers");
  CheckGroupOps(g, ml::Device::kCuda);
  // A ring: rank r sends 1000 ints to r+1 and receives r-1's.
  const int G = g.group().size();
  const int me = g.group().my_index;
  std::vector<uint8_t> out(1000 * 4), in(1000 * 4);
  for (size_t i = 0; i < 1000; ++i) Store(out, ml::DType::kI32, i, Value(me, i));
  auto send_mem = ml::CudaMemory::Allocate(out.size());
  auto recv_mem = ml::CudaMemory::Allocate(in.size());
  PROBE_OK(send_mem.status());
  PROBE_OK(recv_mem.status());
  PROBE_OK((*send_mem)->CopyFromHost(out.data(), out.size()));
  ml::Buffer send_buf{(*send_mem)->data(), 1000, ml::DType::kI32, ml::Device::kCuda};
  ml::Buffer recv_buf{(*recv_mem)->data(), 1000, ml::DType::kI32, ml::Device::kCuda};
  auto recv = g.Recv(recv_buf, (me + G - 1) % G, 7);
  PROBE_OK(recv.status());
  PROBE_OK(ml::Complete(g.Send(send_buf, (me + 1) % G, 7)));
  PROBE_OK((*recv)->Wait());
  PROBE_OK((*recv_mem)->CopyToHost(in.data(), in.size()));
  for (size_t i = 0; i < 1000; ++i) {
    PROBE_EXPECT(Load(in, ml::DType::kI32, i) == Value((me + G - 1) % G, i), "ring recv element {}", i);
  }
  int total = failures;
  PROBE_OK(ml::Complete(
      ctx.comms().world().AllReduce(ml::Buffer{&total, 1, ml::DType::kI32, ml::Device::kCpu}, ml::ReduceOp::kSum)));
  if (g_rank == 0) {
    std::printf("%s: %s, every collective and a ring on CUDA buffers over %d ranks, %d failed checks\n",
                total == 0 ? "PROBE OK" : "PROBE FAILED", g.name(), G, total);
  }
  return total == 0 ? 0 : 1;
#else
  (void)ctx;
  std::printf("PROBE SKIP: built without CUDA\n");
  return 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PLAN collectives|store|kill RANK|hang RANK|exit RANK|nccl|mpi-cuda\n", argv[0]);
    return maestro::kExitUsage;
  }
  auto plan = maestro::plan::LoadPlan(argv[1]);
  if (!plan.ok()) {
    std::fprintf(stderr, "%s\n", plan.status().ToString().c_str());
    return maestro::kExitUsage;
  }
  auto options = ml::CommOptionsFromEnv(ml::ProcessEnv(), {});
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return maestro::kExitUsage;
  }
  const std::string scenario = argv[2];
  if (scenario == "nccl") options->backend = ml::BackendChoice::kMpi;  // the probe builds its own NCCL group
  auto ctx = ml::WorkerContext::Start(*plan, *options, &g_rank);
  if (!ctx.ok()) {
    if (g_rank < 0) {
      std::fprintf(stderr, "%s\n", ctx.status().ToString().c_str());
      return maestro::kExitUsage;
    }
    ml::AbortJob(g_rank, ctx.status(), maestro::kExitFailure);
  }
  if (scenario == "collectives") return Collectives(*plan, **ctx);
  if (scenario == "store") return StoreRounds(**ctx);
  if (scenario == "nccl") return NcclEveryCollective(**ctx);
  if (scenario == "mpi-cuda") return MpiCudaStaged(**ctx);
  if ((scenario == "kill" || scenario == "hang" || scenario == "exit") && argc > 3) {
    return Fault(**ctx, scenario, std::atoi(argv[3]));
  }
  std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
  return maestro::kExitUsage;
}
