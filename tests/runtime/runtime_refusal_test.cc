// SPDX-License-Identifier: Apache-2.0
// What the runtime refuses is what the table says it lacks, nothing more
// (plan/runtime_support.h, issue #38):
//  - every configuration the planner can form for the tiny example specs'
//    sections (compiler::CandidateConfigs with planner-only ones included:
//    TP, PP, CP, EP, recomputation, ZeRO-1 on a 2 x 8 GPU node type) is
//    refused by the runtime's gate (plan::CheckSectionRuns, of the
//    plan::CheckPlanRuns that the executor, the reference and the profiler
//    call first) exactly when
//    compiler::PlannerOnlyFeatures marks it, for this build's table and for
//    the table with any one of its rows off;
//  - every configuration the gate accepts builds: SectionRunner::Create of
//    the section with groups of the plan's sizes (stand-ins that fail on any
//    communication: building exchanges nothing) on the first and the last
//    pipeline stage, so no refusal hides in the build;
//  - a model feature the runtime lacks (a config's dynamic NTK rope_scaling,
//    an o_proj or MLP bias) or data it cannot feed (an audio encoder) is
//    refused by maestro-compile at the section's line of the spec (and in
//    local mode, as `maestro run` compiles), and by the runtime's gate.
// One torch TU, about 15 s: a few hundred tiny runners built.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/candidates.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "compiler/workload_builder.h"
#include "launcher/comm.h"
#include "plan/model_desc.h"
#include "plan/runtime_support.h"
#include "runtime/parallel/expert_parallel.h"
#include "runtime/parallel/pipeline_parallel.h"
#include "runtime/parallel/tensor_parallel.h"
#include "runtime/section_runner.h"
#include "tests/fixtures/hf_checkpoints.h"
#include "tests/fixtures/test_paths.h"
#include "tests/fixtures/workloads.h"
#include "tests/runtime/local_plan.h"

namespace maestro::runtime {
namespace {

namespace fs = std::filesystem;

// ---- groups that exist but never communicate ----

[[noreturn]] void NoCommunication(const char* what) {
  throw std::logic_error(std::string("building a runner communicated: ") + what);
}

class SilentBackend : public launcher::Backend {
 public:
  SilentBackend(int size, int index) {
    for (int r = 0; r < size; ++r) info_.ranks.push_back(r);
    info_.my_index = index;
    info_.world_rank = index;
    info_.description = "a stand-in group";
  }
  const char* name() const override { return "silent"; }
  launcher::Device device() const override { return launcher::Device::kCpu; }
  const launcher::GroupInfo& group() const override { return info_; }
  launcher::Millis timeout() const override { return launcher::Millis(1000); }
  StatusOr<launcher::WorkPtr> AllReduce(launcher::Buffer, launcher::ReduceOp) override { NoCommunication("AllReduce"); }
  StatusOr<launcher::WorkPtr> AllGather(launcher::Buffer, launcher::Buffer) override { NoCommunication("AllGather"); }
  StatusOr<launcher::WorkPtr> ReduceScatter(launcher::Buffer, launcher::Buffer, launcher::ReduceOp) override {
    NoCommunication("ReduceScatter");
  }
  StatusOr<launcher::WorkPtr> Broadcast(launcher::Buffer, int) override { NoCommunication("Broadcast"); }
  StatusOr<launcher::WorkPtr> Send(launcher::Buffer, int, int) override { NoCommunication("Send"); }
  StatusOr<launcher::WorkPtr> Recv(launcher::Buffer, int, int) override { NoCommunication("Recv"); }
  StatusOr<launcher::WorkPtr> Barrier() override { NoCommunication("Barrier"); }

 private:
  launcher::GroupInfo info_;
};

class SilentTensorParallel : public TensorParallelReducer {
 public:
  explicit SilentTensorParallel(int size) : size_(size) {}
  void AllReduceSum(torch::Tensor&) override { NoCommunication("TP AllReduceSum"); }
  int rank() const override { return 0; }
  int size() const override { return size_; }

 private:
  int size_;
};

class SilentExpertParallel : public ExpertParallelExchange {
 public:
  explicit SilentExpertParallel(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  torch::Tensor AllGatherCounts(const torch::Tensor&) override { NoCommunication("EP AllGatherCounts"); }
  torch::Tensor AllToAllRows(const torch::Tensor&) override { NoCommunication("EP AllToAllRows"); }
  void AllReduceSum(torch::Tensor&) override { NoCommunication("EP AllReduceSum"); }

 private:
  int size_;
};

// Builds section `section` of `p` as rank 0 of its TP, CP and EP groups on
// pipeline stage `stage`, with groups of the plan's sizes.
Status BuildAsTheRuntimeWould(const plan::Plan& p, int section, int stage) {
  const plan::ParallelConfig& c = p.sections[static_cast<size_t>(section)].config;
  SilentTensorParallel tp(c.tp);
  SilentBackend pp_group(c.pp, stage), cp_group(c.cp, 0);
  PipelineGroup pp(pp_group, nullptr);
  SilentExpertParallel ep(c.ep);
  RunnerOptions options;
  if (c.tp > 1) options.tensor_parallel = &tp;
  if (c.pp > 1) options.pipeline = &pp;
  if (c.cp > 1) options.context_parallel = &cp_group;
  if (c.ep > 1) options.expert_parallel = &ep;
  try {
    return SectionRunner::Create(p, section, options).status();
  } catch (const std::exception& e) {
    return Status::Internal(e.what());
  }
}

// ---- the grid ----

// The table with row `row` off (every row of RuntimeSupport a configuration
// can need), or this build's table (row "").
struct TableRow {
  const char* name;
  bool plan::RuntimeSupport::*row;
};
const std::vector<TableRow>& Rows() {
  static const std::vector<TableRow> rows = {
      {"data_parallel", &plan::RuntimeSupport::data_parallel},
      {"zero1_optimizer_sharding", &plan::RuntimeSupport::zero1_optimizer_sharding},
      {"micro_batching", &plan::RuntimeSupport::micro_batching},
      {"tensor_parallel_decoder", &plan::RuntimeSupport::tensor_parallel_decoder},
      {"tensor_parallel_encoder", &plan::RuntimeSupport::tensor_parallel_encoder},
      {"pipeline_parallel_decoder", &plan::RuntimeSupport::pipeline_parallel_decoder},
      {"context_parallel_decoder", &plan::RuntimeSupport::context_parallel_decoder},
      {"context_parallel_encoder", &plan::RuntimeSupport::context_parallel_encoder},
      {"expert_parallel", &plan::RuntimeSupport::expert_parallel},
      {"mixture_of_experts", &plan::RuntimeSupport::mixture_of_experts},
      {"activation_recompute", &plan::RuntimeSupport::activation_recompute},
  };
  return rows;
}

struct Checked {
  int accepted = 0, refused = 0, built = 0;
};

// Every candidate configuration of every section of specs/<spec_name>
// (compiled sectioned, run-ahead off) against `support`: the gate's verdict
// equals the table's; with this build's table, accepted ones build.
void CheckSpecSections(const std::string& spec_name, const plan::RuntimeSupport& support, bool build,
                       Checked* checked) {
  SCOPED_TRACE(spec_name);
  auto spec = compiler::ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/" + spec_name);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  plan::Plan base = runtime_testing::CompiledExamplePlan(spec_name, compiler::Grouping::kSectioned);
  ASSERT_FALSE(base.sections.empty());
  for (auto& s : base.sections) {
    s.run_ahead = 0;
    s.init_from.clear();  // the teacher's weights from its seed: the test builds, it does not train
  }
  ASSERT_TRUE(plan::CheckPlanRuns(base).ok()) << plan::CheckPlanRuns(base).ToString();
  // The planner's structural space on a larger machine than the spec's.
  const std::vector<compiler::DeviceType> devices = {fixtures::H100Like(2)};
  auto workload = compiler::BuildWorkload(*spec, compiler::DevicesOf(*spec));
  ASSERT_TRUE(workload.ok()) << workload.status().ToString();
  const compiler::CostModel model(devices, spec->data.global_batch);
  compiler::PlannerOptions options;
  options.allow_planner_only = true;
  options.support = support;
  for (size_t i = 0; i < base.sections.size(); ++i) {
    compiler::SectionWork work = workload->sections[i];
    ASSERT_EQ(work.name, base.sections[i].name);
    work.device = 0;
    work.pin_tp = work.pin_pp = work.pin_cp = work.pin_ep = work.pin_dp = work.pin_micro_batch = 0;
    work.pin_recompute = -1;
    std::set<std::tuple<int, int, int, int, int, int, int>> seen;
    for (const plan::ParallelConfig& c : compiler::CandidateConfigs(model, work, options)) {
      const auto key = std::make_tuple(c.tp, c.pp, c.cp, c.ep, c.dp > 1, c.micro_batch > 1,
                                       static_cast<int>(c.recompute_granularity()) * 2 + c.zero_stage);
      if (!seen.insert(key).second) continue;
      plan::Plan p = base;
      p.sections[i].config = c;
      const std::string marked = compiler::PlannerOnlyFeatures(p.sections[i].model, c, support);
      const Status gate = plan::CheckSectionRuns(p, p.sections[i], support);
      SCOPED_TRACE(fmt::format("section '{}' tp {} pp {} cp {} ep {} dp {} mb {} recompute {} zero {}",
                               p.sections[i].name, c.tp, c.pp, c.cp, c.ep, c.dp, c.micro_batch,
                               plan::RecomputeGranularityName(c.recompute_granularity()), c.zero_stage));
      EXPECT_EQ(marked.empty(), gate.ok()) << "table: '" << marked << "'; runtime: " << gate.ToString();
      if (!gate.ok()) {
        ++checked->refused;
        continue;
      }
      ++checked->accepted;
      if (!build) continue;
      for (int stage : std::set<int>{0, c.pp - 1}) {
        const Status built = BuildAsTheRuntimeWould(p, static_cast<int>(i), stage);
        EXPECT_TRUE(built.ok()) << "stage " << stage << ": " << built.ToString();
        checked->built += built.ok() ? 1 : 0;
      }
    }
  }
}

const std::vector<std::string>& TinySpecs() {
  static const std::vector<std::string> specs = {"tiny_kd.toml", "tiny_vlm3.toml", "tiny_moe_vlm.toml"};
  return specs;
}

TEST(RuntimeRefusal, TheRuntimeRefusesExactlyWhatThisBuildsTableMarksAndBuildsTheRest) {
  Checked checked;
  for (const std::string& spec : TinySpecs()) CheckSpecSections(spec, plan::kRuntimeSupport, true, &checked);
  // The grid has both kinds, and every accepted configuration built on its
  // first and (with PP) last stage.
  EXPECT_GT(checked.accepted, 20);
  EXPECT_GT(checked.refused, 5);
  EXPECT_GE(checked.built, checked.accepted);
}

TEST(RuntimeRefusal, WithATableRowOffTheRuntimeRefusesWhatItMarks) {
  for (const TableRow& row : Rows()) {
    SCOPED_TRACE(row.name);
    plan::RuntimeSupport smaller = plan::kRuntimeSupport;
    smaller.*row.row = false;
    Checked checked;
    for (const std::string& spec : TinySpecs()) CheckSpecSections(spec, smaller, false, &checked);
    EXPECT_GT(checked.refused, 0) << "no configuration of the tiny specs needs " << row.name;
  }
}

// ---- features of a model, refused when the spec is compiled ----

class RefusedAtCompileTime : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(MAESTRO_TEST_TMP) / "runtime_refusal" /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  // A one-section spec on this machine's CPU slots whose model is `model_body`.
  std::string SpecText(const std::string& model_body, const std::string& data = "dataset = \"text\"") const {
    return "[job]\nname = \"r\"\n[cluster]\nnodes = 1\ngpus_per_node = 2\n[cluster.gpu.cpu]\ncpu = true\n"
           "memory_gb = 4\ntflops_bf16 = 0.05\n[data]\n" +
           data + "\nglobal_batch = 8\nseq_len = 32\n[models.m]\n" + model_body +
           "\n[[section]]\nname = \"m\"\nmodel = \"m\"\n";
  }
  // The 1-based line of the [[section]] header in `text`.
  static int SectionLine(const std::string& text) {
    int line = 1;
    for (size_t i = 0; i < text.find("[[section]]"); ++i) line += text[i] == '\n' ? 1 : 0;
    return line;
  }
  // Compiles `text` (cluster mode and, like `maestro run`, local mode): both
  // refuse, at the section's line, mentioning `mentions`.
  void ExpectRefusedAtTheSection(const std::string& text, const std::string& mentions) {
    const std::string path = (root_ / "spec.toml").string();
    auto spec = compiler::ParseSpecString(text, path, root_.string());
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    for (const bool local : {false, true}) {
      SCOPED_TRACE(local ? "local" : "cluster");
      compiler::CompileOptions options;
      if (local) options.local_ranks = 2;
      auto compiled = compiler::Compile(*spec, options);
      ASSERT_FALSE(compiled.ok()) << "compiled a plan the runtime refuses";
      const std::string message = compiled.status().message();
      EXPECT_EQ(message.rfind(path + ":" + std::to_string(SectionLine(text)) + ":", 0), 0u) << message;
      EXPECT_NE(message.find(mentions), std::string::npos) << message;
      EXPECT_NE(message.find("section 'm'"), std::string::npos) << message;
    }
    // --allow-planner-only plans it for the report, and the runtime's gate
    // refuses that plan by name.
    compiler::CompileOptions anyway;
    anyway.allow_planner_only = true;
    auto planned = compiler::Compile(*spec, anyway);
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    const Status gate = plan::CheckPlanRuns(planned->plan);
    EXPECT_FALSE(gate.ok());
    EXPECT_NE(gate.message().find(mentions), std::string::npos) << gate.ToString();
  }
  fs::path root_;
};

// A Llama 3.1 folder's config with `rope_scaling` = scaling (JSON text).
std::string Llama31Config(const std::string& scaling) {
  return R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
"max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": true,
"rope_scaling": )" +
         scaling + R"(, "torch_dtype": "bfloat16"})" + "\n";
}

// Issue #38's case was a Llama 3.1 folder (rope_scaling of type llama3),
// compiled and stopped by a worker only after the ranks started; it is
// refused no more (plan/rope_scaling.h computes its frequencies): the spec
// compiles and the runtime's gate takes the plan.
TEST_F(RefusedAtCompileTime, ALlama31FoldersRopeScalingCompilesAndPassesTheGate) {
  auto desc = fixtures::WriteRandomHfCheckpoint(
      (root_ / "llama31").string(),
      Llama31Config(R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
"original_max_position_embeddings": 8192})"),
      hf::TensorDType::kBF16, 7);
  ASSERT_TRUE(desc.ok()) << desc.status().ToString();
  const std::string text = SpecText("weights = \"llama31\"");
  auto spec = compiler::ParseSpecString(text, (root_ / "spec.toml").string(), root_.string());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto compiled = compiler::Compile(*spec, compiler::CompileOptions{});
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  EXPECT_TRUE(plan::CheckPlanRuns(compiled->plan).ok());
  const plan::ModelDesc& model = compiled->plan.sections.at(0).model;
  EXPECT_EQ(plan::RopeScalingOf(model).type, plan::RopeType::kLlama3);
  EXPECT_EQ(plan::RopeScalingOf(model).original_max_position_embeddings, 8192);
}

// Dynamic NTK stays refused: it rescales the frequencies with the live
// sequence length, so a trained position's frequency would depend on the
// batch. Refused at the section's line, naming the rope type and why.
TEST_F(RefusedAtCompileTime, ADynamicNtkRopeScaling) {
  auto desc = fixtures::WriteRandomHfCheckpoint((root_ / "dynamic").string(),
                                                Llama31Config(R"({"rope_type": "dynamic", "factor": 2.0})"),
                                                hf::TensorDType::kBF16, 7);
  ASSERT_TRUE(desc.ok()) << desc.status().ToString();
  ExpectRefusedAtTheSection(SpecText("weights = \"dynamic\""), "rope_scaling_type 4 (rope_type \"dynamic\"");
  ExpectRefusedAtTheSection(SpecText("weights = \"dynamic\""), "live sequence length");
}

TEST_F(RefusedAtCompileTime, ModelFeaturesTheRuntimeDoesNotBuild) {
  const std::string decoder = "kind = \"decoder\"\nhidden = 32\nlayers = 2\nheads = 4\nffn_hidden = 64\nvocab = 256\n";
  ExpectRefusedAtTheSection(SpecText(decoder + "mlp_bias = true"), "mlp_bias");
  ExpectRefusedAtTheSection(SpecText(decoder + "attn_out_bias = true"), "attn_out_bias");
}

TEST_F(RefusedAtCompileTime, AnAudioEncoderWithoutAudioData) {
  ExpectRefusedAtTheSection(SpecText("kind = \"audio_encoder\"\nhidden = 32\nlayers = 1\nheads = 4\nffn_hidden = 64\n"
                                     "mel_bins = 16\naudio_frames = 32",
                                     "dataset = \"text\""),
                            "audio");
}

}  // namespace
}  // namespace maestro::runtime
