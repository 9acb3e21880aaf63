// SPDX-License-Identifier: Apache-2.0
// The runtime's multi-rank test harness (library maestro_runtime_testutil,
// docs/testing.md): what the mpirun tests of tests/runtime had each written
// for themselves.
//  - running a plan: maestro-worker ranks under mpirun (RunWorkers), the
//    one-process reference (RunReference); the built tools (RunBuiltTool,
//    RunMaestro);
//  - running the current test as the ranks of an mpirun job of its own
//    binary (IsMpirunRank, RunThisTestUnderMpirun; mpi_world.h adds the
//    MPI world group);
//  - comparing runs: every step's loss against another run's within a
//    relative tolerance (ExpectLossesNear), a plan's run against the
//    reference (ExpectRunEqualsReference) and against the same training laid
//    out another way (ExpectRunEqualsReferenceAndOther), a run stopped after
//    a checkpoint and resumed against an uninterrupted one
//    (ExpectStopAndResumeLossesEqual, ExpectSameCheckpointWeights,
//    ExpectStopAndResumeCheckpointsEqual; with a teacher running ahead:
//    ExpectRunAheadResumeComputesEachRowOnce, ExpectWholeAndSplitConsumed);
//  - reading a run back: numbers a worker logged (LoggedNumber,
//    ParseRunAheadLine), the samples its index consumed (ConsumedSamples), a
//    section's weights against another run's (ExpectSameSectionWeights);
//  - killing a rank's worker once the run has made progress
//    (WaitForWorkerOfRank, RunAndKillRank) and what the job must then do
//    (ExpectKilledRankEndedTheJob);
//  - shaping a compiled example plan before PlaceOnThisMachine (local_plan.h):
//    a section's TP/PP/CP/DP and micro-batch (SetDegrees), the tiny KD's
//    sections (ShapeTinyKd, StudentIntoTeacherEdge) and its student on the
//    KD loss (UseKdLoss), the one section of a fused plan (TheFusedSection),
//    a MoE student (UseTinyMoe), a JSONL manifest as the data
//    (UseImageManifest); and a generated JSONL manifest of PNG/JPEG images
//    (WriteImageManifest).
// May call: plan/, datalayer/ (the sample index), the launcher's test helpers
// (tests/launcher/run_util.h) and run_dir_util.h. No torch here: the
// checkpoint weights' comparison is tests/runtime/checkpoint_weights.h.
// A test that includes it links maestro_runtime_testutil and defines
// MAESTRO_MPIRUN (run_util.h's MpirunArgs), as maestro_runtime_mpi_test()
// in tests/runtime/CMakeLists.txt does for every mpirun test.
// GoogleTest assertions inside a helper end that helper only: a caller that
// must stop on them wraps the call in ASSERT_NO_FATAL_FAILURE.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "datalayer/checkpoint_store.h"
#include "plan/plan.h"
#include "tests/launcher/run_util.h"

namespace maestro::runtime_testing {

using launcher::testing::RunResult;

// A run's loss by step (run_dir_util.h: Losses).
using StepLosses = std::map<int64_t, double>;

// The built maestro-worker.
std::string WorkerBinary();

// The built maestro CLI.
std::string MaestroBinary();

// The built `tool` (bin/<tool>: maestro, maestro-compile, maestro-worker)
// with `args`, `env` added to its environment, under `timeout -s KILL
// <kill_after_s>` when kill_after_s > 0.
RunResult RunBuiltTool(const std::string& tool, const std::vector<std::string>& args,
                       const std::vector<std::pair<std::string, std::string>>& env = {}, int kill_after_s = 0);

// RunBuiltTool of maestro.
RunResult RunMaestro(const std::vector<std::string>& args,
                     const std::vector<std::pair<std::string, std::string>>& env = {}, int kill_after_s = 0);

// How RunWorkers starts the ranks beyond the plan and the flags.
struct WorkerOptions {
  bool per_step_lines = false;                                 // false: --no-progress
  std::string comm_timeout_s = "60";                           // MAESTRO_COMM_TIMEOUT_S
  std::vector<std::pair<std::string, std::string>> extra_env;  // more environment (test hooks)
};

// `p.world_size()` maestro-worker ranks under mpirun (MpirunArgs) running the
// plan at `plan_path` in `run_dir`: --no-eval [--no-progress] --run-dir
// <run_dir> <extra_flags...> <plan_path>. Each rank runs torch on one thread
// (MAESTRO_THREADS_PER_RANK=1), as RunReference does: runs of different rank
// counts are compared to 1e-5, and a one-rank run on two threads reduces in
// another order (measured: a fused PP 2 run's ViT weights 4.2e-5 from its
// PP 1 run's on two threads, within 1e-5 on one).
RunResult RunWorkers(const plan::Plan& p, const std::string& plan_path, const std::string& run_dir,
                     const std::vector<std::string>& extra_flags = {}, const WorkerOptions& options = {});

// The one-process reference (maestro-worker --reference --no-eval --run-dir
// <run_dir> <extra_flags...> <plan_path>), on one torch thread.
RunResult RunReference(const std::string& plan_path, const std::string& run_dir,
                       const std::vector<std::string>& extra_flags = {});

// True in a process mpirun started (OMPI_COMM_WORLD_SIZE is set): one rank
// of the job RunThisTestUnderMpirun runs.
bool IsMpirunRank();

// Runs the current test as `ranks` processes under mpirun (MpirunArgs: this
// binary with a gtest filter naming the test, MAESTRO_COMM_TIMEOUT_S=60) and
// expects the job to exit 0 and every rank to pass the test. A test whose
// body is one rank's part starts with
//   if (!IsMpirunRank()) return RunThisTestUnderMpirun(2);
void RunThisTestUnderMpirun(int ranks);

// Every step of `got` finite and within `relative` x |want| of `want`'s loss at
// that step (fatal when `want` lacks the step); messages say `what`, the
// step and `against` (e.g. " vs the reference").
void ExpectLossesNear(const std::string& what, const StepLosses& got, const StepLosses& want, double relative = 1e-5,
                      const std::string& against = "");

// The last step's loss below the first's: a run that trained nothing would
// also "agree" with its reference.
void ExpectLossFalls(const std::string& what, const StepLosses& losses);

// What ExpectRunEqualsReference ran: the outputs and the losses.
struct RunAndReference {
  std::string plan_path;
  RunResult run, reference;
  StepLosses run_losses, reference_losses;
};

// Writes `p` to `dir`/plan.json, runs it under mpirun in `dir`/`run_name`
// and the reference in `dir`/reference; fatal unless both exit 0, the run
// logged p.data.steps losses and the reference as many; then every step's
// loss within 1e-5 relative of the reference's (ExpectLossesNear) and the
// loss falls (ExpectLossFalls).
RunAndReference ExpectRunEqualsReference(const std::string& what, const plan::Plan& p, const std::string& dir,
                                         const std::string& run_name = "run", const WorkerOptions& options = {});

// What ExpectRunEqualsReferenceAndOther ran: the outputs and the losses.
struct ThreeRuns {
  RunResult run, other, reference;
  StepLosses run_losses, other_losses, reference_losses;
};

// `p` against the reference and against `other`, the same training laid
// out another way (at CP 1, at PP 1, at ZeRO stage 0): writes `p` to `dir`
// and `other` to `dir`/`other_name`, runs `p` under mpirun in `dir`/run,
// `other` in `dir`/`other_name`/run and the reference of `p` in
// `dir`/reference; fatal unless each exits 0, `p`'s run logged p.data.steps
// losses and the other two as many; then every step's loss within 1e-5
// relative of the reference's and of `other`'s (ExpectLossesNear, fatal;
// `against_other` names it: " vs cp 1"), and the loss falls.
ThreeRuns ExpectRunEqualsReferenceAndOther(const std::string& what, const plan::Plan& p, const plan::Plan& other,
                                           const std::string& dir, const std::string& other_name,
                                           const std::string& against_other);

// What ExpectStopAndResumeLossesEqual ran: the uninterrupted run, the
// stopped one and its resumption.
struct StopAndResumeRuns {
  RunResult whole, first, second;
  StepLosses whole_losses, split_losses;
};

// Writes `p` to `dir`, runs it uninterrupted in `dir`/whole and, in
// `dir`/split, with --stop-after-steps `stop_after` (fatal unless it exits
// 85, the requeue code) and again (resumed; fatal unless it exits 0). Fatal
// unless both logged p.data.steps losses; each step's loss equal bit for bit.
StopAndResumeRuns ExpectStopAndResumeLossesEqual(const std::string& what, const plan::Plan& p, const std::string& dir,
                                                 int64_t stop_after, const WorkerOptions& options = {});

// What ExpectSameCheckpointWeights checks beyond the weights.
struct CheckpointChecks {
  bool optimizer_present = false;      // every entry of `y` holds optimizer state
  bool optimizer_bytes_equal = false;  // ... the same bytes as `x`'s (AdamW's moments and step counts)
};

// Two checkpoints (an uninterrupted and a resumed run's): the same entries
// (fatal otherwise), each with the same weights' bytes, plus `checks`.
void ExpectSameCheckpointWeights(const std::string& what, const datalayer::CheckpointData& x,
                                 const datalayer::CheckpointData& y, const CheckpointChecks& checks = {});

// ExpectStopAndResumeLossesEqual (fatal where it fails), then the last
// checkpoints of the uninterrupted and the resumed run: both of step
// `last_step`, whose pieces of the tensors named `prefix`... (e.g.
// "student/adamw.": the student's moments) come from `writer_files` rank
// files in each (every TP slice, stage or ZeRO-1 shard written by its own
// rank; fatal otherwise), with the same weights (ExpectSameCheckpointWeights
// with `checks`).
void ExpectStopAndResumeCheckpointsEqual(const std::string& what, const plan::Plan& p, const std::string& dir,
                                         int64_t stop_after, int64_t last_step, const std::string& prefix,
                                         size_t writer_files, const CheckpointChecks& checks);

// Section `section`'s weights in the last checkpoints of `run_a` and `run_b`
// are the same bytes (fatal when either lacks the section).
void ExpectSameSectionWeights(const std::string& what, const std::string& run_a, const std::string& run_b,
                              const std::string& section);

// The first number the worker logged after `label` (e.g. "computed "), -1
// when absent; `count`: how many times `label` appears.
int64_t LoggedNumber(const std::string& output, const std::string& label, int* count = nullptr);

// A frozen section's last line about its run-ahead (runtime/run_ahead.h):
// "... batch(es): <steps_ahead> ... at most <most_rows> ... (bound <bound>";
// -1 each when absent (run_ahead 0).
struct RunAheadLine {
  int64_t steps_ahead = -1, most_rows = -1, bound = -1;
};
RunAheadLine ParseRunAheadLine(const std::string& output);

// The samples `run_dir`'s index consumed over epochs 0 .. `epochs` - 1; -1
// (and a failure) when the index cannot be read.
int64_t ConsumedSamples(const std::string& run_dir, int64_t epochs);

// A KD whose teacher runs ahead, stopped after `stop_after` steps and
// resumed (ExpectStopAndResumeLossesEqual; fatal where it fails): the
// student's weights the same as the uninterrupted run's; the teacher
// computed `rows_before_stop` rows before the stop and, over both starts,
// as many as the uninterrupted run (the rows computed ahead before the stop
// are read back, not computed again); every sample consumed once
// (ExpectWholeAndSplitConsumed over p.data.steps). Returns the runs.
StopAndResumeRuns ExpectRunAheadResumeComputesEachRowOnce(const std::string& what, const plan::Plan& p,
                                                          const std::string& dir, int64_t stop_after,
                                                          int64_t rows_before_stop, const WorkerOptions& options = {});

// The tiny KD's edge from its student into its teacher (the teacher then
// has an upstream section).
plan::EdgePlan StudentIntoTeacherEdge();

// The uninterrupted and the stopped-and-resumed run of `dir`
// (ExpectStopAndResumeLossesEqual's whole and split) each consumed
// `samples` samples over their first `epochs` epochs: every sample once.
void ExpectWholeAndSplitConsumed(const std::string& dir, int64_t epochs, int64_t samples);

// Polls every `poll` (a file and /proc, not synchronization) until
// `run_dir`'s metrics.jsonl has at least `steps` losses and the
// maestro-worker of world rank `rank` running `plan_path` is found; its pid,
// or -1 when `within` passes first.
pid_t WaitForWorkerOfRank(const std::string& plan_path, int rank, const std::string& run_dir, size_t steps,
                          std::chrono::seconds within, std::chrono::milliseconds poll);

// What RunAndKillRank saw: the job's result, the pid it killed (-1: the
// rank's worker was never found, nothing was killed) and the seconds from
// the kill to the job's end.
struct KilledRun {
  RunResult result;
  pid_t pid = -1;
  double seconds_after_kill = 0;
};

// Runs `p` under mpirun in `run_dir` (RunWorkers) and, once
// WaitForWorkerOfRank finds world rank `rank`'s worker after `steps` logged
// losses, kills it with SIGKILL; returns when the job has ended.
KilledRun RunAndKillRank(const plan::Plan& p, const std::string& plan_path, const std::string& run_dir, int rank,
                         size_t steps, std::chrono::seconds within, std::chrono::milliseconds poll,
                         const WorkerOptions& options = {});

// A run whose rank `victim` was killed (RunAndKillRank): fatal unless the
// rank was found and killed (`no_progress` says why not); the job failed,
// within the communication timeout (60 s) of the kill, mpirun naming the
// killed rank ("process rank <victim>").
void ExpectKilledRankEndedTheJob(const KilledRun& killed, int victim, const std::string& no_progress);

// A section's parallel degrees and micro-batch as a test sets them; the rest
// of its config (ZeRO stage, EP, recomputation, pp_layers) stays as compiled.
struct SectionDegrees {
  int tp = 1, pp = 1, cp = 1, dp = 1, micro_batch = 4;
};
void SetDegrees(plan::SectionPlan& section, const SectionDegrees& degrees);

// The tiny KD's student trains on the KD loss (alpha 0.5, temperature 2)
// when its spec gave it another.
void UseKdLoss(plan::SectionPlan& student);

// A small Megatron corpus (uint16, 120 documents of 40-69 tokens counting
// up from `first_token` modulo 250: learnable) under `dir`; returns its
// prefix for [data] corpus. About 100 packed samples of the tiny specs.
std::string WriteCountingCorpus(const std::string& dir, int64_t first_token);

// The tiny KD (specs/tiny_kd.toml compiled sectioned: CompiledExamplePlan)
// as the mpirun tests shape it: both sections' initial weights from the
// seed (init_from cleared), the student at `student` with ZeRO stage
// `student_zero_stage`, the frozen teacher at `teacher` with ZeRO stage 0.
// Returns the student (nullptr, and a failure, when `p` has none); the
// caller shapes it further, then places the plan (PlaceOnThisMachine).
plan::SectionPlan* ShapeTinyKd(plan::Plan& p, const SectionDegrees& student, const SectionDegrees& teacher,
                               int student_zero_stage = 0);

// The tiny KD student (a dense decoder) made a MoE of 4 experts, top 2, each
// of FFN 64, with the load-balancing term's coefficient `aux_loss_coef`;
// `qwen2_shape`: plus a shared expert of FFN 96 and the top 2 weights as they
// are (Qwen2-MoE), else renormalized (Mixtral).
void UseTinyMoe(plan::ModelDesc& model, bool qwen2_shape, double aux_loss_coef);

// The plan reads the JSONL manifest at `manifest` (the data set cleared):
// `image_token` the placeholder id, up to 2 images per sample, `seq_len`
// tokens a sample, `global_batch` samples a step.
void UseImageManifest(plan::Plan& p, const std::string& manifest, int64_t image_token, int64_t seq_len,
                      int64_t global_batch);

// The one section of a plan compiled --grouping fused (a failure, and
// nullptr, when it has another count or that section is not fused).
plan::SectionPlan* TheFusedSection(plan::Plan& p);

// What WriteImageManifest's samples refer to: PNG and JPEG images
// alternating, each sample with an "id" (the default); or PNG images only
// and no ids.
enum class ImageManifestKind { kPngAndJpegWithIds, kPngOnly };

// <dir>/img/<k>.png (28x28 gray) and <dir>/img/<k>.jpg (20x36 RGB; not for
// kPngOnly), k < 6, and <dir>/train.jsonl: sample i ("id": "s<i>" but for
// kPngOnly) has i % 3 images (PNG and JPEG alternating, or PNG), each as
// `placeholders_per_image` x `image_token` then a word naming it, then
// counting text; then `extra_lines` as given. Returns the manifest's path.
std::string WriteImageManifest(const std::string& dir, int samples, int64_t placeholders_per_image, int64_t image_token,
                               const std::vector<std::string>& extra_lines = {},
                               ImageManifestKind kind = ImageManifestKind::kPngAndJpegWithIds);

}  // namespace maestro::runtime_testing
