// SPDX-License-Identifier: Apache-2.0
// maestro_slurm_testutil: drives the local Slurm cluster of
// slurm/local-cluster.sh from GoogleTest tests. It submits batch scripts with
// sbatch, waits for a job by polling `scontrol show job` (the cluster has no
// accounting daemon, so sacct does not work), and reads a job's output file.
//
// Use from a test folder (see docs/local-cluster.md):
//   maestro_gtest(my_slurm_test SOURCES my_slurm_test.cc
//                 DEPS maestro_slurm_testutil
//                 LABELS "slurm;<module>" FIXTURES slurm_cluster
//                 ENVIRONMENT "MAESTRO_SLURM_DIR=${MAESTRO_SLURM_CLUSTER_DIR}")
//   ...
//   auto cluster = maestro::testing::LocalSlurmCluster::FromEnvironment();
//   ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
//   auto id = cluster->Submit(script_path);
//   auto job = cluster->WaitForJob(*id, std::chrono::seconds(60));
//   EXPECT_EQ(job->state(), "COMPLETED");
//
// The cluster directory comes from MAESTRO_SLURM_DIR, else the build's
// default (<build>/slurm-cluster, where the `slurm_cluster` fixture starts
// it), so the ENVIRONMENT line above is optional.
//
// May call: maestro_base, POSIX (posix_spawn, poll, waitpid), Slurm's client
// commands (sbatch, scontrol, scancel, squeue) and slurm/local-cluster.sh.
// Thread safety: LocalSlurmCluster is an immutable value; its const methods
// may be called from several threads at once (each runs its own children).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace maestro::testing {

// What a finished child process left: its exit status (128 + N when killed by
// signal N) and everything it wrote to stdout and stderr, interleaved.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};

// Runs argv[0] (looked up in PATH; no shell) with `extra_env` ("KEY=VALUE"
// entries that override the inherited environment). Kills the child and
// returns Timeout when it runs longer than `timeout`.
StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                                   std::chrono::milliseconds timeout);

// One job record of `scontrol show job -o`: a plain job has one, a
// heterogeneous job one per component (component 0 first).
struct SlurmJobComponent {
  std::string job_id;  // JobId (a component's own id)
  int het_offset = 0;  // HetJobOffset; 0 for a plain job
  std::string state;   // JobState, e.g. RUNNING, COMPLETED, FAILED
  std::string reason;  // Reason, e.g. NonZeroExitCode, Priority
  int exit_code = 0;   // ExitCode=<code>:<signal>
  int exit_signal = 0;
  int restarts = 0;                           // Restarts (how often it was requeued)
  std::string node_list;                      // NodeList, e.g. node[1-2]
  std::string std_out;                        // StdOut path, %j already expanded
  std::map<std::string, std::string> fields;  // every Key=Value of the record
};

struct SlurmJobInfo {
  std::string job_id;                         // the id asked for (the leader's id for a hetjob)
  std::vector<SlurmJobComponent> components;  // never empty

  // COMPLETED when every component completed, else the state of the first
  // component that did not (e.g. FAILED, TIMEOUT, RUNNING).
  std::string state() const;
  // The largest exit code of the components.
  int exit_code() const;
  // Every component is in a terminal state (see IsTerminalJobState).
  bool finished() const;
};

// COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED, BOOT_FAIL,
// DEADLINE, OUT_OF_MEMORY. (COMPLETING, PENDING, RUNNING, REQUEUED... are not.)
bool IsTerminalJobState(std::string_view state);

// Parses the output of `scontrol show job -o <id>` (one record per line).
StatusOr<SlurmJobInfo> ParseScontrolShowJob(const std::string& job_id, const std::string& text);

class LocalSlurmCluster {
 public:
  // MAESTRO_SLURM_DIR, else the build's default cluster directory. Fails with
  // a message saying how to start a cluster when DIR holds none.
  static StatusOr<LocalSlurmCluster> FromEnvironment();
  explicit LocalSlurmCluster(std::string dir);

  const std::string& dir() const { return dir_; }
  std::string slurm_conf() const { return dir_ + "/etc/slurm.conf"; }
  // slurm/local-cluster.sh of the source tree this library was built from.
  static std::string ScriptPath();
  // The environment every command here gets: SLURM_CONF, and Open MPI kept on
  // loopback and off shared memory (all "nodes" are this one machine; jobs
  // inherit this environment from sbatch). Same as `local-cluster.sh env`.
  std::vector<std::string> Environment() const;

  // Runs a command (e.g. {"scontrol", "show", "nodes"}) against this cluster.
  StatusOr<CommandResult> Run(const std::vector<std::string>& argv,
                              std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;
  // Runs `local-cluster.sh <subcommand> DIR <args...>`.
  StatusOr<CommandResult> RunScript(const std::string& subcommand, const std::vector<std::string>& args = {},
                                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;

  // sbatch [sbatch_args...] script_path; returns the job id (for a hetjob the
  // leader's id, which `scontrol show job` expands to all components).
  StatusOr<std::string> Submit(const std::string& script_path, const std::vector<std::string>& sbatch_args = {}) const;
  // NotFound when Slurm no longer (or never) knew the job.
  StatusOr<SlurmJobInfo> ShowJob(const std::string& job_id) const;
  // Polls ShowJob until `done(job)` holds; Timeout (with the last state seen)
  // when it does not within `timeout`.
  StatusOr<SlurmJobInfo> WaitForJobState(const std::string& job_id,
                                         const std::function<bool(const SlurmJobInfo&)>& done,
                                         std::chrono::milliseconds timeout) const;
  // Waits until the job finished (every component terminal).
  StatusOr<SlurmJobInfo> WaitForJob(const std::string& job_id, std::chrono::milliseconds timeout) const;
  // The content of the job's StdOut file (component 0's for a hetjob).
  StatusOr<std::string> ReadJobOutput(const SlurmJobInfo& job) const;

  // scancel [--signal=SIG] <id>; with a signal the job goes on running.
  Status Cancel(const std::string& job_id, const std::string& signal = "") const;
  // scontrol requeue <id>, then makes it eligible at once (a requeued job
  // otherwise waits ~120 s before it may start again).
  Status Requeue(const std::string& job_id) const;
  // scontrol update JobId=<id> StartTime=now (e.g. after a preemption).
  Status MakeEligibleNow(const std::string& job_id) const;

 private:
  std::string dir_;
};

}  // namespace maestro::testing
