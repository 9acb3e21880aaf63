// SPDX-License-Identifier: Apache-2.0
// maestro-het-probe: a tiny MPI program run by the Slurm smoke test as the
// step of a heterogeneous job (`srun --mpi=pmix --het-group=0,1 ...`). Every
// rank prints ONE line of key=value pairs that the test parses:
//
//   probe world=5 rank=3 procid=3 component=1 component_tasks=3 ranksum=10
//         gpus=0,1,2 ngpus=3 node=node2
//
// world/rank come from MPI_COMM_WORLD; procid from SLURM_PROCID; component is
// derived from SLURM_PROCID and SLURM_NTASKS_HET_GROUP_<n> (Slurm 22.05 sets
// no SLURM_HET_JOB_OFFSET in tasks); gpus are the task's visible GPUs
// (CUDA_VISIBLE_DEVICES, else SLURM_STEP_GPUS); ranksum is an MPI_Allreduce
// of the ranks, which proves that the ranks of all components can talk.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// -1 when unset or not a number.
long EnvNumber(const std::string& name) {
  const std::string v = Env(name.c_str());
  if (v.empty()) return -1;
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  return (end != nullptr && *end == '\0') ? n : -1;
}

// The het component of global task `procid`: component k holds the tasks
// [sum_{j<k} ntasks_j, sum_{j<=k} ntasks_j). Writes the component's task
// count to *component_tasks. Returns -1 when the variables are missing.
long HetComponent(long procid, long* component_tasks) {
  const long het_size = EnvNumber("SLURM_HET_SIZE");
  *component_tasks = -1;
  if (het_size <= 0 || procid < 0) return -1;
  long first = 0;
  for (long k = 0; k < het_size; ++k) {
    const long ntasks = EnvNumber("SLURM_NTASKS_HET_GROUP_" + std::to_string(k));
    if (ntasks < 0) return -1;
    if (procid < first + ntasks) {
      *component_tasks = ntasks;
      return k;
    }
    first += ntasks;
  }
  return -1;
}

long CountList(const std::string& list) {
  if (list.empty() || list == "NoDevFiles") return 0;
  long n = 1;
  for (char c : list) n += (c == ',') ? 1 : 0;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    std::fprintf(stderr, "maestro-het-probe: MPI_Init failed\n");
    return 2;
  }
  int world = 0;
  int rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  long my_rank = rank;
  long rank_sum = -1;
  MPI_Allreduce(&my_rank, &rank_sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);

  const long procid = EnvNumber("SLURM_PROCID");
  long component_tasks = -1;
  const long component = HetComponent(procid, &component_tasks);
  std::string gpus = Env("CUDA_VISIBLE_DEVICES");
  if (gpus.empty()) gpus = Env("SLURM_STEP_GPUS");
  const std::string node = Env("SLURMD_NODENAME");

  std::printf(
      "probe world=%d rank=%d procid=%ld component=%ld component_tasks=%ld ranksum=%ld gpus=%s ngpus=%ld node=%s\n",
      world, rank, procid, component, component_tasks, rank_sum, gpus.empty() ? "-" : gpus.c_str(), CountList(gpus),
      node.empty() ? "-" : node.c_str());
  std::fflush(stdout);
  MPI_Finalize();
  // Slurm 22.05's srun stops the PMIx abort agent once per het component,
  // without a lock (pmixp_abort_agent_stop: two threads may pthread_join the
  // same thread), and hangs now and then when the components' tasks end at
  // the same moment. Ending component k's tasks k * 500 ms later keeps those
  // calls apart. Later Slurm releases fixed it (a counted, locked start/stop).
  if (component > 0) usleep(static_cast<useconds_t>(component) * 500000u);
  return 0;
}
