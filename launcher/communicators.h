// SPDX-License-Identifier: Apache-2.0
// Communicators: every group this rank belongs to, built from the plan.
//   world              all ranks (MPI; control plane, the self-test's gather)
//   group(kind)        this rank's TP / CP / DP / PP group inside its section,
//                      and its EP and expert-DP groups (plan::GroupKind)
//   links()            one LinkChannel per cross-section link this rank is an
//                      endpoint of (plan::LinksOfRank), usable both ways
// Backends: NCCL for a group whose section has GPUs (and for a link whose two
// sections do) when NCCL is built and a CUDA device is usable; MPI otherwise
// or when MAESTRO_COMM_BACKEND=mpi. NCCL unique ids travel through the PMIx
// store (key "maestro/nccl/<group>", published by the group's first rank).
//
// Link tags (MPI): tag = 2 * micro_batch + direction (0 = activations down,
// 1 = gradients up), so the activation of micro-batch m never matches the
// gradient of m or another micro-batch's message, whatever the issue order.
// Each link has its own communicator, so edges never share a tag space; MPI's
// non-overtaking rule orders messages of one tag. NCCL has no tags: on an
// NCCL link both ends must issue sends and receives in the same order.
//
// May call: base, plan, mpi_backend, nccl_backend, pmix_store.
// Thread safety: one thread. REQUIRES: destroyed before the MpiSession.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "launcher/comm.h"
#include "launcher/launch_env.h"
#include "launcher/mpi_backend.h"
#include "launcher/pmix_store.h"
#include "plan/plan.h"

namespace maestro::launcher {

enum class BackendChoice { kAuto, kMpi, kNccl };

struct CommOptions {
  Millis timeout{60000};  // every operation's deadline
  BackendChoice backend = BackendChoice::kAuto;
};

// Overrides `defaults` with MAESTRO_COMM_TIMEOUT_S (seconds, > 0, may be
// fractional) and MAESTRO_COMM_BACKEND (auto | mpi | nccl).
StatusOr<CommOptions> CommOptionsFromEnv(const EnvLookup& env, CommOptions defaults);

// True when this build has the NCCL backend (MAESTRO_HAVE_NCCL).
bool NcclBuilt();

// Which sections' groups talk NCCL (true) rather than MPI: the sections the
// plan places on GPUs (placement.gpus_per_task > 0) when `choice` is not kMpi,
// this build has NCCL and `gpus_usable`: in Create the job-wide vote that
// every GPU rank sees a CUDA device; in `maestro run --dry-run` the GPUs it
// compiled for. The one home of the rule; pure.
std::vector<bool> NcclSections(const plan::Plan& plan, BackendChoice choice, bool gpus_usable);
// Edge `edge`'s links talk NCCL when both its sections do (NcclSections);
// otherwise MPI, through host memory on a GPU rank (runtime/device_staging.h).
bool NcclLink(const plan::Plan& plan, const std::vector<bool>& nccl_sections, int edge);

// "dp group of section 'llm' (ranks 2,4)"
std::string GroupDescription(const plan::Plan& plan, int section, plan::GroupKind kind, const std::vector<int>& ranks);
// "link 1 of edge 'vit' -> 'llm' (image_embeddings): vit dp 0 (rank 0) <-> llm dp 1 (rank 3)"
std::string LinkDescription(const plan::Plan& plan, const plan::Link& link, int index_in_edge);

// One cross-section link seen from one of its two ranks. Its backend is a
// 2-rank group: index 0 = the upstream rank, 1 = the downstream rank.
class LinkChannel {
 public:
  enum class Direction { kDown = 0, kUp = 1 };  // activations down, gradients up
  static int Tag(Direction direction, int micro_batch) { return 2 * micro_batch + static_cast<int>(direction); }

  LinkChannel(plan::Link link, int index_in_edge, bool is_upstream, std::unique_ptr<Backend> backend);

  const plan::Link& link() const { return link_; }
  int index_in_edge() const { return index_in_edge_; }
  bool is_upstream() const { return is_upstream_; }
  int peer_rank() const { return is_upstream_ ? link_.down_rank : link_.up_rank; }
  Backend& backend() { return *backend_; }

  // buf: the edge's activation (or its gradient) for one micro-batch.
  StatusOr<WorkPtr> SendActivation(Buffer buf, int micro_batch);  // REQUIRES: is_upstream()
  StatusOr<WorkPtr> RecvActivation(Buffer buf, int micro_batch);  // REQUIRES: !is_upstream()
  StatusOr<WorkPtr> SendGradient(Buffer buf, int micro_batch);    // REQUIRES: !is_upstream()
  StatusOr<WorkPtr> RecvGradient(Buffer buf, int micro_batch);    // REQUIRES: is_upstream()

 private:
  StatusOr<WorkPtr> Transfer(bool send, Direction direction, Buffer buf, int micro_batch, bool need_upstream);

  plan::Link link_;
  int index_in_edge_;
  bool is_upstream_;
  std::unique_ptr<Backend> backend_;
};

class Communicators {
 public:
  // Collective over the whole job: every rank calls it with the same plan.
  static StatusOr<std::unique_ptr<Communicators>> Create(const plan::Plan& plan, const RankPlace& place,
                                                         MpiSession& mpi, PmixStore& store, const CommOptions& options);

  Backend& world() { return *world_; }
  Backend& group(plan::GroupKind kind) { return *groups_[static_cast<size_t>(kind)]; }
  std::vector<LinkChannel>& links() { return links_; }

 private:
  Communicators() = default;
  std::unique_ptr<Backend> world_;
  std::array<std::unique_ptr<Backend>, plan::kGroupKinds> groups_;  // indexed by plan::GroupKind
  std::vector<LinkChannel> links_;
};

// Whether a CUDA device is usable here (false when NCCL is not built).
bool CudaDeviceAvailable();

}  // namespace maestro::launcher
