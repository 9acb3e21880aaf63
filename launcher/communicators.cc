// SPDX-License-Identifier: Apache-2.0
#include "launcher/communicators.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "base/checks.h"
#include "base/log.h"
#include "launcher/nccl_backend.h"

namespace maestro::launcher {

StatusOr<CommOptions> CommOptionsFromEnv(const EnvLookup& env, CommOptions defaults) {
  CommOptions out = defaults;
  if (const char* t = env("MAESTRO_COMM_TIMEOUT_S")) {
    char* end = nullptr;
    const double s = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(s > 0.0) || s > 1e7) {
      return Status::InvalidArgument(
          fmt::format("MAESTRO_COMM_TIMEOUT_S='{}' is not a positive number of seconds (e.g. 60 or 2.5)", t));
    }
    out.timeout = Millis(static_cast<int64_t>(s * 1000.0 + 0.5));
  }
  if (const char* b = env("MAESTRO_COMM_BACKEND")) {
    if (std::strcmp(b, "auto") == 0) {
      out.backend = BackendChoice::kAuto;
    } else if (std::strcmp(b, "mpi") == 0) {
      out.backend = BackendChoice::kMpi;
    } else if (std::strcmp(b, "nccl") == 0) {
      out.backend = BackendChoice::kNccl;
    } else {
      return Status::InvalidArgument(fmt::format("MAESTRO_COMM_BACKEND='{}': use auto, mpi or nccl", b));
    }
  }
  return out;
}

namespace {
std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  const size_t shown = ranks.size() > 16 ? 8 : ranks.size();
  for (size_t i = 0; i < shown; ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  if (shown < ranks.size()) s += fmt::format(",...,{} ({} ranks)", ranks.back(), ranks.size());
  return s;
}

GroupInfo MakeGroupInfo(std::string description, std::vector<int> ranks, int world_rank) {
  GroupInfo g;
  g.description = std::move(description);
  g.ranks = std::move(ranks);
  g.world_rank = world_rank;
  for (size_t i = 0; i < g.ranks.size(); ++i) {
    if (g.ranks[i] == world_rank) g.my_index = static_cast<int>(i);
  }
  return g;
}
}  // namespace

std::string GroupDescription(const plan::Plan& plan, int section, plan::GroupKind kind, const std::vector<int>& ranks) {
  return fmt::format("{} group of section '{}' (ranks {})", plan::GroupKindName(kind),
                     plan.sections[static_cast<size_t>(section)].name, RankList(ranks));
}

std::string LinkDescription(const plan::Plan& plan, const plan::Link& link, int index_in_edge) {
  const auto& e = plan.edges[static_cast<size_t>(link.edge)];
  return fmt::format("link {} of edge '{}' -> '{}' ({}): {} dp {} (rank {}) <-> {} dp {} (rank {})", index_in_edge,
                     e.from, e.to, e.tensor, e.from, link.up_dp, link.up_rank, e.to, link.down_dp, link.down_rank);
}

bool NcclBuilt() {
#ifdef MAESTRO_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::vector<bool> NcclSections(const plan::Plan& plan, BackendChoice choice, bool gpus_usable) {
  std::vector<bool> nccl(plan.sections.size(), false);
  if (choice == BackendChoice::kMpi || !NcclBuilt() || !gpus_usable) return nccl;
  for (size_t s = 0; s < plan.sections.size(); ++s) nccl[s] = plan.sections[s].placement.gpus_per_task > 0;
  return nccl;
}

bool NcclLink(const plan::Plan& plan, const std::vector<bool>& nccl_sections, int edge) {
  const auto& e = plan.edges[static_cast<size_t>(edge)];
  const int up = plan.section_index(e.from), down = plan.section_index(e.to);
  return up >= 0 && down >= 0 && nccl_sections[static_cast<size_t>(up)] && nccl_sections[static_cast<size_t>(down)];
}

bool CudaDeviceAvailable() {
  return CudaDeviceCount() > 0;
}

LinkChannel::LinkChannel(plan::Link link, int index_in_edge, bool is_upstream, std::unique_ptr<Backend> backend)
    : link_(link), index_in_edge_(index_in_edge), is_upstream_(is_upstream), backend_(std::move(backend)) {}

StatusOr<WorkPtr> LinkChannel::Transfer(bool send, Direction direction, Buffer buf, int micro_batch,
                                        bool need_upstream) {
  if (is_upstream_ != need_upstream) {
    return Status::InvalidArgument(fmt::format("{}: this rank is the {} end; {} {} belongs to the other end",
                                               backend_->group().description, is_upstream_ ? "upstream" : "downstream",
                                               send ? "sending" : "receiving",
                                               direction == Direction::kDown ? "activations" : "gradients"));
  }
  if (micro_batch < 0 || micro_batch >= (1 << 29)) {
    return Status::InvalidArgument(fmt::format("micro-batch {} is not in [0, 2^29)", micro_batch));
  }
  const int peer = is_upstream_ ? 1 : 0;
  const int tag = Tag(direction, micro_batch);
  return send ? backend_->Send(buf, peer, tag) : backend_->Recv(buf, peer, tag);
}

StatusOr<WorkPtr> LinkChannel::SendActivation(Buffer buf, int micro_batch) {
  return Transfer(true, Direction::kDown, buf, micro_batch, true);
}
StatusOr<WorkPtr> LinkChannel::RecvActivation(Buffer buf, int micro_batch) {
  return Transfer(false, Direction::kDown, buf, micro_batch, false);
}
StatusOr<WorkPtr> LinkChannel::SendGradient(Buffer buf, int micro_batch) {
  return Transfer(true, Direction::kUp, buf, micro_batch, false);
}
StatusOr<WorkPtr> LinkChannel::RecvGradient(Buffer buf, int micro_batch) {
  return Transfer(false, Direction::kUp, buf, micro_batch, true);
}

StatusOr<std::unique_ptr<Communicators>> Communicators::Create(const plan::Plan& plan, const RankPlace& place,
                                                               MpiSession& mpi, PmixStore& store,
                                                               const CommOptions& options) {
  std::unique_ptr<Communicators> c(new Communicators());
  const int me = place.world_rank;
  (void)store;  // used by the NCCL backend only
  MAESTRO_ASSIGN_OR_RETURN(c->world_, mpi.World(options.timeout));

  // Which sections talk NCCL. The decision must be the same on every rank:
  // it follows the plan, the build and one job-wide vote on CUDA.
  std::vector<bool> nccl(plan.sections.size(), false);
  const bool built = NcclBuilt();
  bool any_gpu_section = false;
  for (const auto& s : plan.sections) any_gpu_section |= s.placement.gpus_per_task > 0;
  if (options.backend != BackendChoice::kMpi && any_gpu_section) {
    const bool my_section_gpu = plan.sections[static_cast<size_t>(place.coords.section)].placement.gpus_per_task > 0;
    int usable = (!my_section_gpu || (built && CudaDeviceAvailable())) ? 1 : 0;
    Buffer vote{&usable, 1, DType::kI32, Device::kCpu};
    MAESTRO_RETURN_IF_ERROR(Complete(c->world_->AllReduce(vote, ReduceOp::kMin)));
    if (usable == 0 && options.backend == BackendChoice::kNccl) {
      return Status::FailedPrecondition(
          "MAESTRO_COMM_BACKEND=nccl but a rank of a GPU section has no usable CUDA device or this build has no "
          "NCCL; unset it (auto) or set MAESTRO_COMM_BACKEND=mpi to run on CPU");
    }
    if (usable == 0 && me == 0) {
      Log(LogLevel::kWarn,
          "the plan places sections on GPUs but a rank has no usable CUDA device{}: using the MPI "
          "backend (CPU buffers) everywhere",
          built ? "" : " (this build has no NCCL)");
    }
    nccl = NcclSections(plan, options.backend, usable == 1);
  }

  // Groups inside this rank's section: TP, CP, DP, PP, EP, expert-DP, DP x CP.
  // MPI_Comm_split over the world needs every rank, in the same order:
  // colour = first rank.
  const int section = place.coords.section;
  for (plan::GroupKind kind : {plan::GroupKind::kTP, plan::GroupKind::kCP, plan::GroupKind::kDP, plan::GroupKind::kPP,
                               plan::GroupKind::kEP, plan::GroupKind::kExpertDP, plan::GroupKind::kDPxCP}) {
    std::vector<int> ranks = plan::GroupOf(plan, me, kind);
    GroupInfo info = MakeGroupInfo(GroupDescription(plan, section, kind, ranks), ranks, me);
    // MPI_Comm_split is collective over the world: every rank joins every split.
    MAESTRO_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, mpi.SplitWorld(ranks.front(), info, options.timeout));
    if (nccl[static_cast<size_t>(section)]) {
#ifdef MAESTRO_HAVE_NCCL
      MAESTRO_ASSIGN_OR_RETURN(
          backend,
          CreateNcclBackend(info, store, fmt::format("maestro/nccl/{}/{}", plan::GroupKindName(kind), ranks.front()),
                            place.local_gpu, options.timeout));
#endif
    }
    c->groups_[static_cast<size_t>(kind)] = std::move(backend);
  }

  // Links, in one global order (edge, then link index) so that the 2-rank
  // creations of every pair of ranks happen in the same order on both sides.
  int link_tag = 0;
  for (size_t e = 0; e < plan.edges.size(); ++e) {
    const auto links = plan::LinksOfEdge(plan, static_cast<int>(e));
    const bool link_nccl = NcclLink(plan, nccl, static_cast<int>(e));
    for (size_t i = 0; i < links.size(); ++i, ++link_tag) {
      const plan::Link& l = links[i];
      if (l.up_rank != me && l.down_rank != me) continue;
      GroupInfo info = MakeGroupInfo(LinkDescription(plan, l, static_cast<int>(i)), {l.up_rank, l.down_rank}, me);
      std::unique_ptr<Backend> backend;
      if (link_nccl) {
#ifdef MAESTRO_HAVE_NCCL
        MAESTRO_ASSIGN_OR_RETURN(backend, CreateNcclBackend(info, store, fmt::format("maestro/nccl/link/{}/{}", e, i),
                                                            place.local_gpu, options.timeout));
#endif
      } else {
        MAESTRO_ASSIGN_OR_RETURN(backend, mpi.CreateGroup(info, link_tag, options.timeout));
      }
      c->links_.emplace_back(l, static_cast<int>(i), l.up_rank == me, std::move(backend));
    }
  }
  return c;
}

}  // namespace maestro::launcher
