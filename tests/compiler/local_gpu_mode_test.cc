// SPDX-License-Identifier: Apache-2.0
// Local mode on a machine's GPUs (--local N --local-gpu NAME, what `maestro
// run` compiles with when it finds GPUs; issue #43): a GPU's name mapped to
// a device profile (compiler/local_gpu_type.h), every section on GPUs one
// rank each, an unknown type priced with the default tables and the
// report's note, a spec's own declaration of the type, a workload of more
// sections than GPUs planned fused on them, and the refusals (one section
// pinned wider than the GPUs, --grouping sectioned on too few, no fused plan
// that fits).
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

TEST(LocalGpuMode, FewerGpusThanSectionsPlansTheWorkloadFused) {
  // One GPU, two sections (auto and --grouping fused): one fused section on rank 0.
  for (const char* spec : {"tiny_vlm.toml", "tiny_kd.toml"}) {
    for (Grouping grouping : {Grouping::kAuto, Grouping::kFused}) {
      CompileOptions o = OnGpus(1, "NVIDIA H200", 141);
      o.grouping = grouping;
      auto r = Compile(Load(spec), o);
      ASSERT_TRUE(r.ok()) << spec << ": " << r.status().message();
      EXPECT_TRUE(r->grouping.fused) << spec;
      EXPECT_EQ(r->plan.world_size(), 1) << spec;
      ASSERT_EQ(r->plan.sections.size(), 1u) << spec;
      EXPECT_TRUE(r->plan.sections[0].fused()) << spec;
      EXPECT_EQ(r->plan.sections[0].components.size(), 2u) << spec;
      EXPECT_EQ(r->plan.sections[0].placement.gpus_per_task, 1) << spec;
      EXPECT_EQ(r->plan.sections[0].placement.gpu_type, "h200") << spec;
      EXPECT_NE(r->report.find("grouping: fused on 1 GPU(s)"), std::string::npos) << r->report;
      EXPECT_NE(r->report.find("2 sections need 2 GPU(s), 1 here"), std::string::npos) << r->report;
      EXPECT_NE(r->explain.find("no sectioned plan: 2 sections need 2 GPU(s), 1 here"), std::string::npos)
          << r->explain;
    }
  }
  // Two GPUs, three sections (the decoder pins TP 2: four ranks sectioned):
  // fused on both, honouring the pin.
  auto three = Compile(Load("tiny_vlm3.toml"), OnGpus(2, "h100_sxm"));
  ASSERT_TRUE(three.ok()) << three.status().message();
  EXPECT_TRUE(three->grouping.fused);
  EXPECT_EQ(three->plan.world_size(), 2);
  ASSERT_EQ(three->plan.sections.size(), 1u);
  EXPECT_EQ(three->plan.sections[0].components.size(), 3u);
  EXPECT_EQ(three->plan.sections[0].config.tp, 2);
  EXPECT_NE(three->report.find("3 sections need 4 GPU(s), 2 here"), std::string::npos) << three->report;
  EXPECT_NE(three->report_json.find("\"no_sectioned_plan\""), std::string::npos) << three->report_json;
}

TEST(LocalGpuMode, TooFewGpusIsRefusedWhereNoFusedPlanRunsOrSectionedIsAsked) {
  // --grouping sectioned on one GPU: each section needs a GPU of its own.
  CompileOptions sectioned = OnGpus(1, "h100_sxm");
  sectioned.grouping = Grouping::kSectioned;
  auto one = Compile(Load("tiny_vlm.toml"), sectioned);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find(
                "--grouping sectioned: the spec needs at least 2 ranks (2 section(s), one GPU each) but 1 GPU(s)"),
            std::string::npos)
      << one.status().message();
  EXPECT_NE(one.status().message().find("drop --grouping sectioned"), std::string::npos);
  EXPECT_NE(one.status().message().find("maestro run --device cpu"), std::string::npos);
  // The fused plan does not fit in a GPU's memory: refused with the reason.
  auto small = Compile(Load("tiny_vlm.toml"), OnGpus(1, "h100_sxm", 0.001));
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("the fused plan (every component on each of them) cannot run: no single "
                                          "configuration fits"),
            std::string::npos)
      << small.status().message();
  EXPECT_NE(small.status().message().find("maestro run --device cpu"), std::string::npos);
}

TEST(LocalGpuMode, MoreRanksThanGpusIsRefusedNamingTheFix) {
  // One section whose pins ask more GPUs than there are: no fused plan helps.
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
