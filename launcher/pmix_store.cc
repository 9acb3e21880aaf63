// SPDX-License-Identifier: Apache-2.0
#include "launcher/pmix_store.h"

#include <fmt/format.h>
#include <pmix.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "launcher/checks.h"

namespace maestro::launcher {
namespace internal {
std::string PmixErrorString(int code) {
  return PMIx_Error_string(static_cast<pmix_status_t>(code));
}
}  // namespace internal

namespace {
// Whole seconds for PMIX_TIMEOUT, at least 1.
int TimeoutSeconds(Millis timeout) {
  const auto s = (timeout.count() + 999) / 1000;
  return static_cast<int>(s < 1 ? 1 : s);
}

pmix_proc_t Proc(const std::string& nspace, uint32_t rank) {
  pmix_proc_t p;
  PMIX_PROC_CONSTRUCT(&p);
  PMIX_LOAD_PROCID(&p, nspace.c_str(), rank);
  return p;
}
}  // namespace

StatusOr<std::unique_ptr<PmixStore>> PmixStore::Connect() {
  std::unique_ptr<PmixStore> store(new PmixStore());
  pmix_proc_t me;
  PMIX_PROC_CONSTRUCT(&me);
  const pmix_status_t prc = PMIx_Init(&me, nullptr, 0);
  if (prc == PMIX_ERR_UNREACH || prc == PMIX_ERR_INIT) {
    return Status::Unavailable(fmt::format(
        "PMIx_Init failed ({}): maestro-worker was started outside a PMIx launcher. Start it through "
        "`maestro run spec.toml` (mpirun on this machine), `mpirun -np <world size> maestro-worker plan.json`, "
        "or inside the generated batch job (`sbatch job.sbatch`, which runs `srun --mpi=pmix "
        "--het-group=0-K maestro-worker plan.json`)",
        PMIx_Error_string(prc)));
  }
  PMIX_CHECK(prc);
  store->initialized_ = true;
  store->nspace_ = me.nspace;
  store->rank_ = static_cast<int>(me.rank);

  pmix_proc_t job = Proc(store->nspace_, PMIX_RANK_WILDCARD);
  pmix_value_t* value = nullptr;
  PMIX_CHECK(PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &value));
  store->job_size_ = static_cast<int>(value->data.uint32);
  PMIX_VALUE_RELEASE(value);
  return store;
}

PmixStore::~PmixStore() {
  if (initialized_) PMIx_Finalize(nullptr, 0);
}

Status PmixStore::Put(const std::string& key, const std::string& value) {
  if (key.size() >= PMIX_MAX_KEYLEN) {
    return Status::InvalidArgument(fmt::format("PMIx key '{}' is longer than {} bytes", key, PMIX_MAX_KEYLEN - 1));
  }
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_BYTE_OBJECT;
  // PMIx_Put copies the value; the byte object only borrows `value` here.
  v.data.bo.bytes = const_cast<char*>(value.data());
  v.data.bo.size = value.size();
  PMIX_CHECK(PMIx_Put(PMIX_GLOBAL, key.c_str(), &v));
  return Status::Ok();
}

Status PmixStore::Commit() {
  PMIX_CHECK(PMIx_Commit());
  return Status::Ok();
}

Status PmixStore::Fence(Millis timeout) {
  pmix_info_t info[2];
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  bool collect = true;
  int seconds = TimeoutSeconds(timeout);
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
  const pmix_status_t prc = PMIx_Fence(nullptr, 0, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (prc == PMIX_ERR_TIMEOUT) {
    return Status::Timeout(fmt::format(
        "rank {}: PMIx fence over all {} ranks did not complete within {} s: a rank died or hangs before it", rank_,
        job_size_, seconds));
  }
  PMIX_CHECK(prc);
  return Status::Ok();
}

StatusOr<std::string> PmixStore::Get(int rank, const std::string& key, Millis timeout) {
  if (rank < 0 || rank >= job_size_) {
    return Status::InvalidArgument(
        fmt::format("PMIx get of '{}' from rank {}: the job has {} ranks", key, rank, job_size_));
  }
  // Once the job's data were exchanged (MPI_Init fences), a Get for a key the
  // owner has not committed yet returns NOT_FOUND at once instead of waiting.
  // So: ask with PMIX_GET_REFRESH_CACHE (re-read the owner's latest commit),
  // and poll with a growing pause until the deadline.
  pmix_proc_t proc = Proc(nspace_, static_cast<uint32_t>(rank));
  pmix_info_t info[2];
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  int attempt_seconds = 1;
  bool refresh = true;
  PMIX_INFO_LOAD(&info[0], PMIX_TIMEOUT, &attempt_seconds, PMIX_INT);
  PMIX_INFO_LOAD(&info[1], PMIX_GET_REFRESH_CACHE, &refresh, PMIX_BOOL);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  auto pause = std::chrono::microseconds(500);
  pmix_value_t* value = nullptr;
  pmix_status_t prc = PMIX_SUCCESS;
  for (;;) {
    prc = PMIx_Get(&proc, key.c_str(), info, 2, &value);
    if (prc != PMIX_ERR_NOT_FOUND && prc != PMIX_ERR_TIMEOUT) break;
    if (std::chrono::steady_clock::now() + pause >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(50));
  }
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (prc == PMIX_ERR_TIMEOUT || prc == PMIX_ERR_NOT_FOUND) {
    return Status::Timeout(
        fmt::format("rank {}: key '{}' from rank {} did not arrive through PMIx within {:.1f} s "
                    "(rank {} died, hangs, or never published it)",
                    rank_, key, rank, static_cast<double>(timeout.count()) / 1000.0, rank));
  }
  PMIX_CHECK(prc);
  std::string out;
  if (value->type == PMIX_BYTE_OBJECT) {
    out.assign(value->data.bo.bytes, value->data.bo.size);
  } else if (value->type == PMIX_STRING) {
    out = value->data.string;
  } else {
    const int type = static_cast<int>(value->type);
    PMIX_VALUE_RELEASE(value);
    return Status::Internal(fmt::format("PMIx key '{}' from rank {} has type {}, not bytes", key, rank, type));
  }
  PMIX_VALUE_RELEASE(value);
  return out;
}

}  // namespace maestro::launcher
