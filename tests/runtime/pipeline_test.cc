// SPDX-License-Identifier: Apache-2.0
// Pipeline parallelism of decoder sections (runtime/parallel/pipeline_stages.h,
// runtime/parallel/pipeline_parallel.h), labels mpi;runtime:
//  - the stage split (even, the first stages take the remainder) and each
//    stage's op order: 1F1B's warm-up of P - 1 - s forwards, the last stage
//    in the program's order, no run-ahead behind a training producer, and,
//    simulated over random programs, no stage ever waits on a neighbour
//    that waits on it (no deadlock);
//  - maestro-worker ranks under mpirun train the tiny KD student split into
//    pipeline stages: 3 layers over 2 stages (uneven), 3 stages with tied
//    embeddings (a middle stage relays the teacher's rows; the tied
//    embedding's gradient is summed between the first and last stages),
//    TP 2 x PP 2, PP 2 x DP 2 (DP all-reduce and ZeRO-1 per stage), and a
//    2-stage frozen teacher streaming into
//    a 2-stage student: every step's loss equals the one-process
//    reference's within 1e-5 relative, the final weights (gathered from the
//    stages into one checkpoint) the unstaged run's within 1e-5 and the
//    reference's as closely as the unstaged run's;
//  - under bf16 autocast a pipelined run's losses equal the unpipelined
//    bf16 run's within 1e-5;
//  - a pipelined run stopped after a checkpoint and resumed ends with the
//    weights, per-stage optimizer states and losses of an uninterrupted
//    run, bit for bit;
//  - the plan's pp_layers split (1 + 2 layers, the even split's mirror)
//    is what the stages hold (their log lines) and equals the reference;
//  - a stage killed (SIGKILL) mid-run ends the job within the
//    communication timeout, mpirun naming the dead rank: no hang; a stage
//    that hangs (alive, silent: MAESTRO_TEST_HANG_BEFORE_STAGE_SEND) ends
//    it within comm_timeout_s with the launcher's error naming its rank.
// One torch TU (the checkpoints' weights are read back with torch).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compile.h"
#include "plan/model_desc.h"
#include "plan/plan.h"
#include "runtime/models/encoders.h"
#include "runtime/models/layers.h"
#include "runtime/parallel/pipeline_stages.h"
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/checkpoint_weights.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using launcher::testing::RunResult;
using runtime::LayersOfStage;
using runtime::StageOrder;
using runtime_testing::LargestRelativeDifference;
using runtime_testing::Losses;
using runtime_testing::RunWorkers;
using scheduler::Op;
using scheduler::OpKind;

// ---- the stage split and each stage's order ----

TEST(PipelineStages, LayersSplitEvenlyAndTheFirstStagesTakeTheRemainder) {
  EXPECT_EQ(LayersOfStage(3, 2, 0).first, 0);
  EXPECT_EQ(LayersOfStage(3, 2, 0).end, 2);
  EXPECT_EQ(LayersOfStage(3, 2, 1).first, 2);
  EXPECT_EQ(LayersOfStage(3, 2, 1).end, 3);
  for (int64_t layers : {2, 3, 7, 10}) {
    for (int stages = 1; stages <= layers && stages <= 4; ++stages) {
      int64_t next = 0;
      for (int s = 0; s < stages; ++s) {
        const auto l = LayersOfStage(layers, stages, s);
        EXPECT_EQ(l.first, next) << layers << " over " << stages;
        EXPECT_GE(l.count(), layers / stages);
        EXPECT_LE(l.count(), layers / stages + 1);
        next = l.end;
      }
      EXPECT_EQ(next, layers);
    }
  }
}

std::string Text(const std::vector<Op>& ops) {
  std::string out;
  for (const auto& op : ops) {
    if (!out.empty()) out += " ";
    out += op.kind == OpKind::kForward    ? "F" + std::to_string(op.micro_batch)
           : op.kind == OpKind::kBackward ? "B" + std::to_string(op.micro_batch)
                                          : "O";
  }
  return out;
}

std::vector<Op> Ops(const std::string& text) {
  std::vector<Op> ops;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    if (word == "O") {
      ops.push_back({OpKind::kOptimizer, -1});
    } else {
      ops.push_back({word[0] == 'F' ? OpKind::kForward : OpKind::kBackward, std::stoi(word.substr(1))});
    }
  }
  return ops;
}

TEST(PipelineStages, ThePlansPpLayersSplitTheLayersWhenSet) {
  plan::ParallelConfig c;
  c.pp = 3;
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(LayersOfStage(c, 7, s).first, LayersOfStage(7, 3, s).first) << "unset: the even split";
    EXPECT_EQ(LayersOfStage(c, 7, s).end, LayersOfStage(7, 3, s).end);
  }
  c.pp_layers = {1, 4, 2};
  EXPECT_EQ(LayersOfStage(c, 7, 0).first, 0);
  EXPECT_EQ(LayersOfStage(c, 7, 0).end, 1);
  EXPECT_EQ(LayersOfStage(c, 7, 1).first, 1);
  EXPECT_EQ(LayersOfStage(c, 7, 1).end, 5);
  EXPECT_EQ(LayersOfStage(c, 7, 2).first, 5);
  EXPECT_EQ(LayersOfStage(c, 7, 2).end, 7);
}

TEST(PipelineStages, OneForwardOneBackwardAfterAWarmUpOfTheStagesBelow) {
  const auto program = Ops("F0 B0 F1 B1 F2 B2 F3 B3 O");
  EXPECT_EQ(Text(StageOrder(program, 2, 3, true)), "F0 B0 F1 B1 F2 B2 F3 B3 O");  // the last: the program
  EXPECT_EQ(Text(StageOrder(program, 1, 3, true)), "F0 F1 B0 F2 B1 F3 B2 B3 O");
  EXPECT_EQ(Text(StageOrder(program, 0, 3, true)), "F0 F1 F2 B0 F3 B1 B2 B3 O");
  // Behind a training producer every stage keeps the program's order.
  EXPECT_EQ(Text(StageOrder(program, 0, 3, false)), Text(program));
  // A program that runs every forward first stays so; forwards only stream.
  EXPECT_EQ(Text(StageOrder(Ops("F0 F1 F2 B0 B1 B2 O"), 0, 2, true)), "F0 F1 F2 B0 B1 B2 O");
  EXPECT_EQ(Text(StageOrder(Ops("F0 F1 F2"), 0, 2, true)), "F0 F1 F2");
}

// Runs every stage's order as far as its dependencies allow (a forward needs
// the stage above's forward of that micro-batch, a backward the stage
// below's backward); true when every stage finishes.
bool PipelineFinishes(const std::vector<std::vector<Op>>& orders) {
  const size_t stages = orders.size();
  std::vector<size_t> next(stages, 0);
  std::vector<std::map<int, bool>> forward_done(stages), backward_done(stages);
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t s = 0; s < stages; ++s) {
      while (next[s] < orders[s].size()) {
        const Op& op = orders[s][next[s]];
        if (op.kind == OpKind::kForward && s > 0 && !forward_done[s - 1][op.micro_batch]) break;
        if (op.kind == OpKind::kBackward && s + 1 < stages && !backward_done[s + 1][op.micro_batch]) break;
        if (op.kind == OpKind::kForward) forward_done[s][op.micro_batch] = true;
        if (op.kind == OpKind::kBackward) backward_done[s][op.micro_batch] = true;
        ++next[s];
        moved = true;
      }
    }
  }
  for (size_t s = 0; s < stages; ++s) {
    if (next[s] != orders[s].size()) return false;
  }
  return true;
}

TEST(PipelineStages, RandomProgramsNeverDeadlockAndKeepTheirForwardAndBackwardOrders) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 8);
    const int stages = 2 + static_cast<int>(rng() % 3);
    // A random valid program: forwards in order, each backward after its forward.
    std::vector<int> pending;
    std::vector<Op> program;
    int forwards = 0;
    while (forwards < n || !pending.empty()) {
      const bool forward = forwards < n && (pending.empty() || rng() % 2 == 0);
      if (forward) {
        program.push_back({OpKind::kForward, forwards});
        pending.push_back(forwards++);
      } else {
        const size_t pick = rng() % pending.size();
        program.push_back({OpKind::kBackward, pending[pick]});
        pending.erase(pending.begin() + static_cast<long>(pick));
      }
    }
    program.push_back({OpKind::kOptimizer, -1});
    for (bool run_ahead : {true, false}) {
      std::vector<std::vector<Op>> orders;
      for (int s = 0; s < stages; ++s) orders.push_back(StageOrder(program, s, stages, run_ahead));
      EXPECT_TRUE(PipelineFinishes(orders)) << Text(program) << " over " << stages;
      EXPECT_EQ(Text(orders.back()), Text(program)) << "the last stage keeps the scheduler's order";
      for (const auto& order : orders) {
        auto only = [](const std::vector<Op>& ops, OpKind kind) {
          std::vector<int> out;
          for (const auto& op : ops) {
            if (op.kind == kind) out.push_back(op.micro_batch);
          }
          return out;
        };
        EXPECT_EQ(only(order, OpKind::kForward), only(program, OpKind::kForward));
        EXPECT_EQ(only(order, OpKind::kBackward), only(program, OpKind::kBackward));
      }
    }
  }
}

// ---- whole runs under mpirun ----

struct Layout {
  int student_tp = 1, student_pp = 2, student_dp = 1;
  int student_layers = 3;
  bool tied = false;
  int teacher_pp = 1;
  int zero_stage = 0;
  std::vector<int64_t> student_pp_layers;  // empty: the even split
};

// specs/tiny_kd.toml placed on this machine: the teacher (from the seed) and
// the student in the given layout, micro-batches of 4 (four per step and
// replica: the pipeline has work to overlap), the KD loss.
plan::Plan KdPlan(const Layout& l, int64_t steps) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_kd.toml", compiler::Grouping::kSectioned);
  plan::SectionPlan* student = runtime_testing::ShapeTinyKd(p, {l.student_tp, l.student_pp, 1, l.student_dp, 4},
                                                            {1, l.teacher_pp, 1, 1, 4}, l.zero_stage);
  for (auto& s : p.sections) {
    // The planner lets tiny_kd's teacher run ahead (docs/run_ahead.md); here
    // a pipelined teacher streams (its run-ahead: run_ahead_mp_test.cc).
    if (&s != student && l.teacher_pp > 1) s.run_ahead = 0;
  }
  if (student != nullptr) {
    student->config.pp_layers = l.student_pp_layers;
    student->model.layers = l.student_layers;
    student->model.tie_embeddings = l.tied;
    student->optimizer.weight_decay = 0.1;
    runtime_testing::UseKdLoss(*student);
  }
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

using runtime_testing::WritePlan;

// Fresh(name): <test-tmp>/runtime_pipeline/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_pipeline"};

// Plan `p` (the student, maybe the teacher, in pipeline stages) against the
// one-process reference and against the same plan without stages (every
// section pp = 1, the same TP and DP): every step's loss within 1e-5
// relative of both; the final weights (gathered from the stages into one
// checkpoint) within 1e-5 of the unstaged run's, and no further from the
// reference's than the unstaged run's are (AdamW's first steps divide
// each gradient by its own magnitude, so weights of any distributed run
// drift from the reference's by more than their gradients do).
// Returns the pipelined run's output.
std::string ExpectPipelineEqualsReference(const std::string& what, const plan::Plan& p) {
  plan::Plan unstaged = p;
  for (auto& s : unstaged.sections) {
    s.config.pp = 1;
    s.config.pp_layers.clear();
  }
  runtime_testing::PlaceOnThisMachine(unstaged, p.data.steps);
  const std::string dir = Fresh(what);
  const std::string plan_path = WritePlan(p, dir);
  const std::string unstaged_path = WritePlan(unstaged, dir + "/unstaged");
  const auto run = RunWorkers(p, plan_path, dir + "/run");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  if (run.exit_code != 0) return run.output;
  const auto flat = RunWorkers(unstaged, unstaged_path, dir + "/unstaged/run");
  EXPECT_EQ(flat.exit_code, 0) << flat.output;
  if (flat.exit_code != 0) return run.output;
  const auto reference = runtime_testing::RunReference(plan_path, dir + "/reference");
  EXPECT_EQ(reference.exit_code, 0) << reference.output;
  if (reference.exit_code != 0) return run.output;
  const auto a = Losses(dir + "/run"), f = Losses(dir + "/unstaged/run"), r = Losses(dir + "/reference");
  EXPECT_EQ(static_cast<int64_t>(a.size()), p.data.steps) << run.output;
  if (static_cast<int64_t>(a.size()) != p.data.steps || r.size() != a.size() || f.size() != a.size()) {
    ADD_FAILURE() << what << ": runs of unequal length";
    return run.output;
  }
  runtime_testing::ExpectLossesNear(what, a, r, 1e-5, " vs the reference");
  runtime_testing::ExpectLossesNear(what, a, f, 1e-5, " vs pp = 1");
  runtime_testing::ExpectLossFalls(what, a);
  const auto w = runtime_testing::WeightsOf(p, "student", dir + "/run");
  const auto u = runtime_testing::WeightsOf(p, "student", dir + "/unstaged/run");
  const auto ref = runtime_testing::WeightsOf(p, "student", dir + "/reference");
  EXPECT_FALSE(w.empty());
  if (w.empty()) return run.output;
  std::string where_flat, where_ref, where_flat_ref;
  const double to_flat = LargestRelativeDifference(w, u, &where_flat);
  const double to_ref = LargestRelativeDifference(w, ref, &where_ref);
  const double flat_to_ref = LargestRelativeDifference(u, ref, &where_flat_ref);
  std::printf("%s: weights vs pp = 1 %.2e (%s), vs the reference %.2e (%s); pp = 1 vs the reference %.2e (%s)\n",
              what.c_str(), to_flat, where_flat.c_str(), to_ref, where_ref.c_str(), flat_to_ref,
              where_flat_ref.c_str());
  EXPECT_LE(to_flat, 1e-5) << what << ": " << where_flat;
  EXPECT_LE(to_ref, 1.5 * flat_to_ref + 1e-6) << what << ": " << where_ref;
  return run.output;
}

TEST(PipelineTraining, KdStudentThreeLayersOverTwoStagesEqualsTheReference) {
  ExpectPipelineEqualsReference("pp2_uneven", KdPlan(Layout{}, 4));
}

// The plan's pp_layers (docs/pipeline.md): the first stage 1 layer, the
// last 2 (the even split is 2 + 1); the runtime keeps each stage's layers.
TEST(PipelineTraining, AnUnevenSplitOfThePlansChoosingEqualsTheReference) {
  Layout l;
  l.student_pp_layers = {1, 2};
  const std::string output = ExpectPipelineEqualsReference("pp2_layers_1_2", KdPlan(l, 3));
  EXPECT_NE(output.find("section 'student' pipeline stage 0 of 2: layers [0, 1) (the plan's pp_layers)"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("section 'student' pipeline stage 1 of 2: layers [1, 3) (the plan's pp_layers)"),
            std::string::npos)
      << output;
}

TEST(PipelineTraining, TiedEmbeddingsOverThreeStagesEqualTheReference) {
  Layout l;
  l.student_pp = 3;
  l.tied = true;
  ExpectPipelineEqualsReference("pp3_tied", KdPlan(l, 4));
}

TEST(PipelineTraining, Tp2TimesPp2EqualsTheReference) {
  Layout l;
  l.student_tp = 2;
  l.student_layers = 2;
  ExpectPipelineEqualsReference("tp2_pp2", KdPlan(l, 3));
}

TEST(PipelineTraining, Pp2TimesDp2EqualsTheReference) {
  Layout l;
  l.student_dp = 2;
  ExpectPipelineEqualsReference("pp2_dp2", KdPlan(l, 3));
}

TEST(PipelineTraining, Pp2TimesDp2WithZero1EqualsTheReference) {
  Layout l;
  l.student_dp = 2;
  l.zero_stage = 1;
  ExpectPipelineEqualsReference("pp2_dp2_zero1", KdPlan(l, 3));
}

TEST(PipelineTraining, AFrozenTeacherStreamsThroughTwoStagesIntoAPipelinedStudent) {
  Layout l;
  l.teacher_pp = 2;
  l.student_layers = 2;
  ExpectPipelineEqualsReference("teacher_pp2", KdPlan(l, 3));
}

// bf16 autocast: the residual stream between blocks is fp32 (a bf16
// branch added to fp32), so what crosses between stages is what a single
// rank holds there; the pipelined run tracks the unpipelined bf16 run.
TEST(PipelineTraining, Bf16AutocastTracksTheUnpipelinedBf16Run) {
  const plan::Plan staged = KdPlan(Layout{}, 3);
  Layout whole_layout;
  whole_layout.student_pp = 1;
  const plan::Plan whole = KdPlan(whole_layout, 3);
  const std::string dir = Fresh("bf16");
  const auto a = RunWorkers(staged, WritePlan(staged, dir + "/pp2"), dir + "/pp2/run", {"--precision", "bf16"});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto b = RunWorkers(whole, WritePlan(whole, dir + "/pp1"), dir + "/pp1/run", {"--precision", "bf16"});
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto x = Losses(dir + "/pp2/run"), y = Losses(dir + "/pp1/run");
  ASSERT_EQ(x.size(), 3u);
  ASSERT_EQ(y.size(), 3u);
  runtime_testing::ExpectLossesNear("bf16 pp 2", x, y, 1e-5, " vs pp 1");
}

TEST(PipelineTraining, StopAndResumeIsBitIdenticalToAnUninterruptedRun) {
  const plan::Plan p = KdPlan(Layout{}, 5);
  // Each stage writes its own parameters' pieces and moments.
  runtime_testing::ExpectStopAndResumeCheckpointsEqual("pp2", p, Fresh("resume"), 2, 4, "student/adamw.", 2,
                                                       {/*optimizer_present=*/true, /*optimizer_bytes_equal=*/true});
}

TEST(PipelineFailure, AStageKilledMidRunEndsTheJobNamingItsRank) {
  Layout l;
  l.student_pp = 3;
  const plan::Plan p = KdPlan(l, 500);  // far more steps than it runs: it is killed
  const std::string dir = Fresh("killed_stage");
  const std::string plan_path = WritePlan(p, dir);
  const int victim = plan::GlobalRankOf(p, p.section_index("student"), 0, 0, 0, 1);  // the middle stage
  const auto killed = runtime_testing::RunAndKillRank(p, plan_path, dir + "/run", victim, 2, std::chrono::seconds(90),
                                                      std::chrono::milliseconds(50));
  runtime_testing::ExpectKilledRankEndedTheJob(killed, victim, "the pipelined run made no progress");
}

// A stage that hangs (alive, silent: the worker's test hook blocks it for
// good before its first send to the next stage at step 2) is not a dead
// process mpirun would notice: its neighbours' receives must time out
// after comm_timeout_s (10 s here) and end the job with the launcher's error
// naming the hung rank, not hang.
TEST(PipelineFailure, AHungStageEndsTheJobWithinTheCommTimeoutNamingItsRank) {
  Layout l;
  l.student_pp = 3;
  const plan::Plan p = KdPlan(l, 500);  // far more steps than it runs
  const std::string dir = Fresh("hung_stage");
  const std::string plan_path = WritePlan(p, dir);
  const int victim = plan::GlobalRankOf(p, p.section_index("student"), 0, 0, 0, 1);  // the middle stage
  constexpr double kCommTimeoutS = 10;
  const runtime_testing::WorkerOptions hang_hook{
      false, "10", {{"MAESTRO_TEST_HANG_BEFORE_STAGE_SEND", std::to_string(victim) + ":2"}}};
  RunResult result;
  std::thread job([&] { result = RunWorkers(p, plan_path, dir + "/run", {}, hang_hook); });
  // Steps 0 and 1 done: the hang comes at step 2's first forward.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool progressed = false;
  while (std::chrono::steady_clock::now() < deadline && !progressed) {
    progressed = Losses(dir + "/run").size() >= 2;
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling a file
  }
  const auto hung_from = std::chrono::steady_clock::now();
  job.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - hung_from).count();
  ASSERT_TRUE(progressed) << "the pipelined run made no progress\n" << result.output;
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("MAESTRO_TEST_HANG_BEFORE_STAGE_SEND: hanging"), std::string::npos)
      << "the hook did not fire\n"
      << result.output;
  // The launcher's timeout error: the operation, its group, the timeout and
  // the rank that did not answer.
  EXPECT_NE(result.output.find("did not complete within 10.0 s"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("missing rank(s) " + std::to_string(victim)), std::string::npos) << result.output;
  // Within the timeout, the survey's grace and mpirun's teardown (MpirunArgs'
  // outer limit, 120 s, would mean a hang).
  EXPECT_LT(seconds, kCommTimeoutS + 30) << result.output;
}

}  // namespace
}  // namespace maestro
