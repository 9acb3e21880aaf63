// SPDX-License-Identifier: Apache-2.0
// SpoolRowCodec (runtime/output_spool.h): how each KD teacher row form and
// a plain section's rows are kept in the spool. Packed top-K and sampled
// rows come back bit for bit; hidden rows come back rounded to the plan's
// spool dtype, as the wire hands them on; a stored row of another size is
// a miss, never a wrong row. The name (part of the spool file's name)
// differs per form, K, draws and dtype.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstddef>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "plan/teacher_rows.h"
#include "runtime/output_spool.h"

namespace maestro::runtime {
namespace {

// teacher -> student, both decoders, the edge carrying `tensor`.
plan::Plan KdPlan(const std::string& tensor, int top_k, int draws, const std::string& dtype) {
  plan::Plan p;
  plan::AppendSingleNodeSection(p, "teacher", 1, 1, 1, 1);
  plan::AppendSingleNodeSection(p, "student", 1, 1, 1, 1);
  p.sections[0].mode = plan::SectionMode::kForward;
  p.sections[0].model.hidden = 24;
  p.sections[1].loss.kind = "kd";
  p.sections[1].loss.top_k = top_k;
  p.sections[1].loss.draws = draws;
  p.edges.push_back({"teacher", "student", tensor, 0, false});
  p.spool_dtype = dtype;
  return p;
}

// (L, W) fp32 rows of a form: top-K values in descending order rounded to
// bf16 and ids < V; sampled ids < V and an entropy; hidden values.
torch::Tensor RowOf(plan::TeacherRowsForm form, int64_t l, int64_t k) {
  torch::manual_seed(3);
  switch (form) {
    case plan::TeacherRowsForm::kTopK: {
      auto values = std::get<0>(torch::randn({l, k}).sort(-1, true)).to(torch::kBFloat16).to(torch::kFloat32);
      auto ids = torch::randint(0, 152064, {l, k}).to(torch::kFloat32);
      return torch::cat({values, ids}, 1);
    }
    case plan::TeacherRowsForm::kSampled:
      return torch::cat({torch::randint(0, 152064, {l, k}).to(torch::kFloat32), torch::rand({l, 1}) * 5}, 1);
    case plan::TeacherRowsForm::kHidden: return torch::randn({l, k});
  }
  return {};
}

TEST(SpoolRowCodec, PackedRowsComeBackBitForBitAndTakeTheirPricedBytes) {
  constexpr int64_t kL = 16;
  struct Case {
    std::string tensor;
    int top_k, draws;
    plan::TeacherRowsForm form;
    int64_t width;
    std::string name;
  };
  const Case cases[] = {
      {plan::kTeacherTopKTensor, 8, 0, plan::TeacherRowsForm::kTopK, 16, "topk8-bf16"},
      {plan::kTeacherSampledTensor, 0, 5, plan::TeacherRowsForm::kSampled, 6, "sampled5"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const plan::Plan p = KdPlan(c.tensor, c.top_k, c.draws, "bf16");
    const SpoolRowCodec codec = SpoolRowCodec::For(p, 0);
    EXPECT_EQ(codec.name(), c.name);
    EXPECT_EQ(codec.dtype(), datalayer::DType::kU8);
    const auto row = RowOf(c.form, kL, c.top_k > 0 ? c.top_k : c.draws);
    ASSERT_EQ(row.size(1), c.width);
    std::vector<int64_t> dims;
    const auto bytes = codec.Encode(row, &dims);
    const auto sent = plan::TeacherRowsOf(p, 0);
    ASSERT_TRUE(sent.has_value());
    EXPECT_EQ(static_cast<int64_t>(bytes.size()), kL * plan::SpoolBytesPerPosition(c.form, 24, sent->loss, "bf16"));
    EXPECT_EQ(dims, std::vector<int64_t>{static_cast<int64_t>(bytes.size())});
    auto back = torch::full_like(row, -7);
    ASSERT_TRUE(codec.Decode(bytes, back));
    EXPECT_TRUE(torch::equal(back, row));
    auto shorter = bytes;
    shorter.pop_back();
    auto untouched = torch::full_like(row, -7);
    EXPECT_FALSE(codec.Decode(shorter, untouched)) << "a row of another size is a miss";
    EXPECT_TRUE(torch::equal(untouched, torch::full_like(row, -7)));
  }
}

TEST(SpoolRowCodec, HiddenRowsComeBackInTheSpoolDtype) {
  const auto row = RowOf(plan::TeacherRowsForm::kHidden, 16, 24);
  for (const std::string dtype : {"bf16", "f16", "f32"}) {
    SCOPED_TRACE(dtype);
    const SpoolRowCodec codec = SpoolRowCodec::For(KdPlan(plan::kTeacherHiddenTensor, 0, 0, dtype), 0);
    EXPECT_EQ(codec.name(), dtype);
    const auto type = dtype == "bf16" ? torch::kBFloat16 : dtype == "f16" ? torch::kHalf : torch::kFloat32;
    std::vector<int64_t> dims;
    const auto bytes = codec.Encode(row, &dims);
    EXPECT_EQ(dims, (std::vector<int64_t>{16, 24}));
    EXPECT_EQ(bytes.size(), static_cast<size_t>(16 * 24 * (dtype == "f32" ? 4 : 2)));
    auto back = torch::empty_like(row);
    ASSERT_TRUE(codec.Decode(bytes, back));
    EXPECT_TRUE(torch::equal(back, row.to(type).to(torch::kFloat32)));
    if (dtype != "f32") {
      EXPECT_FALSE(torch::equal(back, row)) << "rounded";
    }
  }
  // A section that sends no KD rows (an encoder's, or a decoder into a
  // projector) is kept as plain values too.
  plan::Plan p = KdPlan("image_embeddings", 0, 0, "bf16");
  p.sections[0].model.kind = plan::ModelKind::kVit;
  EXPECT_EQ(SpoolRowCodec::For(p, 0).name(), "bf16");
  EXPECT_EQ(SpoolRowCodec::For(p, 0).dtype(), datalayer::DType::kBF16);
}

// The spool's folder (OutputSpool::Open) names what its rows depend on: the
// same for a plan that differs in steps or global batch, another for
// another teacher, dataset shape or form, so rows are never read as
// another's.
TEST(OutputSpool, ItsFolderNamesTheTeacherTheDataAndTheForm) {
  const std::string run_dir = ::testing::TempDir() + "/spool_identity";
  const auto folder = [&](const plan::Plan& p) {
    auto spool = OutputSpool::Open(run_dir, p, 0, 1);  // replica 1: recovers nothing
    EXPECT_TRUE(spool.ok()) << spool.status().ToString();
    return spool.ok() ? (*spool)->folder() : std::string();
  };
  const plan::Plan base = KdPlan(plan::kTeacherTopKTensor, 8, 0, "bf16");
  const std::string a = folder(base);
  EXPECT_NE(a.find("/spool/teacher-topk8-bf16-"), std::string::npos) << a;
  plan::Plan longer = base;
  longer.data.steps = 1000;
  longer.data.global_batch = 64;
  EXPECT_EQ(folder(longer), a) << "how long the job is changes no row";
  plan::Plan other_teacher = base;
  other_teacher.sections[0].init_from = "/runs/other_teacher";
  EXPECT_NE(folder(other_teacher), a);
  plan::Plan other_data = base;
  other_data.data.seq_len = 2 * base.data.seq_len + 1;
  EXPECT_NE(folder(other_data), a);
  plan::Plan other_temperature = base;
  other_temperature.sections[1].loss.temperature = 3.0;
  EXPECT_NE(folder(other_temperature), a) << "the student's loss is part of a KD teacher's rows";
  EXPECT_NE(folder(KdPlan(plan::kTeacherTopKTensor, 16, 0, "bf16")), a);
}

}  // namespace
}  // namespace maestro::runtime
