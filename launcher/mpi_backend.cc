// SPDX-License-Identifier: Apache-2.0
#include "launcher/mpi_backend.h"

#include <fmt/format.h>
#include <mpi.h>
#include <sched.h>
#include <time.h>

#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <vector>

#include "launcher/checks.h"
#include "launcher/failure.h"

namespace maestro::launcher {
namespace internal {
std::string MpiErrorString(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(buf, static_cast<size_t>(len));
}
}  // namespace internal

namespace {

// ---- 16-bit floats: conversions and the user-defined reduction ops ---------
float Bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                      // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    const float f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t FloatToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  const float a = std::fabs(f);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 6.103515625e-05f) return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f)));
  const uint32_t exp = (au >> 23) - 112u;
  const uint32_t mant = au & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float), int kOp>
void Reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = ToF(a[i]), y = ToF(b[i]);
    const float r = kOp == 0 ? x + y : kOp == 1 ? (x > y ? x : y) : (x < y ? x : y);
    b[i] = FromF(r);
  }
}

constexpr int kQueryTag = 1;
constexpr int kReplyTag = 2;
constexpr size_t kReplyBytes = 512;
constexpr auto kServeAfter = std::chrono::milliseconds(20);
// On an oversubscribed node a wait spins this long, then sleeps as long
// between polls (a message waits at most ~this + the timer's slack).
constexpr long kSpinNanos = 50000;

}  // namespace

// ---- the session --------------------------------------------------------------
struct MpiSession::Impl {
  int rank = -1, size = 0;
  // More ranks on this node than cores this process may use (`maestro run`
  // on a laptop, the loopback cluster): a waiting rank then sleeps between
  // polls instead of spinning, so that the ranks computing get the cores.
  bool oversubscribed = false;
  MPI_Comm health = MPI_COMM_NULL;  // dup of world: "what are you waiting in?"
  std::array<MPI_Op, 6> ops16{};    // {bf16, f16} x {sum, max, min}
  std::deque<std::pair<MPI_Request, std::array<char, kReplyBytes>>> replies;  // in-flight answers

  // Answers queries of ranks whose wait timed out. Called while waiting.
  void Serve() {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, health, &flag, &st) != MPI_SUCCESS || !flag) break;
      int dummy = 0;
      MPI_Recv(&dummy, 1, MPI_INT, st.MPI_SOURCE, kQueryTag, health, MPI_STATUS_IGNORE);
      replies.emplace_back();
      auto& r = replies.back();
      const InFlightOp* op = CurrentInFlightOp();
      std::string text = op != nullptr ? fmt::format("is waiting in {} (for {:.1f} s)", DescribeOp(*op),
                                                     static_cast<double>(MonotonicNanos() - op->start_ns) * 1e-9)
                                       : std::string("answers but waits in no operation");
      text.resize(std::min(text.size(), kReplyBytes - 1));
      std::memset(r.second.data(), 0, kReplyBytes);
      std::memcpy(r.second.data(), text.data(), text.size());
      MPI_Isend(r.second.data(), static_cast<int>(kReplyBytes), MPI_CHAR, st.MPI_SOURCE, kReplyTag, health, &r.first);
    }
    while (!replies.empty()) {
      int done = 0;
      MPI_Test(&replies.front().first, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      replies.pop_front();
    }
  }

  // Asks `ranks` (global) what they wait in; returns one line per rank.
  std::string Survey(const std::vector<int>& ranks, Millis grace) {
    std::map<int, std::string> answers;
    std::vector<int> asked;
    int dummy = 0;
    for (int r : ranks) {
      if (r == rank) continue;
      MPI_Request req;
      if (MPI_Isend(&dummy, 1, MPI_INT, r, kQueryTag, health, &req) == MPI_SUCCESS) {
        MPI_Request_free(&req);
        asked.push_back(r);
      }
    }
    const int64_t deadline = MonotonicNanos() + static_cast<int64_t>(grace.count()) * 1000000;
    std::array<char, kReplyBytes> buf{};
    while (answers.size() < asked.size() && MonotonicNanos() < deadline) {
      Serve();
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kReplyTag, health, &flag, &st);
      if (flag) {
        MPI_Recv(buf.data(), static_cast<int>(kReplyBytes), MPI_CHAR, st.MPI_SOURCE, kReplyTag, health,
                 MPI_STATUS_IGNORE);
        buf[kReplyBytes - 1] = '\0';
        answers[st.MPI_SOURCE] = buf.data();
      } else {
        timespec ts{0, 1000000};
        nanosleep(&ts, nullptr);
      }
    }
    std::string missing, report;
    for (int r : asked) {
      auto it = answers.find(r);
      if (it == answers.end()) {
        missing += missing.empty() ? fmt::format("{}", r) : fmt::format(",{}", r);
      } else {
        report += fmt::format("; rank {} {}", r, it->second);
      }
    }
    if (asked.empty()) return "";
    if (!missing.empty()) {
      return fmt::format(
          "; missing rank(s) {}: no answer within {:.1f} s (dead, stopped, or busy outside "
          "communication){}",
          missing, static_cast<double>(grace.count()) / 1000.0, report);
    }
    return report + "; every rank of the group answered (a mismatched operation order, or a slow peer)";
  }
};

namespace {

MPI_Datatype MpiTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kU8: return MPI_UINT8_T;
    case DType::kBF16:
    case DType::kF16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

class MpiWork final : public Work {
 public:
  MpiWork(MpiSession::Impl* session, const char* op, size_t bytes, int peer, const GroupInfo* group, uint64_t seq,
          Millis default_timeout)
      : Work(default_timeout), session_(session) {
    record_.op = op;
    record_.bytes = bytes;
    record_.peer = peer;
    record_.group = group;
    record_.seq = seq;
  }
  ~MpiWork() override {
    // A request that was never waited on must still complete before its
    // buffers go away; after a timeout it is abandoned (the job is ending).
    if (!done_ && !timed_out_) (void)Wait();
  }

  MPI_Request* request() { return &request_; }

  bool IsCompleted() override {
    if (done_) return true;
    int flag = 0;
    if (MPI_Test(&request_, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) done_ = true;
    return done_;
  }

  Status WaitFor(Millis timeout) override {
    if (done_) return Status::Ok();
    if (timed_out_) return timeout_status_;
    record_.start_ns = MonotonicNanos();
    InFlightScope scope(&record_);
    const int64_t deadline = record_.start_ns + static_cast<int64_t>(timeout.count()) * 1000000;
    const int64_t serve_after = record_.start_ns + std::chrono::nanoseconds(kServeAfter).count();
    for (;;) {
      int flag = 0;
      MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
      if (flag) {
        done_ = true;
        return Status::Ok();
      }
      const int64_t now = MonotonicNanos();
      if (now >= deadline) break;
      const int64_t waited = now - record_.start_ns;
      if (now >= serve_after) {
        session_->Serve();
        // Past the first 20 ms: give the core to the other ranks of an
        // oversubscribed node (tests run 6 ranks on 2 cores).
        timespec ts{0, waited > 1000000000LL ? 1000000L : 100000L};
        nanosleep(&ts, nullptr);
      } else if (session_->oversubscribed && waited > kSpinNanos) {
        // A spinning waiter would take a core from a rank that computes.
        timespec ts{0, kSpinNanos};
        nanosleep(&ts, nullptr);
      } else if (waited > 2000000) {
        sched_yield();
      }
    }
    timed_out_ = true;
    const Millis grace(std::max<int64_t>(200, std::min<int64_t>(3000, timeout.count() / 2)));
    const std::string survey =
        record_.group != nullptr
            ? session_->Survey(record_.peer >= 0 ? std::vector<int>{record_.peer} : record_.group->ranks, grace)
            : std::string();
    timeout_status_ = Status::Timeout(fmt::format(
        "rank {}: {} did not complete within {:.1f} s{}", record_.group != nullptr ? record_.group->world_rank : -1,
        DescribeOp(record_), static_cast<double>(timeout.count()) / 1000.0, survey));
    return timeout_status_;
  }

 private:
  MpiSession::Impl* session_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  InFlightOp record_;
  bool done_ = false;
  bool timed_out_ = false;
  Status timeout_status_;
};

class MpiBackend final : public Backend {
 public:
  MpiBackend(MpiSession::Impl* session, MPI_Comm comm, GroupInfo info, Millis timeout)
      : session_(session), comm_(comm), group_(std::move(info)), timeout_(timeout) {}
  ~MpiBackend() override {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  const char* name() const override { return "mpi"; }
  Device device() const override { return Device::kCpu; }
  const GroupInfo& group() const override { return group_; }
  Millis timeout() const override { return timeout_; }

  StatusOr<WorkPtr> AllReduce(Buffer buf, ReduceOp op) override {
    MAESTRO_RETURN_IF_ERROR(CheckBuffer(buf, "all_reduce"));
    auto work = NewWork("all_reduce", buf.bytes(), -1);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf.data, static_cast<int>(buf.count), MpiTypeOf(buf.dtype),
                             OpOf(buf.dtype, op), comm_, work->request()));
    return WorkPtr(std::move(work));
  }

  StatusOr<WorkPtr> AllGather(Buffer in, Buffer out) override {
    MAESTRO_RETURN_IF_ERROR(CheckBuffer(in, "all_gather"));
    MAESTRO_RETURN_IF_ERROR(CheckBuffer(out, "all_gather"));
    MAESTRO_RETURN_IF_ERROR(CheckBlockShapes("all_gather", group_, in, out));
    auto work = NewWork("all_gather", out.bytes(), -1);
    MPI_CHECK(MPI_Iallgather(in.data, static_cast<int>(in.count), MpiTypeOf(in.dtype), out.data,
                             static_cast<int>(in.count), MpiTypeOf(in.dtype), comm_, work->request()));
    return WorkPtr(std::move(work));
  }

  StatusOr<WorkPtr> ReduceScatter(Buffer in, Buffer out, ReduceOp op) override {
    MAESTRO_RETURN_IF_ERROR(CheckBuffer(in, "reduce_scatter"));
    MAESTRO_RETURN_IF_ERROR(CheckBuffer(out, "reduce_scatter"));
    MAESTRO_RETURN_IF_ERROR(CheckBlockShapes("reduce_scatter", group_, out, in));
    auto work = NewWork("reduce_scatter", in.bytes(), -1);
    MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, static_cast<int>(out.count), MpiTypeOf(in.dtype),
                                        OpOf(in.dtype, op), comm_, work->request()));
    return WorkPtr(std::move(work));
  }

  StatusOr<WorkPtr> AllToAll(Buffer in, Buffer out) override {
    MAESTRO_RETURN_IF_ERROR(CheckBuffer(in, "all_to_all"));
    MAESTRO_RETURN_IF_ERROR(CheckBuffer(out, "all_to_all"));
    MAESTRO_RETURN_IF_ERROR(CheckAllToAllShapes(group_, in, out));
    const int block = static_cast<int>(in.count / static_cast<size_t>(group_.size()));
    auto work = NewWork("all_to_all", in.bytes(), -1);
    MPI_CHECK(MPI_Ialltoall(in.data, block, MpiTypeOf(in.dtype), out.data, block, MpiTypeOf(in.dtype), comm_,
                            work->request()));
    return WorkPtr(std::move(work));
  }

  StatusOr<WorkPtr> Broadcast(Buffer buf, int root) override {
    MAESTRO_RETURN_IF_ERROR(CheckBuffer(buf, "broadcast"));
    MAESTRO_RETURN_IF_ERROR(CheckPeer(root, "broadcast"));
    auto work = NewWork("broadcast", buf.bytes(), group_.ranks[static_cast<size_t>(root)]);
    MPI_CHECK(MPI_Ibcast(buf.data, static_cast<int>(buf.count), MpiTypeOf(buf.dtype), root, comm_, work->request()));
    return WorkPtr(std::move(work));
  }

  StatusOr<WorkPtr> Send(Buffer buf, int peer, int tag) override {
    MAESTRO_RETURN_IF_ERROR(CheckBuffer(buf, "send"));
    MAESTRO_RETURN_IF_ERROR(CheckPeer(peer, "send"));
    MAESTRO_RETURN_IF_ERROR(CheckTag(tag));
    auto work = NewWork("send", buf.bytes(), group_.ranks[static_cast<size_t>(peer)]);
    MPI_CHECK(
        MPI_Isend(buf.data, static_cast<int>(buf.count), MpiTypeOf(buf.dtype), peer, tag, comm_, work->request()));
    return WorkPtr(std::move(work));
  }

  StatusOr<WorkPtr> Recv(Buffer buf, int peer, int tag) override {
    MAESTRO_RETURN_IF_ERROR(CheckBuffer(buf, "recv"));
    MAESTRO_RETURN_IF_ERROR(CheckPeer(peer, "recv"));
    MAESTRO_RETURN_IF_ERROR(CheckTag(tag));
    auto work = NewWork("recv", buf.bytes(), group_.ranks[static_cast<size_t>(peer)]);
    MPI_CHECK(
        MPI_Irecv(buf.data, static_cast<int>(buf.count), MpiTypeOf(buf.dtype), peer, tag, comm_, work->request()));
    return WorkPtr(std::move(work));
  }

  StatusOr<WorkPtr> Barrier() override {
    auto work = NewWork("barrier", 0, -1);
    MPI_CHECK(MPI_Ibarrier(comm_, work->request()));
    return WorkPtr(std::move(work));
  }

 private:
  std::unique_ptr<MpiWork> NewWork(const char* op, size_t bytes, int peer) {
    return std::make_unique<MpiWork>(session_, op, bytes, peer, &group_, ++seq_, timeout_);
  }

  Status CheckBuffer(const Buffer& buf, const char* op) const {
    if (buf.device != Device::kCpu) {
      return Status::InvalidArgument(fmt::format("{} on {}: the MPI backend takes CPU buffers, got a {} buffer", op,
                                                 group_.description, DeviceName(buf.device)));
    }
    if (buf.count > static_cast<size_t>(INT_MAX)) {
      return Status::InvalidArgument(fmt::format("{} on {}: {} elements exceed MPI's int count; split the buffer", op,
                                                 group_.description, buf.count));
    }
    if (buf.data == nullptr && buf.count > 0) {
      return Status::InvalidArgument(fmt::format("{} on {}: null buffer", op, group_.description));
    }
    return Status::Ok();
  }
  Status CheckPeer(int peer, const char* op) const {
    if (peer < 0 || peer >= group_.size()) {
      return Status::InvalidArgument(
          fmt::format("{} on {}: group rank {} is not in [0, {})", op, group_.description, peer, group_.size()));
    }
    return Status::Ok();
  }
  static Status CheckTag(int tag) {
    if (tag < 0 || tag >= (1 << 30)) return Status::InvalidArgument(fmt::format("tag {} is not in [0, 2^30)", tag));
    return Status::Ok();
  }
  MPI_Op OpOf(DType dtype, ReduceOp op) const {
    const int k = static_cast<int>(op);
    if (dtype == DType::kBF16) return session_->ops16[static_cast<size_t>(k)];
    if (dtype == DType::kF16) return session_->ops16[static_cast<size_t>(3 + k)];
    return op == ReduceOp::kSum ? MPI_SUM : op == ReduceOp::kMax ? MPI_MAX : MPI_MIN;
  }

  MpiSession::Impl* session_;
  MPI_Comm comm_;
  GroupInfo group_;
  Millis timeout_;
  uint64_t seq_ = 0;
};

}  // namespace

MpiSession::MpiSession() : impl_(std::make_unique<Impl>()) {}

StatusOr<std::unique_ptr<MpiSession>> MpiSession::Init(const std::function<Status()>& barrier) {
  std::unique_ptr<MpiSession> s(new MpiSession());
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (barrier) MAESTRO_RETURN_IF_ERROR(barrier());  // every rank out of MPI_Init before the first message
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &s->impl_->rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &s->impl_->size));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &s->impl_->health));
  {
    MPI_Comm node = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s->impl_->rank, MPI_INFO_NULL, &node));
    int on_node = 1;
    MPI_CHECK(MPI_Comm_size(node, &on_node));
    MPI_Comm_free(&node);
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
    s->impl_->oversubscribed = cores > 0 && on_node > cores;
  }
  auto& ops = s->impl_->ops16;
  MPI_CHECK(MPI_Op_create(&Reduce16<Bf16ToFloat, FloatToBf16, 0>, 1, &ops[0]));
  MPI_CHECK(MPI_Op_create(&Reduce16<Bf16ToFloat, FloatToBf16, 1>, 1, &ops[1]));
  MPI_CHECK(MPI_Op_create(&Reduce16<Bf16ToFloat, FloatToBf16, 2>, 1, &ops[2]));
  MPI_CHECK(MPI_Op_create(&Reduce16<F16ToFloat, FloatToF16, 0>, 1, &ops[3]));
  MPI_CHECK(MPI_Op_create(&Reduce16<F16ToFloat, FloatToF16, 1>, 1, &ops[4]));
  MPI_CHECK(MPI_Op_create(&Reduce16<F16ToFloat, FloatToF16, 2>, 1, &ops[5]));
  return s;
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& op : impl_->ops16) {
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }
  if (impl_->health != MPI_COMM_NULL) MPI_Comm_free(&impl_->health);
  MPI_Finalize();
}

int MpiSession::rank() const {
  return impl_->rank;
}
int MpiSession::size() const {
  return impl_->size;
}

StatusOr<std::unique_ptr<Backend>> MpiSession::World(Millis timeout) {
  GroupInfo info;
  info.description = fmt::format("world ({} ranks)", impl_->size);
  for (int r = 0; r < impl_->size; ++r) info.ranks.push_back(r);
  info.my_index = impl_->rank;
  info.world_rank = impl_->rank;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::unique_ptr<Backend>(std::make_unique<MpiBackend>(impl_.get(), comm, std::move(info), timeout));
}

StatusOr<std::unique_ptr<Backend>> MpiSession::SplitWorld(int color, GroupInfo info, Millis timeout) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, info.my_index, &comm));
  int size = 0;
  MPI_Comm_size(comm, &size);
  if (size != info.size()) {
    MPI_Comm_free(&comm);
    return Status::Internal(
        fmt::format("{}: MPI_Comm_split made a group of {} ranks, expected {}", info.description, size, info.size()));
  }
  info.world_rank = impl_->rank;
  return std::unique_ptr<Backend>(std::make_unique<MpiBackend>(impl_.get(), comm, std::move(info), timeout));
}

std::string MpiSession::Survey(const std::vector<int>& ranks, Millis grace) {
  return impl_->Survey(ranks, grace);
}

StatusOr<std::unique_ptr<Backend>> MpiSession::CreateGroup(GroupInfo info, int tag, Millis timeout) {
  MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  const int incl_rc = MPI_Group_incl(world_group, info.size(), info.ranks.data(), &group);
  MPI_Group_free(&world_group);
  MPI_CHECK(incl_rc);
  MPI_Comm comm = MPI_COMM_NULL;
  const int create_rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &comm);
  MPI_Group_free(&group);
  MPI_CHECK(create_rc);
  info.world_rank = impl_->rank;
  return std::unique_ptr<Backend>(std::make_unique<MpiBackend>(impl_.get(), comm, std::move(info), timeout));
}

StatusOr<double> RawMpiPingSeconds(size_t bytes, int iterations) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (bytes > static_cast<size_t>(INT_MAX)) return Status::InvalidArgument("message too large for MPI");
  std::vector<char> buf(bytes, static_cast<char>(rank + 1));
  char ack = 0;
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  const double t0 = MPI_Wtime();
  if (rank == 0) {
    for (int i = 0; i < iterations; ++i) {
      MPI_CHECK(MPI_Send(buf.data(), static_cast<int>(bytes), MPI_CHAR, 1, 7, MPI_COMM_WORLD));
    }
    MPI_CHECK(MPI_Recv(&ack, 1, MPI_CHAR, 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  } else if (rank == 1) {
    for (int i = 0; i < iterations; ++i) {
      MPI_CHECK(MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_CHAR, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    MPI_CHECK(MPI_Send(&ack, 1, MPI_CHAR, 0, 8, MPI_COMM_WORLD));
  }
  return MPI_Wtime() - t0;
}

}  // namespace maestro::launcher
