// SPDX-License-Identifier: Apache-2.0
// Local mode (--local N, what `maestro run` compiles with), --pin overrides,
// --worker-arg, and the spec keys the runtime reads (init, loss, dataset,
// checkpoint_every, comm_timeout_s, schedule) reaching plan.json.
#include <gtest/gtest.h>

#include <string>

#include "compiler/compile.h"
#include "compiler/runtime_support.h"
#include "compiler/spec.h"
#include "scheduler/scheduler.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

const std::string kSpecs = std::string(MAESTRO_SOURCE_DIR) + "/specs/";

Spec Load(const std::string& name) {
  auto spec = ParseSpecFile(kSpecs + name);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.ok() ? *spec : Spec{};
}

CompileOptions Local(int ranks, std::vector<std::string> pins = {}) {
  CompileOptions o;
  o.local_ranks = ranks;
  for (const auto& p : pins) {
    auto pin = ParsePin(p);
    EXPECT_TRUE(pin.ok()) << pin.status().message();
    if (pin.ok()) o.pins.push_back(*pin);
  }
  return o;
}

// Every section on one node, tasks_per_node == its ranks, the ranks within
// the machine's N, and only configurations the runtime supports.
void ExpectLocalPlan(const plan::Plan& p, int ranks) {
  int used = 0;
  for (const auto& s : p.sections) {
    EXPECT_EQ(s.placement.nodes, 1) << s.name;
    EXPECT_EQ(s.placement.tasks_per_node, s.config.ranks()) << s.name;
    EXPECT_EQ(s.placement.gpus_per_task, 0) << s.name;
    EXPECT_EQ(s.planner_only, "") << s.name;
    EXPECT_EQ(PlannerOnlyFeatures(s.model, s.config), "") << s.name;
    used += s.config.ranks();
  }
  EXPECT_LE(used, ranks);
  EXPECT_EQ(p.world_size(), used);
}

TEST(LocalMode, EverySectionSharesOneNodeWithinTheRanks) {
  const Spec spec = Load("tiny_vlm.toml");
  for (int n : {2, 3, 4, 7}) {
    auto r = Compile(spec, Local(n));
    ASSERT_TRUE(r.ok()) << r.status().message();
    ExpectLocalPlan(r->plan, n);
    EXPECT_NE(r->report.find("local mode"), std::string::npos);
  }
  // Without --local every section is its own het component on its own node(s).
  auto slurm = Compile(spec, CompileOptions{});
  ASSERT_TRUE(slurm.ok());
  EXPECT_EQ(slurm->report.find("local mode"), std::string::npos);
  int nodes = 0;
  for (const auto& s : slurm->plan.sections) nodes += s.placement.nodes;
  EXPECT_EQ(nodes, 4);  // the 4-node budget of the spec, no node shared
}

TEST(LocalMode, PinsForceTheFanOutAndAreHonoured) {
  auto r = Compile(Load("tiny_vlm.toml"), Local(4, {"llm.dp=2", "vit.dp=1", "llm.micro_batch=2"}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ExpectLocalPlan(r->plan, 4);
  const auto& p = r->plan;
  EXPECT_EQ(p.sections[static_cast<size_t>(p.section_index("llm"))].config.dp, 2);
  EXPECT_EQ(p.sections[static_cast<size_t>(p.section_index("llm"))].config.micro_batch, 2);
  EXPECT_EQ(p.sections[static_cast<size_t>(p.section_index("vit"))].config.dp, 1);
  ASSERT_EQ(p.edges.size(), 1u);
  EXPECT_EQ(p.edges[0].fanout, 2);
}

TEST(LocalMode, AnUnsupportedPinIsRefusedAndASupportedOneRuns) {
  // Whether PP runs is the runtime's call (runtime_support.h): both answers are checked.
  auto r = Compile(Load("tiny_kd.toml"), Local(4, {"student.pp=2"}));
  if (kRuntimeSupport.pipeline_parallel_decoder) {
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->plan.sections[1].config.pp, 2);
    ExpectLocalPlan(r->plan, 4);
  } else {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("student"), std::string::npos) << r.status().message();
  }
  // TP on a decoder, likewise.
  auto t = Compile(Load("tiny_kd.toml"), Local(4, {"student.tp=2"}));
  EXPECT_EQ(t.ok(), kRuntimeSupport.tensor_parallel_decoder) << (t.ok() ? "" : t.status().message());
}

TEST(LocalMode, TheFirstCpuTypeOrASyntheticOneIsTheDevice) {
  Spec spec = Load("tiny_vlm.toml");
  auto r = Compile(spec, Local(2));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->plan.sections[0].placement.gpu_type, "cpu");
  // A GPU-only spec runs on a synthetic CPU type of 4 GB slots.
  for (auto& g : spec.cluster.gpu_types) {
    g.cpu = false;
    g.name = "h100";
  }
  spec.cluster.default_gpu = "h100";
  auto s = Compile(spec, Local(3));
  ASSERT_TRUE(s.ok()) << s.status().message();
  ExpectLocalPlan(s->plan, 3);
  EXPECT_EQ(s->plan.sections[0].placement.gpu_type, "cpu");
  EXPECT_EQ(s->plan.sections[0].placement.gpus_per_task, 0);
}

TEST(LocalMode, RanksThatOutnumberTheCoresShareThemInTheSimulatedStep) {
  const Spec spec = Load("tiny_vlm.toml");
  const std::vector<std::string> pins = {"vit.dp=1", "llm.dp=2", "vit.micro_batch=16", "llm.micro_batch=16"};
  auto own = Compile(spec, Local(3, pins));
  CompileOptions shared_options = Local(3, pins);
  shared_options.local_cores = 2;
  auto shared = Compile(spec, shared_options);
  ASSERT_TRUE(own.ok()) << own.status().message();
  ASSERT_TRUE(shared.ok()) << shared.status().message();
  EXPECT_EQ(own->plan.shared_cores, 0);
  EXPECT_EQ(shared->plan.shared_cores, 2);
  EXPECT_NE(shared->report.find("the ranks share 2 core(s)"), std::string::npos) << shared->report;
  // Three busy ranks on two cores take longer than on three, and no less
  // than the sum of the work over two cores allows.
  EXPECT_GT(shared->plan.predicted_step_seconds, 1.02 * own->plan.predicted_step_seconds);
  double work = 0.0;
  for (const auto& s : own->simulated.sections) {
    work += s.utilization * s.replicas * own->simulated.step_seconds;
  }
  EXPECT_GE(shared->simulated.step_seconds, 0.98 * work / 2);  // means over sampled batches
  // As many cores as ranks: nothing is shared.
  shared_options.local_cores = 3;
  auto enough = Compile(spec, shared_options);
  ASSERT_TRUE(enough.ok()) << enough.status().message();
  EXPECT_DOUBLE_EQ(enough->plan.predicted_step_seconds, own->plan.predicted_step_seconds);
  // --local-cores means nothing without --local.
  CompileOptions cluster;
  cluster.local_cores = 2;
  auto refused = Compile(spec, cluster);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--local-cores needs --local"), std::string::npos);
}

// `maestro run` without --ranks on a machine with fewer cores than the spec
// has sections: --local-grow plans the ranks the sections need at the least
// (one each, or what their pins ask: tiny_vlm3 pins the LLM's dp = 2), the
// ranks sharing the cores.
TEST(LocalMode, GrowGivesEverySectionARankWhenTheMachineHasFewerCores) {
  const Spec spec = Load("tiny_vlm3.toml");
  ASSERT_EQ(spec.sections.size(), 3u);
  CompileOptions grow = Local(2);
  grow.grouping = Grouping::kSectioned;  // auto may fuse them (the pins allow it): one rank per section asked
  grow.local_grow = true;
  grow.local_cores = 2;
  auto r = Compile(spec, grow);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ExpectLocalPlan(r->plan, 4);
  EXPECT_EQ(r->plan.world_size(), 4);
  EXPECT_EQ(r->plan.shared_cores, 2);
  CompileOptions exact_options = Local(2);
  exact_options.grouping = Grouping::kSectioned;
  auto exact = Compile(spec, exact_options);  // without it, two ranks are too few
  ASSERT_FALSE(exact.ok());
  EXPECT_NE(exact.status().message().find("--local 3"), std::string::npos) << exact.status().message();
  CompileOptions five = Local(5);  // grow never shrinks a larger N
  five.local_grow = true;
  five.grouping = Grouping::kSectioned;
  auto f = Compile(spec, five);
  ASSERT_TRUE(f.ok()) << f.status().message();
  ExpectLocalPlan(f->plan, 5);
}

TEST(LocalMode, BadRequestsSayWhatToChange) {
  const Spec spec = Load("tiny_vlm.toml");
  auto few = Compile(spec, Local(1));
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(few.status().message().find("--local 2"), std::string::npos) << few.status().message();
  auto pinned = Compile(spec, Local(2, {"llm.dp=2"}));  // vit 1 + llm 2 > 2 ranks
  ASSERT_FALSE(pinned.ok());
  EXPECT_NE(pinned.status().message().find("too few ranks"), std::string::npos) << pinned.status().message();
  CompileOptions both = Local(4);
  both.allow_planner_only = true;
  EXPECT_FALSE(Compile(spec, both).ok());
  CompileOptions unknown = Local(4, {"llm.dp=2"});
  unknown.pins[0].section = "lm";
  auto u = Compile(spec, unknown);
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("did you mean 'llm'"), std::string::npos) << u.status().message();
}

TEST(Pin, ParsesSectionKeyValueAndRejectsTheRest) {
  auto p = ParsePin("llm.micro_batch=4");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->section, "llm");
  EXPECT_EQ(p->key, "micro_batch");
  EXPECT_EQ(p->value, 4);
  auto cp = ParsePin("llm.cp=2");  // context parallelism (docs/context_parallel.md)
  ASSERT_TRUE(cp.ok());
  EXPECT_EQ(cp->key, "cp");
  EXPECT_EQ(cp->value, 2);
  for (const char* bad : {"llm", "llm.dp", "llm.dp=", ".dp=2", "llm.=2", "llm.dp=0", "llm.dp=-1", "llm.dp=2x",
                          "llm.xp=2", "llm.dp=99999999999"}) {
    auto b = ParsePin(bad);
    EXPECT_FALSE(b.ok()) << bad;
    if (!b.ok()) {
      EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  EXPECT_NE(ParsePin("llm.tpp=2").status().message().find("did you mean 'tp'"), std::string::npos);
  auto vit_cp = ParsePin("vit.cp=2");  // context parallelism (docs/context_parallel_vit.md)
  ASSERT_TRUE(vit_cp.ok());
  EXPECT_EQ(vit_cp->key, "cp");
  auto ep = ParsePin("llm.ep=2");  // expert parallelism (docs/moe.md)
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->key, "ep");
  EXPECT_EQ(ep->value, 2);
}

TEST(Pin, OverridesASpecPinWithoutLocalMode) {
  CompileOptions o;
  o.pins.push_back(*ParsePin("student.dp=4"));
  auto r = Compile(Load("tiny_kd.toml"), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->plan.sections[1].config.dp, 4);
}

TEST(WorkerArgs, AreShellQuotedOnTheStepLine) {
  CompileOptions o;
  o.worker_args = {"--trace", "a b", "$(rm -rf /)"};
  auto r = Compile(Load("tiny_kd.toml"), o);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->sbatch.find("\"$MAESTRO_PLAN\" --trace 'a b' '$(rm -rf /)' &"), std::string::npos) << r->sbatch;
}

TEST(RuntimeKeys, ReachThePlan) {
  auto text = [](const std::string& job, const std::string& section) {
    return "[job]\n" + job + R"(
[cluster]
nodes = 4
gpus_per_node = 2
[cluster.gpu.cpu]
cpu = true
[data]
global_batch = 8
seq_len = 32
dataset = "fashion_mnist_captions"
[models.t]
kind = "decoder"
hidden = 64
layers = 2
heads = 4
ffn_hidden = 128
vocab = 256
[models.s]
kind = "decoder"
hidden = 32
layers = 1
heads = 2
ffn_hidden = 64
vocab = 256
[[section]]
name = "teacher"
model = "t"
mode = "forward"
init = "runs/t"
[[section]]
name = "student"
model = "s"
inputs = ["teacher.teacher_hidden"]
)" + section;
  };
  auto parsed = ParseSpecString(
      text("checkpoint_every = 3\ncheckpoint_minutes = 7.5\nkeep_checkpoints = 4\ncheckpoint_async = false\n"
           "comm_timeout_s = 2.5\n"
           "schedule = \"balance_only\"",
           "loss = { kind = \"kd\", alpha = 0.25, temperature = 3.0, top_k = 8 }"),
      "t.toml", "specs/dir");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  auto r = Compile(*parsed, CompileOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const plan::Plan p = plan::ExpandFusedSections(r->plan);  // the keys reach the components, whatever the grouping
  EXPECT_EQ(p.checkpoint_every, 3);
  EXPECT_DOUBLE_EQ(p.checkpoint_minutes, 7.5);
  EXPECT_EQ(p.keep_checkpoints, 4);
  EXPECT_FALSE(p.checkpoint_async);
  EXPECT_DOUBLE_EQ(p.comm_timeout_s, 2.5);
  EXPECT_TRUE(scheduler::PolicyFromName(p.schedule_policy).ok()) << p.schedule_policy;
  EXPECT_EQ(*scheduler::PolicyFromName(p.schedule_policy), scheduler::Policy::kBalanceOnly);
  EXPECT_EQ(p.data.dataset, "fashion_mnist_captions");
  EXPECT_EQ(p.sections[0].init_from, "specs/dir/runs/t");  // relative to the spec, need not exist
  EXPECT_EQ(p.sections[0].init_section, "");
  EXPECT_EQ(p.sections[1].loss.kind, "kd");
  EXPECT_DOUBLE_EQ(p.sections[1].loss.kd_alpha, 0.25);
  EXPECT_DOUBLE_EQ(p.sections[1].loss.temperature, 3.0);
  EXPECT_EQ(p.sections[1].loss.top_k, 8);
  ASSERT_EQ(p.edges.size(), 1u);
  EXPECT_EQ(p.edges[0].bytes_per_sample, 32 * 64 * 4);  // seq_len x teacher hidden x fp32
  // Every spelling of every policy maps to a name the scheduler knows.
  for (const char* name : {"wavefront", "fifo", "fifo_contiguous", "balance_only"}) {
    auto s = ParseSpecString(text(std::string("schedule = \"") + name + "\"", ""), "t.toml", ".");
    ASSERT_TRUE(s.ok()) << name << ": " << s.status().message();
    auto c = Compile(*s, CompileOptions{});
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(scheduler::PolicyFromName(c->plan.schedule_policy).ok()) << name;
  }
  // Defaults when absent.
  auto d = ParseSpecString(text("", ""), "t.toml", ".");
  ASSERT_TRUE(d.ok());
  auto dc = Compile(*d, CompileOptions{});
  ASSERT_TRUE(dc.ok());
  EXPECT_EQ(dc->plan.schedule_policy, "wavefront");
  EXPECT_EQ(dc->plan.checkpoint_every, 0);
  EXPECT_DOUBLE_EQ(dc->plan.checkpoint_minutes, plan::kDefaultCheckpointMinutes);
  EXPECT_DOUBLE_EQ(plan::kDefaultCheckpointMinutes, 30.0);
  EXPECT_EQ(dc->plan.keep_checkpoints, 2);
  EXPECT_TRUE(dc->plan.checkpoint_async) << "periodic checkpoints are written in the background by default";
  // A negative interval is refused at its line.
  auto negative = ParseSpecString(text("checkpoint_minutes = -1", ""), "t.toml", ".");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("checkpoint_minutes"), std::string::npos) << negative.status().message();
  EXPECT_NE(negative.status().message().find("t.toml:"), std::string::npos) << negative.status().message();
  // Keeping no checkpoint is refused at its line too.
  auto none_kept = ParseSpecString(text("keep_checkpoints = 0", ""), "t.toml", ".");
  ASSERT_FALSE(none_kept.ok());
  EXPECT_NE(none_kept.status().message().find("keep_checkpoints"), std::string::npos) << none_kept.status().message();
  EXPECT_EQ(plan::ExpandFusedSections(dc->plan).sections[1].loss.kind, "lm");
}

}  // namespace
}  // namespace maestro::compiler

namespace maestro::compiler {
namespace {

TEST(RuntimeSupportFlag, ParsesFeatureListsAndPlansForThem) {
  auto none = ParseRuntimeSupport("dp");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->data_parallel);
  EXPECT_FALSE(none->tensor_parallel_decoder);
  EXPECT_FALSE(none->micro_batching);
  auto all = ParseRuntimeSupport("all");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->context_parallel_decoder && all->context_parallel_encoder && all->context_parallel_with_pipeline &&
              all->activation_recompute && all->tensor_parallel_encoder);
  auto cp = ParseRuntimeSupport("cp");  // every CP row
  ASSERT_TRUE(cp.ok());
  EXPECT_TRUE(cp->context_parallel_decoder && cp->context_parallel_encoder && cp->context_parallel_with_pipeline);
  EXPECT_EQ(RuntimeSupportText(*ParseRuntimeSupport("tp_decoder,dp")), "dp,tp_decoder");
  auto bad = ParseRuntimeSupport("dp,tp_decodr");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("did you mean 'tp_decoder'"), std::string::npos) << bad.status().message();

  // A runtime without micro-batching or TP gets plans without them.
  const Spec spec = Load("tiny_vlm.toml");
  CompileOptions o;
  o.support = *ParseRuntimeSupport("dp");
  o.support_given = true;
  auto r = Compile(spec, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  for (const auto& s : r->plan.sections) {
    EXPECT_EQ(s.config.tp, 1) << s.name;
    EXPECT_EQ(s.config.micro_batch, 1) << s.name;
    EXPECT_EQ(s.planner_only, "") << s.name;
  }
  EXPECT_NE(r->report.find("planned for a runtime with: dp"), std::string::npos);
  // Local mode plans for this build's runtime only.
  o.local_ranks = 4;
  EXPECT_FALSE(Compile(spec, o).ok());
}

}  // namespace
}  // namespace maestro::compiler
