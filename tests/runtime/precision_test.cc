// SPDX-License-Identifier: Apache-2.0
// Device placement and precision (issue #19 item 3), one torch TU:
//  - runtime/device_choice.h: which device and precision a rank gets from
//    --device / --precision, the plan's GPUs and what libtorch sees;
//  - runtime/torch_compat.h: bf16 autocast on a scope and its weight-cast
//    cache, GQA inside SDPA, the fused AdamW step against the loop;
//  - runtime/device_staging.h: copies between the compute device and the wire;
//  - SectionRunner under bf16: fp32 masters and gradients, bf16 frozen
//    weights, a loss near fp32's; checkpoints that load on another device.
// CUDA cases skip without a CUDA device (label gpu), the fused-AdamW CPU case
// on a libtorch without the kernel (1.13).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "runtime/device_choice.h"
#include "runtime/device_staging.h"
#include "runtime/section_runner.h"
#include "runtime/torch_compat.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::runtime {
namespace {

// ---- device_choice.h ----

ComputeFacts Facts(int gpus_per_task, int local_gpu, int local_rank, int cuda_devices) {
  ComputeFacts f;
  f.gpus_per_task = gpus_per_task;
  f.local_gpu = local_gpu;
  f.local_rank = local_rank;
  f.cuda_devices = cuda_devices;
  return f;
}

TEST(DeviceChoice, ACpuPlanComputesOnTheCpuInFp32EvenWithAGpu) {
  auto c = ChooseCompute(DeviceRequest::kAuto, PrecisionRequest::kAuto, Facts(0, -1, 0, 2));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->cuda());
  EXPECT_EQ(c->precision, Precision::kFp32);
  EXPECT_EQ(c->ToString(), "cpu fp32");
}

TEST(DeviceChoice, AGpuPlanUsesTheRanksLocalGpuInBf16) {
  auto c = ChooseCompute(DeviceRequest::kAuto, PrecisionRequest::kAuto, Facts(1, 1, 1, 2));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cuda_device, 1);
  EXPECT_EQ(c->precision, Precision::kBf16);
  EXPECT_EQ(c->ToString(), "cuda:1 bf16");
  EXPECT_TRUE(c->note.empty());
}

TEST(DeviceChoice, AGpuPlanOnACpuLibtorchRunsOnTheCpuAndSaysWhy) {
  auto c = ChooseCompute(DeviceRequest::kAuto, PrecisionRequest::kAuto, Facts(1, 0, 0, 0));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->cuda());
  EXPECT_EQ(c->precision, Precision::kFp32);
  EXPECT_NE(c->note.find("no CUDA device"), std::string::npos) << c->note;
}

TEST(DeviceChoice, AGpuBeyondTheVisibleDevicesIsAnError) {
  auto c = ChooseCompute(DeviceRequest::kAuto, PrecisionRequest::kAuto, Facts(1, 3, 3, 2));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("GPU 3"), std::string::npos) << c.status().ToString();
}

TEST(DeviceChoice, ExplicitCudaSharesTheDevicesRoundRobinAndNeedsOne) {
  auto c = ChooseCompute(DeviceRequest::kCuda, PrecisionRequest::kAuto, Facts(0, -1, 3, 2));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cuda_device, 1);
  EXPECT_EQ(c->precision, Precision::kBf16);
  auto none = ChooseCompute(DeviceRequest::kCuda, PrecisionRequest::kAuto, Facts(0, -1, 0, 0));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
}

TEST(DeviceChoice, ExplicitDeviceAndPrecisionAreTakenAsAsked) {
  auto cpu_bf16 = ChooseCompute(DeviceRequest::kCpu, PrecisionRequest::kBf16, Facts(1, 0, 0, 1));
  ASSERT_TRUE(cpu_bf16.ok());
  EXPECT_FALSE(cpu_bf16->cuda());
  EXPECT_EQ(cpu_bf16->precision, Precision::kBf16);
  auto cuda_fp32 = ChooseCompute(DeviceRequest::kAuto, PrecisionRequest::kFp32, Facts(1, 0, 0, 1));
  ASSERT_TRUE(cuda_fp32.ok());
  EXPECT_EQ(cuda_fp32->cuda_device, 0);
  EXPECT_EQ(cuda_fp32->precision, Precision::kFp32);
}

TEST(DeviceChoice, ParsersTakeTheDocumentedWordsOnly) {
  EXPECT_EQ(*ParseDeviceRequest("cuda"), DeviceRequest::kCuda);
  EXPECT_EQ(*ParsePrecisionRequest("bf16"), PrecisionRequest::kBf16);
  EXPECT_FALSE(ParseDeviceRequest("gpu").ok());
  EXPECT_FALSE(ParsePrecisionRequest("fp16").ok());
}

// ---- torch_compat.h ----

TEST(Autocast, LinearRunsInBf16InsideTheGuardOnlyAndTheStateIsRestored) {
  torch::manual_seed(1);
  auto x = torch::randn({4, 8});
  auto w = torch::randn({3, 8});
  {
    compat::AutocastGuard off(torch::kCPU, /*enabled=*/false);
    EXPECT_EQ(torch::linear(x, w).scalar_type(), torch::kFloat32);
  }
  torch::Tensor y;
  {
    compat::AutocastGuard on(torch::kCPU, /*enabled=*/true);
    y = torch::linear(x, w);
  }
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(torch::linear(x, w).scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::allclose(y.to(torch::kFloat32), torch::linear(x, w), 2e-2, 5e-2));
  compat::ClearAutocastCache();
}

// The cast of a weight is cached across guards (one bf16 copy per step);
// after the weight changes, ClearAutocastCache makes the next forward read it.
TEST(Autocast, ClearingTheCacheAfterAnUpdateUsesTheNewWeights) {
  torch::manual_seed(2);
  auto x = torch::randn({4, 8});
  auto w = torch::randn({3, 8}).set_requires_grad(true);
  torch::Tensor before, stale, fresh;
  {
    compat::AutocastGuard on(torch::kCPU, true);
    before = torch::linear(x, w).detach();
  }
  {
    torch::NoGradGuard no_grad;
    w.add_(1.0);
  }
  {
    compat::AutocastGuard on(torch::kCPU, true);
    stale = torch::linear(x, w).detach();
  }
  compat::ClearAutocastCache();
  {
    compat::AutocastGuard on(torch::kCPU, true);
    fresh = torch::linear(x, w).detach();
  }
  compat::ClearAutocastCache();
  EXPECT_TRUE(torch::equal(before, stale)) << "the cast is cached until cleared (what SectionRunner relies on)";
  EXPECT_TRUE(torch::allclose(fresh.to(torch::kFloat32), torch::linear(x, w.detach()), 2e-2, 1e-1));
  EXPECT_FALSE(torch::allclose(fresh, stale));
}

TEST(GqaAttention, EqualsAttentionOverRepeatedKvHeads) {
  torch::manual_seed(3);
  auto q = torch::randn({2, 4, 5, 8});  // (B, H, T, D)
  auto k = torch::randn({2, 2, 5, 8});  // (B, K, S, D)
  auto v = torch::randn({2, 2, 5, 8});
  for (bool causal : {true, false}) {
    auto want = compat::ScaledDotProductAttention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), causal);
    auto got = compat::GqaAttention(q, k, v, causal);
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-6)) << "causal " << causal;
  }
}

// Three steps of the fused AdamW against torch::optim::AdamW's loop, from the
// same weights and gradients, on `device`.
void ExpectFusedAdamWEqualsTheLoop(const torch::Device& device) {
  torch::manual_seed(4);
  const auto options = torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).weight_decay(0.1).eps(1e-8);
  std::vector<torch::Tensor> a{torch::randn({5, 3}, device).set_requires_grad(true),
                               torch::randn({7}, device).set_requires_grad(true)};
  std::vector<torch::Tensor> b{a[0].detach().clone().set_requires_grad(true),
                               a[1].detach().clone().set_requires_grad(true)};
  torch::optim::AdamW loop(a, options), fused(b, options);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      auto g = torch::randn(a[i].sizes(), device);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    loop.step();
    compat::FusedAdamWStep(fused);
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << "parameter " << i;
  }
  // The same state layout: the fused optimizer's archive loads into the loop's.
  std::ostringstream out;
  torch::serialize::OutputArchive archive;
  fused.save(archive);
  archive.save_to(out);
  torch::serialize::InputArchive in_archive;
  std::istringstream in(out.str());
  in_archive.load_from(in, device);
  torch::optim::AdamW reloaded(a, options);
  reloaded.load(in_archive);
  EXPECT_EQ(reloaded.state().size(), fused.state().size());
}

TEST(FusedAdamW, EqualsTheLoopOnTheCpuWhereLibtorchHasIt) {
  if (!compat::FusedAdamWAvailable(torch::kCPU)) {
    GTEST_SKIP() << "libtorch " << TORCH_VERSION << " has no CPU at::_fused_adamw_ (2.4+): the loop runs";
  }
  ExpectFusedAdamWEqualsTheLoop(torch::kCPU);
}

TEST(FusedAdamW, EqualsTheLoopOnCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(compat::FusedAdamWAvailable(torch::Device(torch::kCUDA, 0)))
      << "a CUDA libtorch 2.1+ has at::_fused_adamw_";
  ExpectFusedAdamWEqualsTheLoop(torch::Device(torch::kCUDA, 0));
}

// ---- device_staging.h ----

TEST(TransferStaging, OnTheCpuWireTensorsAreFp32AndNothingIsCopiedTwice) {
  TransferStaging staging(torch::kCPU);
  EXPECT_FALSE(staging.streamed());
  auto bf16 = torch::randn({3, 4}).to(torch::kBFloat16);
  auto wire = staging.ToWire(bf16, launcher::Device::kCpu);
  EXPECT_EQ(wire.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(wire.is_contiguous());
  EXPECT_TRUE(torch::equal(wire, bf16.to(torch::kFloat32)));
  auto host = torch::randn({2, 5});
  EXPECT_EQ(staging.ToCompute(host).data_ptr(), host.data_ptr());  // no copy: the same memory
  EXPECT_EQ(staging.ToWire(host, launcher::Device::kCpu).data_ptr(), host.data_ptr());
  EXPECT_FALSE(staging.WireBuffer({2, 2}, launcher::Device::kCpu).is_pinned());
}

TEST(TransferStaging, OnCudaRowsRoundTripThroughPinnedHostBuffers) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA, 0);
  TransferStaging staging(cuda);
  EXPECT_TRUE(staging.streamed());
  auto rows = torch::randn({6, 16, 32}, cuda).to(torch::kBFloat16);
  auto host = staging.ToWire(rows, launcher::Device::kCpu);
  EXPECT_FALSE(host.is_cuda());
  EXPECT_TRUE(host.is_pinned());
  EXPECT_EQ(host.scalar_type(), torch::kFloat32);
  auto back = staging.ToCompute(host);
  EXPECT_TRUE(back.is_cuda());
  EXPECT_TRUE(torch::equal(back, rows.to(torch::kFloat32)));
  auto buffer = staging.WireBuffer({4}, launcher::Device::kCpu);
  EXPECT_TRUE(buffer.is_pinned());
  EXPECT_TRUE(staging.WireBuffer({4}, launcher::Device::kCuda).is_cuda());
}

// ---- SectionRunner under bf16 ----

plan::Plan TinyKdPlan() {
  auto spec = compiler::ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_kd.toml");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  compiler::CompileOptions options;
  options.grouping = compiler::Grouping::kSectioned;
  auto compiled = compiler::Compile(*spec, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status().ToString();
  plan::Plan p = compiled->plan;
  for (auto& s : p.sections) {
    s.init_from.clear();
    if (s.name == "student") {
      s.loss.kind = "kd";
      s.loss.kd_alpha = 0.5;
      s.loss.temperature = 2.0;
    }
  }
  return p;
}

// One micro-batch of the teacher then the student, forward and backward;
// returns the student's loss.
double TeacherStudentLoss(const plan::Plan& p, const RunnerOptions& options, SectionRunner** student_out,
                          std::unique_ptr<SectionRunner>* teacher_keep, std::unique_ptr<SectionRunner>* student_keep) {
  const int t = p.section_index("teacher"), s = p.section_index("student");
  auto teacher = SectionRunner::Create(p, t, options);
  EXPECT_TRUE(teacher.ok()) << teacher.status().ToString();
  auto student = SectionRunner::Create(p, s, options);
  EXPECT_TRUE(student.ok()) << student.status().ToString();
  MicroBatchData data;
  data.sample_ids = {0, 1};
  torch::manual_seed(5);
  data.input_ids = torch::randint(0, (*student)->section_plan().model.vocab, {2, p.data.seq_len});
  data.target_ids = data.input_ids.roll(-1, 1);
  data.image_counts = {0, 0};
  data.answer_positions = {-1, -1};
  data.labels = {-1, -1};
  auto rows = (*teacher)->Forward(data, {});
  EXPECT_TRUE(rows.ok()) << rows.status().ToString();
  std::map<int, torch::Tensor> inputs{{(*student)->in_edges().at(0), rows->rows.to(torch::kFloat32)}};
  auto out = (*student)->Forward(data, inputs);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  out->loss.backward();
  *student_out = student->get();
  *teacher_keep = std::move(*teacher);
  *student_keep = std::move(*student);
  return out->loss.item<double>();
}

TEST(SectionRunnerBf16, KeepsFp32MastersAndGradientsBf16FrozenWeightsAndALossNearFp32) {
  const plan::Plan p = TinyKdPlan();
  RunnerOptions fp32, bf16;
  bf16.precision = Precision::kBf16;
  SectionRunner *s32 = nullptr, *s16 = nullptr;
  std::unique_ptr<SectionRunner> t32k, s32k, t16k, s16k;
  const double loss32 = TeacherStudentLoss(p, fp32, &s32, &t32k, &s32k);
  const double loss16 = TeacherStudentLoss(p, bf16, &s16, &t16k, &s16k);
  for (const auto& w : t16k->module().parameters()) EXPECT_EQ(w.scalar_type(), torch::kBFloat16);
  for (const auto& w : s16->Parameters()) {
    EXPECT_EQ(w.scalar_type(), torch::kFloat32);
    ASSERT_TRUE(w.grad().defined());
    EXPECT_EQ(w.grad().scalar_type(), torch::kFloat32);
  }
  // bf16 keeps 8 bits of mantissa: the loss moves, by much less than 2%.
  EXPECT_NE(loss16, loss32);
  EXPECT_NEAR(loss16, loss32, 2e-2 * std::abs(loss32));
  EXPECT_GT(s16->OptimizerStep(0), 0.0);
}

TEST(SectionRunnerDevices, ACheckpointSavedOnCudaLoadsOnTheCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const plan::Plan p = TinyKdPlan();
  const int s = p.section_index("student");
  RunnerOptions cuda;
  cuda.device = torch::Device(torch::kCUDA, 0);
  cuda.precision = Precision::kBf16;
  auto on_gpu = SectionRunner::Create(p, s, cuda);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().ToString();
  {
    torch::NoGradGuard no_grad;  // weights no seed gives: a load that did nothing fails below
    for (auto& w : (*on_gpu)->Parameters()) w.add_(0.5);
  }
  auto model = (*on_gpu)->SaveModel();
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto on_cpu = SectionRunner::Create(p, s, RunnerOptions{});
  ASSERT_TRUE(on_cpu.ok());
  ASSERT_TRUE((*on_cpu)->LoadModel(*model).ok());
  auto a = (*on_gpu)->Parameters();
  auto b = (*on_cpu)->Parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(b[i].device().is_cpu());
    EXPECT_TRUE(torch::equal(a[i].cpu(), b[i]));
  }
}

}  // namespace
}  // namespace maestro::runtime
