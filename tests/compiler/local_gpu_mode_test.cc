// SPDX-License-Identifier: Apache-2.0
// Local mode on a machine's GPUs (--local N --local-gpu NAME, what `maestro
// run` compiles with when it finds GPUs; issue #43): a GPU's name mapped to
// a device profile (compiler/local_gpu_type.h), every section on GPUs one
// rank each, an unknown type priced with the default tables and the
// report's note, a spec's own declaration of the type, and the refusal of a
// spec that needs more ranks than there are GPUs.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "compiler/compile.h"
#include "compiler/device_profile.h"
#include "compiler/local_gpu_type.h"
#include "compiler/spec.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

Spec Load(const std::string& name) {
  auto spec = ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/" + name);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.ok() ? *spec : Spec{};
}

CompileOptions OnGpus(int gpus, const std::string& name, double memory_gb = 0) {
  CompileOptions o;
  o.local_ranks = gpus;
  o.local_gpu = name;
  o.local_gpu_memory_gb = memory_gb;
  return o;
}

TEST(LocalGpuType, CudaNamesAndProfileNamesMapToDeviceProfiles) {
  for (const char* name : {"NVIDIA H100 80GB HBM3", "h100_sxm", "NVIDIA H100 SXM5 80GB"}) {
    const LocalGpuType t = LocalGpuTypeOf(name);
    EXPECT_EQ(t.type, "h100_sxm") << name;
    EXPECT_TRUE(t.has_profile) << name;
    EXPECT_EQ(t.note, "") << name;
  }
  const LocalGpuType pcie = LocalGpuTypeOf("NVIDIA H100 PCIe");
  EXPECT_EQ(pcie.type, "h100_pcie");
  EXPECT_FALSE(pcie.has_profile);
  EXPECT_NE(pcie.note.find("no device profile"), std::string::npos) << pcie.note;
  EXPECT_NE(pcie.note.find("maestro profile --kernels"), std::string::npos) << pcie.note;
  // An H200 maps to h200, priced with its own profile once compiler/devices has one.
  const LocalGpuType h200 = LocalGpuTypeOf("NVIDIA H200");
  EXPECT_EQ(h200.type, "h200");
  EXPECT_EQ(h200.has_profile, BuiltinDeviceProfile("h200").ok());
  EXPECT_EQ(LocalGpuTypeOf("NVIDIA RTX 6000 Ada Generation").type, "rtx_6000_ada_generation");
  EXPECT_EQ(LocalGpuTypeOf("\n$(rm -rf /)").type, "rm_rf");  // only letters, digits and '_' reach a plan
}

TEST(LocalGpuMode, EverySectionOnGpusOneRankEach) {
  const Spec spec = Load("tiny_vlm.toml");
  for (int gpus : {2, 8}) {
    CompileOptions o = OnGpus(gpus, "NVIDIA H100 80GB HBM3", 85.9);
    o.grouping = Grouping::kSectioned;
    auto r = Compile(spec, o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_LE(r->plan.world_size(), gpus);
    EXPECT_EQ(r->plan.shared_cores, 0);  // each rank computes on its own GPU
    for (const auto& s : r->plan.sections) {
      EXPECT_EQ(s.placement.gpus_per_task, 1) << s.name;
      EXPECT_EQ(s.placement.gpu_type, "h100_sxm") << s.name;
      EXPECT_EQ(s.placement.nodes, 1) << s.name;
      EXPECT_EQ(s.planner_only, "") << s.name;
    }
    EXPECT_NE(r->report.find("local mode: one node of " + std::to_string(gpus) +
                             " 'h100_sxm' GPU(s) (85.9 GB, 989.4 TFLOP/s each; kernels builtin:h100_sxm)"),
              std::string::npos)
        << r->report;
  }
}

TEST(LocalGpuMode, AnUnknownTypeIsPricedWithTheDefaultTablesAndSaysSo) {
  auto r = Compile(Load("tiny_teacher.toml"), OnGpus(2, "NVIDIA L40S", 48));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->plan.sections[0].placement.gpu_type, "l40s");
  EXPECT_EQ(r->plan.sections[0].placement.gpus_per_task, 1);
  EXPECT_NE(r->report.find("kernels default:h100_sxm"), std::string::npos) << r->report;
  EXPECT_NE(r->report.find("note: this machine's GPU 'NVIDIA L40S' (type l40s) has no device profile"),
            std::string::npos)
      << r->report;
}

TEST(LocalGpuMode, ASpecsDeclarationOfTheTypeGivesItsNumbers) {
  // tiny_teacher.toml with a [cluster.gpu.*] whose `type` is the GPU's.
  std::ifstream in(std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_teacher.toml");
  std::stringstream text;
  text << in.rdbuf();
  std::string toml = text.str();
  const std::string data = "[data]";
  toml.insert(toml.find(data), "[cluster.gpu.mine]\ntype = \"h100_sxm\"\nmemory_gb = 40\ntflops_bf16 = 500\n\n");
  auto spec = ParseSpecString(toml, std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_teacher.toml",
                              std::string(MAESTRO_SOURCE_DIR) + "/specs");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  auto r = Compile(*spec, OnGpus(2, "NVIDIA H100 80GB HBM3"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->plan.sections[0].placement.gpu_type, "mine");
  EXPECT_NE(r->report.find("2 'mine' GPU(s) (40 GB, 500 TFLOP/s each; kernels builtin:h100_sxm)"), std::string::npos)
      << r->report;
}

TEST(LocalGpuMode, MoreRanksThanGpusIsRefusedNamingTheFix) {
  auto one = Compile(Load("tiny_vlm.toml"), OnGpus(1, "h100_sxm"));
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("needs at least 2 ranks (2 section(s), one GPU each) but 1 GPU(s)"),
            std::string::npos)
      << one.status().message();
  EXPECT_NE(one.status().message().find("maestro run --device cpu"), std::string::npos);
  CompileOptions pinned = OnGpus(2, "h100_sxm");
  auto pin = ParsePin("teacher.dp=4");
  ASSERT_TRUE(pin.ok());
  pinned.pins.push_back(*pin);
  auto pins = Compile(Load("tiny_teacher.toml"), pinned);
  ASSERT_FALSE(pins.ok());
  EXPECT_NE(pins.status().message().find("and more where the pins ask"), std::string::npos) << pins.status().message();
  // GPUs are not shared: --local-grow and --local-cores are CPU slots' options.
  CompileOptions grow = OnGpus(2, "h100_sxm");
  grow.local_grow = true;
  EXPECT_FALSE(Compile(Load("tiny_teacher.toml"), grow).ok());
  CompileOptions no_local;
  no_local.local_gpu = "h100_sxm";
  EXPECT_FALSE(Compile(Load("tiny_teacher.toml"), no_local).ok());
}

}  // namespace
}  // namespace maestro::compiler
