// SPDX-License-Identifier: Apache-2.0
// runtime/kernel_profile.h: the GPU grid mirrors compiler/devices/h100_sxm.json
// (so a cluster's own file is read like the reference one), bad grids are
// refused naming the option, CUDA asked for where there is none says why;
// on a GPU (label gpu) a small sweep in bf16 that the compiler parses.
// No torch headers here.
#include "runtime/kernel_profile.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "compiler/device_profile.h"
#include "runtime/section_speed.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::runtime {
namespace {

TEST(KernelProfile, TheGpuGridMirrorsTheH100Reference) {
  auto h100 = compiler::BuiltinDeviceProfile("h100_sxm");
  ASSERT_TRUE(h100.ok()) << h100.status().ToString();
  const KernelProfileOptions grid = DefaultKernelProfileGrid({}, "cuda");
  ASSERT_EQ(grid.gemm_rows.size(), h100->gemm.size());
  for (size_t i = 0; i < grid.gemm_rows.size(); ++i) {
    EXPECT_EQ(grid.gemm_rows[i].k, h100->gemm[i].k) << i;
    EXPECT_EQ(grid.gemm_rows[i].n, h100->gemm[i].n) << i;
    EXPECT_EQ(grid.gemm_rows[i].label, h100->gemm[i].label) << i;
  }
  // Every M of the reference (its noisy point included: the first row has them all).
  const std::vector<double>& reference_m = h100->gemm.front().m;
  ASSERT_EQ(grid.gemm_m.size(), reference_m.size());
  for (size_t i = 0; i < reference_m.size(); ++i) EXPECT_EQ(static_cast<double>(grid.gemm_m[i]), reference_m[i]);
  ASSERT_EQ(grid.attention_rows.size(), h100->attention.size());
  for (size_t i = 0; i < grid.attention_rows.size(); ++i) {
    EXPECT_EQ(grid.attention_rows[i].heads, h100->attention[i].heads) << i;
    EXPECT_EQ(grid.attention_rows[i].head_dim, h100->attention[i].head_dim) << i;
    ASSERT_EQ(grid.attention_t.size(), h100->attention[i].t.size());
    for (size_t j = 0; j < grid.attention_t.size(); ++j) {
      EXPECT_EQ(static_cast<double>(grid.attention_t[j]), h100->attention[i].t[j]);
    }
  }
  EXPECT_EQ(grid.attention_tokens, 16384);  // B x T of the reference's attention table
  // The validation decoder is one of the reference's cases.
  bool found = false;
  for (const auto& c : h100->validation) {
    found = found || (c.model == grid.validation.model && c.micro_batch == grid.validation.micro_batch &&
                      c.seq_len == grid.validation.seq_len);
  }
  EXPECT_TRUE(found) << grid.validation.model;
}

TEST(KernelProfile, UserGridsAreKeptAndDefaultsFillTheRest) {
  KernelProfileOptions o;
  o.gemm_m = {8, 16};
  o.repeats = 7;
  const KernelProfileOptions cpu = DefaultKernelProfileGrid(o, "cpu");
  EXPECT_EQ(cpu.gemm_m, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(cpu.repeats, 7);
  EXPECT_EQ(cpu.warmup, 2);
  EXPECT_FALSE(cpu.gemm_rows.empty());
  EXPECT_FALSE(cpu.attention_rows.empty());
  o.quick = true;
  o.repeats = -1;
  EXPECT_EQ(DefaultKernelProfileGrid(o, "cpu").repeats, 3);
  EXPECT_LT(DefaultKernelProfileGrid(o, "cpu").attention_t.size(),
            DefaultKernelProfileGrid({}, "cpu").attention_t.size());
}

TEST(KernelProfile, BadGridsAreRefusedNamingTheOption) {
  const auto message = [](const KernelProfileOptions& o) {
    const Status s = CheckKernelProfileOptions(o);
    EXPECT_FALSE(s.ok());
    return s.message();
  };
  KernelProfileOptions o;
  o.gemm_m = {256, 64};
  EXPECT_NE(message(o).find("--gemm-m must be strictly ascending (256 then 64)"), std::string::npos);
  o = {};
  o.attention_t = {0, 64};
  EXPECT_NE(message(o).find("--attention-t values must be positive"), std::string::npos);
  o = {};
  o.gemm_rows = {{256, 1024, ""}, {256, 1024, "again"}};
  EXPECT_NE(message(o).find("--gemm-rows lists K 256, N 1024 twice"), std::string::npos);
  o = {};
  o.attention_rows = {{32, 64}, {16, 64}};
  EXPECT_NE(message(o).find("head_dim 64 twice"), std::string::npos);
  o = {};
  o.device = "tpu";
  EXPECT_NE(message(o).find("--device must be auto, cpu or cuda"), std::string::npos);
  EXPECT_TRUE(CheckKernelProfileOptions({}).ok());
}

TEST(KernelProfile, AnOutputPathIsCheckedBeforeMeasuring) {
  const std::string tmp = MAESTRO_TEST_TMP;
  EXPECT_TRUE(CheckProfileOutputPath(tmp + "/device.json").ok());
  const Status missing = CheckProfileOutputPath(tmp + "/no-such-folder/device.json");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("mkdir -p " + tmp + "/no-such-folder"), std::string::npos) << missing.message();
  const Status folder = CheckProfileOutputPath(tmp);
  EXPECT_EQ(folder.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(folder.message().find("is a folder"), std::string::npos) << folder.message();
}

// maestro-kernel-profile --device cuda where CUDA is missing: an error that
// says why and names --device cpu. On a machine with a GPU the device is
// hidden from the tool (CUDA_VISIBLE_DEVICES empty), so this runs, and
// checks, everywhere.
TEST(KernelProfile, CudaWithoutADeviceSaysWhyAndPointsAtTheCpu) {
  std::string why;
  const bool cuda = CudaUsable(&why);
  if (cuda) why = "no CUDA device is visible";
  // The build's own paths (no quoting needed); stderr into the output.
  const std::string command = std::string(cuda ? "CUDA_VISIBLE_DEVICES= " : "") + MAESTRO_BIN_DIR +
                              "/maestro-kernel-profile --device cuda -o " + MAESTRO_TEST_TMP +
                              "/kernel_profile_no_cuda.json 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << command;
  std::string output;
  char chunk[4096];
  for (size_t n; (n = fread(chunk, 1, sizeof chunk, pipe)) > 0;) output.append(chunk, n);
  const int status = pclose(pipe);
  EXPECT_NE(status, 0) << output;
  EXPECT_NE(output.find(why), std::string::npos) << output;
  EXPECT_NE(output.find("--device cpu"), std::string::npos) << output;
}

// On a GPU: a small bf16 sweep (a minute at most) that the compiler parses.
TEST(KernelProfileGpu, ASmallBf16SweepIsADeviceProfile) {
  std::string why;
  if (!CudaUsable(&why)) GTEST_SKIP() << why;
  KernelProfileOptions o;
  o.device = "cuda";
  o.quick = true;
  o.gemm_m = {1024, 4096};
  o.gemm_rows = {{2048, 8192, ""}, {2048, 1024, ""}};
  o.attention_t = {1024, 4096};
  o.attention_rows = {{32, 64}, {32, 128}};
  o.validation = {"small decoder", 512, 2, 8, 4, 1536, 4096, true, 2, 256};
  auto profile = MeasureKernelProfile(o, {});
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  EXPECT_EQ(profile->at("dtype"), "bf16");
  auto parsed = compiler::ParseDeviceProfile(profile->dump(), "gpu sweep");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->gemm.size(), 2u);
  EXPECT_EQ(parsed->attention.size(), 2u);
  ASSERT_EQ(parsed->validation.size(), 1u);
  EXPECT_GT(parsed->validation[0].seconds_per_step, 0.0);
  EXPECT_NE(profile->at("gemm").at("source").get<std::string>().find("bf16"), std::string::npos);
}

}  // namespace
}  // namespace maestro::runtime
