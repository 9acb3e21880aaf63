// SPDX-License-Identifier: Apache-2.0
// The KD teacher row forms in the compiler (plan/teacher_rows.h): the spec's
// tensors and keys and their errors, the edge's bytes, which side runs the
// teacher head (workload and memory), the spool's pricing in the report, and
// the plan's spool budget split over sections and replicas. Expectations
// are computed from the shapes of specs/tiny_kd.toml (64 tokens, teacher
// hidden 192, vocabulary 512), not copied from a run.
#include "plan/teacher_rows.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "compiler/compile.h"
#include "compiler/memory_model.h"
#include "compiler/spec.h"
#include "compiler/workload_builder.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/specs.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

constexpr int64_t kTokens = 64, kTeacherHidden = 192, kVocab = 512;

// specs/tiny_kd.toml with its edge's tensor and the student's loss replaced.
std::string TinyKd(const std::string& tensor, const std::string& loss) {
  std::string text = fixtures::ReadFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_kd.toml");
  const auto replace = [&](const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  };
  replace("tensor = \"teacher_hidden\"", "tensor = \"" + tensor + "\"");
  replace("loss = { kind = \"kd\", alpha = 0.5, temperature = 2.0, top_k = 0 }", "loss = " + loss);
  return text;
}

StatusOr<Spec> Parse(const std::string& text) {
  return ParseSpecString(text, std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_kd.toml",
                         std::string(MAESTRO_SOURCE_DIR) + "/specs");
}

struct Compiled {
  CompileResult result;
  std::vector<DeviceType> devices;
};

StatusOr<Compiled> CompileText(const std::string& text) {
  MAESTRO_ASSIGN_OR_RETURN(auto spec, Parse(text));
  CompileOptions options;
  options.grouping = Grouping::kSectioned;
  MAESTRO_ASSIGN_OR_RETURN(auto result, Compile(spec, options));
  return Compiled{std::move(result), DevicesOf(spec)};
}

std::string ErrorOf(const std::string& text) {
  auto spec = Parse(text);
  return spec.ok() ? "" : spec.status().message();
}

TEST(TeacherRows, TopKAndSampledRowsShrinkTheEdgeAndMoveTheHeadToTheTeacher) {
  struct Case {
    std::string tensor, loss;
    int64_t width;
    int form;
  };
  const Case cases[] = {
      {"teacher_hidden", "{ kind = \"kd\", temperature = 2.0 }", kTeacherHidden, -1},
      {"teacher_topk", "{ kind = \"kd\", temperature = 2.0, top_k = 16 }", 32,
       static_cast<int>(plan::TeacherRowsForm::kTopK)},
      {"teacher_sampled", "{ kind = \"kd\", temperature = 2.0, draws = 8 }", 9,
       static_cast<int>(plan::TeacherRowsForm::kSampled)},
  };
  double hidden_student_weights = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tensor);
    auto built = CompileText(TinyKd(c.tensor, c.loss));
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    const CompileResult* compiled = &built->result;
    const Workload& w = compiled->workload;
    ASSERT_EQ(w.edges.size(), 1u);
    EXPECT_DOUBLE_EQ(w.edges[0].bytes_per_sample, static_cast<double>(kTokens * c.width * 4));
    const SectionWork& teacher = w.sections[0];
    const SectionWork& student = w.sections[1];
    EXPECT_EQ(teacher.teacher_rows_form, c.form);
    EXPECT_EQ(student.kd_rows_width, c.width);
    EXPECT_EQ(student.kd_sparse_rows, c.form >= 0);
    EXPECT_EQ(student.kd_teacher_hidden, c.form >= 0 ? 0 : kTeacherHidden) << "only hidden rows need the head";
    // The same configuration: the student of top-K or sampled rows holds no
    // fp32 teacher head (V x C_teacher x 4 bytes).
    const DeviceType& dev = built->devices[static_cast<size_t>(student.device)];
    const plan::ParallelConfig config = compiled->plan.sections[1].config;
    const MemoryBreakdown m = EstimateSectionMemory(student, config, 1, 1, dev);
    if (c.form < 0) {
      hidden_student_weights = m.weights;
    } else {
      EXPECT_DOUBLE_EQ(hidden_student_weights - m.weights, 4.0 * kVocab * kTeacherHidden);
    }
  }
}

TEST(TeacherRows, TheReportPricesEachFormsSpoolAndTheSamplesItHolds) {
  struct Case {
    std::string tensor, loss, dtype;
    double bytes_per_sample;
  };
  const Case cases[] = {
      {"teacher_hidden", "{ kind = \"kd\" }", "bf16", kTokens * kTeacherHidden * 2.0},
      {"teacher_hidden", "{ kind = \"kd\" }", "f32", kTokens * kTeacherHidden * 4.0},
      {"teacher_topk", "{ kind = \"kd\", top_k = 16 }", "bf16", kTokens * 16 * (2.0 + 4.0)},
      {"teacher_topk", "{ kind = \"kd\", top_k = 16 }", "f32", kTokens * 16 * (4.0 + 4.0)},
      {"teacher_sampled", "{ kind = \"kd\" }", "bf16", kTokens * (plan::kDefaultSampledDraws + 1) * 4.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tensor + " " + c.dtype);
    const std::string text = fixtures::WithKeys(
        TinyKd(c.tensor, c.loss), {{"job", "spool_gib", "0.5"}, {"job", "spool_dtype", "\"" + c.dtype + "\""}});
    auto built = CompileText(text);
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    const CompileResult* compiled = &built->result;
    EXPECT_EQ(compiled->plan.spool_dtype, c.dtype);
    EXPECT_DOUBLE_EQ(compiled->plan.spool_gib, 0.5);
    const auto js = nlohmann::json::parse(compiled->report_json);
    ASSERT_EQ(js["spools"].size(), 1u) << "the frozen teacher keeps the one spool";
    const auto& spool = js["spools"][0];
    EXPECT_EQ(spool["section"], "teacher");
    EXPECT_DOUBLE_EQ(spool["bytes_per_sample"].get<double>(), c.bytes_per_sample);
    const double budget = spool["budget_bytes"].get<double>();
    EXPECT_NEAR(budget, 0.5 * (1 << 30), compiled->plan.sections[0].config.dp) << "one spooled section: all of it";
    EXPECT_EQ(spool["samples_fit"].get<int64_t>(), static_cast<int64_t>(budget / c.bytes_per_sample));
    EXPECT_NE(compiled->report.find("spool: section 'teacher' keeps its"), std::string::npos) << compiled->report;
  }
}

TEST(TeacherRows, SpecErrorsNameTheKeyAndTheFix) {
  EXPECT_NE(ErrorOf(TinyKd("teacher_topk", "{ kind = \"kd\" }")).find("loss.top_k must name k in [1, 512]"),
            std::string::npos);
  EXPECT_NE(ErrorOf(TinyKd("teacher_topk", "{ kind = \"kd\", top_k = 513 }")).find("loss.top_k"), std::string::npos);
  EXPECT_NE(ErrorOf(TinyKd("teacher_sampled", "{ kind = \"kd\", top_k = 8 }")).find("remove top_k"), std::string::npos);
  EXPECT_NE(ErrorOf(TinyKd("teacher_hidden", "{ kind = \"kd\", draws = 8 }")).find("remove draws"), std::string::npos);
  EXPECT_NE(ErrorOf(TinyKd("teacher_sampled", "{ kind = \"kd\", draws = 0 }")).find("draws"), std::string::npos);
  const std::string unknown = ErrorOf(TinyKd("teacher_logits", "{ kind = \"kd\" }"));
  EXPECT_NE(unknown.find("\"teacher_topk\""), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("\"teacher_sampled\""), std::string::npos) << unknown;
  EXPECT_NE(ErrorOf(TinyKd("teacher_hidden", "{ kind = \"lm\", draws = 4 }")).find("kind = \"kd\" only"),
            std::string::npos);
  const std::string dtype =
      ErrorOf(fixtures::WithKeys(TinyKd("teacher_hidden", "{ kind = \"kd\" }"), {{"job", "spool_dtype", "\"fp8\""}}));
  EXPECT_NE(dtype.find("job.spool_dtype = 'fp8' must be bf16, f16 or f32"), std::string::npos) << dtype;
  EXPECT_EQ(ErrorOf(TinyKd("teacher_sampled", "{ kind = \"kd\", draws = 32 }")), "");
}

// plan::KeepsSpool and plan::SpoolBudgetPerWriter on a plan built by hand:
// the budget splits equally over the sections that keep a spool, then over
// each one's replicas; a section that keeps none gets nothing.
TEST(TeacherRows, TheSpoolBudgetSplitsOverSpooledSectionsThenReplicas) {
  plan::Plan p;
  plan::AppendSingleNodeSection(p, "vit", 1, 1, 2, 1);      // frozen, feeds: spooled
  plan::AppendSingleNodeSection(p, "teacher", 1, 1, 4, 1);  // frozen, feeds: spooled
  plan::AppendSingleNodeSection(p, "pp_teacher", 1, 1, 1, 2);
  plan::AppendSingleNodeSection(p, "llm", 1, 1, 2, 1);
  plan::AppendSingleNodeSection(p, "tp_teacher", 2, 1, 1, 1);
  plan::AppendSingleNodeSection(p, "cp_teacher", 1, 2, 1, 1);
  plan::AppendSingleNodeSection(p, "tp_projector", 2, 1, 1, 1);
  for (auto& s : p.sections) s.mode = s.name == "llm" ? plan::SectionMode::kTrain : plan::SectionMode::kForward;
  p.edges.push_back({"vit", "llm", "image_embeddings", 4096, false});
  p.edges.push_back({"teacher", "llm", "teacher_hidden", 4096, false});
  p.edges.push_back({"pp_teacher", "llm", "teacher_hidden", 4096, false});
  p.edges.push_back({"tp_teacher", "llm", "teacher_hidden", 4096, false});
  p.edges.push_back({"cp_teacher", "llm", "teacher_hidden", 4096, false});
  p.edges.push_back({"vit", "tp_projector", "image_embeddings", 4096, false});
  p.edges.push_back({"tp_projector", "llm", "image_embeddings", 4096, false});
  p.spool_gib = 9;
  EXPECT_TRUE(plan::KeepsSpool(p, 0));
  EXPECT_TRUE(plan::KeepsSpool(p, 1));
  EXPECT_FALSE(plan::KeepsSpool(p, 2)) << "pipeline-parallel without run-ahead";
  EXPECT_FALSE(plan::KeepsSpool(p, 3)) << "it trains";
  EXPECT_TRUE(plan::KeepsSpool(p, 4)) << "tensor-parallel, fed by no section: its TP rank 0 writes";
  EXPECT_FALSE(plan::KeepsSpool(p, 5)) << "context-parallel without run-ahead";
  EXPECT_FALSE(plan::KeepsSpool(p, 6)) << "tensor-parallel, fed by a section, without run-ahead";
  EXPECT_EQ(plan::SpoolBudgetPerWriter(p, 0), (int64_t{9} << 30) / 3 / 2);
  EXPECT_EQ(plan::SpoolBudgetPerWriter(p, 1), (int64_t{9} << 30) / 3 / 4);
  EXPECT_EQ(plan::SpoolBudgetPerWriter(p, 2), 0);
  EXPECT_EQ(plan::SpoolBudgetPerWriter(p, 4), (int64_t{9} << 30) / 3 / 1);
  p.sections[2].run_ahead = 2;
  EXPECT_TRUE(plan::KeepsSpool(p, 2)) << "run ahead: its owner keeps one";
  EXPECT_EQ(plan::SpoolBudgetPerWriter(p, 1), (int64_t{9} << 30) / 4 / 4);
}

}  // namespace
}  // namespace maestro::compiler
