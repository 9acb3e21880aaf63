// SPDX-License-Identifier: Apache-2.0
// Plans priced over the whole job (compiler/job_pricing.h): specs/tiny_kd.toml
// with `[data] samples` and `[job] epochs`, its alternatives' job times, the
// plan chosen and its spool_reuse flag, the spool budget's reused fraction,
// the baseline's own options, the spec's errors and the report's lines.
#include "compiler/job_pricing.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/specs.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

constexpr int64_t kSamples = 4800;  // 300 global batches of 16

// specs/tiny_kd.toml with `steps = 300` replaced by `job_length` and `extra`
// added to [data].
std::string TinyKd(const std::string& job_length, const std::string& extra_data) {
  std::string text = fixtures::ReadFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_kd.toml");
  const auto replace = [&](const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  };
  replace("steps = 300", job_length);
  replace("seed = 7", "seed = 7\n" + extra_data);
  return text;
}

std::string Epochs(int epochs, const std::string& job_extra = "") {
  return TinyKd("epochs = " + std::to_string(epochs) + "\n" + job_extra, "samples = " + std::to_string(kSamples));
}

StatusOr<Spec> Parse(const std::string& text) {
  return ParseSpecString(text, std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_kd.toml",
                         std::string(MAESTRO_SOURCE_DIR) + "/specs");
}

CompileResult MustCompile(const std::string& text) {
  auto spec = Parse(text);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  auto r = Compile(*spec, CompileOptions());
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : CompileResult();
}

const JobAlternative* Find(const JobPricing& job, const std::string& name) {
  for (const JobAlternative& a : job.alternatives) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

const JobAlternative* Chosen(const JobPricing& job) {
  for (const JobAlternative& a : job.alternatives) {
    if (a.chosen) return &a;
  }
  return nullptr;
}

TEST(JobPricing, ThreeEpochsPriceCachedBelowEveryEpochAndChooseReuse) {
  const CompileResult r = MustCompile(Epochs(3));
  const JobPricing& job = r.job;
  EXPECT_EQ(job.length.steps_per_epoch, kSamples / 16);
  EXPECT_EQ(job.length.steps, 3 * kSamples / 16);
  EXPECT_EQ(r.plan.data.steps, 3 * kSamples / 16);  // the runtime runs the three epochs
  const JobAlternative* cached = Find(job, "cached");
  const JobAlternative* every = Find(job, "fused-every-epoch");
  ASSERT_NE(cached, nullptr);
  ASSERT_NE(every, nullptr);
  EXPECT_LT(cached->seconds, every->seconds);
  const JobAlternative* chosen = Chosen(job);
  ASSERT_NE(chosen, nullptr);
  EXPECT_NE(chosen->name, "fused-every-epoch");
  EXPECT_TRUE(chosen->spool_reuse);
  EXPECT_TRUE(r.job.spool_reuse);
  for (const JobAlternative& a : job.alternatives) {
    if (a.runtime_supported && a.pays) {
      EXPECT_LE(chosen->seconds, a.seconds) << a.name;
    }
  }
}

TEST(JobPricing, OneEpochChoosesNoReuseAndPricesStepsTimesStep) {
  const CompileResult r = MustCompile(Epochs(1));
  const JobAlternative* chosen = Chosen(r.job);
  ASSERT_NE(chosen, nullptr);
  EXPECT_FALSE(chosen->spool_reuse) << chosen->name;
  EXPECT_FALSE(r.job.spool_reuse);
  EXPECT_DOUBLE_EQ(chosen->seconds, static_cast<double>(r.job.length.steps) * r.grouping.chosen_step_seconds);
  for (const JobAlternative& a : r.job.alternatives) {
    if (a.spool_reuse) {
      EXPECT_FALSE(a.pays) << a.name;  // one epoch: nothing to read back
    }
  }
}

TEST(JobPricing, AnUnknownDatasetIsOnePassWithoutReuse) {
  const CompileResult r = MustCompile(TinyKd("steps = 300", ""));  // the built-in text: size unknown
  EXPECT_FALSE(r.job.length.data.known);
  EXPECT_EQ(r.job.length.steps, 300);
  EXPECT_FALSE(r.job.spool_reuse);
  EXPECT_NE(r.report.find("dataset size unknown"), std::string::npos) << r.report;
  EXPECT_NE(r.report.find("[data] samples"), std::string::npos);
}

TEST(JobPricing, ASmallerSpoolReusesLessAndCachedCostsMore) {
  double last_fraction = 2, last_seconds = 0;
  for (const char* gib : {"1024", "0.08", "0.04", "0.01"}) {
    const CompileResult r = MustCompile(Epochs(3, std::string("spool_gib = ") + gib + "\n"));
    const JobAlternative* cached = Find(r.job, "cached");
    ASSERT_NE(cached, nullptr) << gib;
    EXPECT_LE(r.job.fraction_fits, last_fraction) << gib;
    EXPECT_GE(cached->seconds, last_seconds) << gib;
    last_fraction = r.job.fraction_fits;
    last_seconds = cached->seconds;
  }
  EXPECT_LT(last_fraction, 0.2);  // 0.01 GiB holds about 9% of the 113 MiB of rows
}

TEST(JobPricing, TheBaselineGetsTheSameOptions) {
  const CompileResult r3 = MustCompile(Epochs(3));
  const double every = static_cast<double>(r3.job.length.steps) * r3.monolithic_simulated.step_seconds;
  EXPECT_EQ(r3.job.baseline_option, "cached");
  EXPECT_LT(r3.job.baseline_seconds, every);
  const JobAlternative* chosen = Chosen(r3.job);
  ASSERT_NE(chosen, nullptr);
  EXPECT_DOUBLE_EQ(r3.job.speedup, r3.job.baseline_seconds / chosen->seconds);
  // One epoch: the baseline's cached option cannot pay, so every epoch.
  const CompileResult r1 = MustCompile(Epochs(1));
  EXPECT_EQ(r1.job.baseline_option, "every epoch");
  EXPECT_DOUBLE_EQ(r1.job.baseline_seconds,
                   static_cast<double>(r1.job.length.steps) * r1.monolithic_simulated.step_seconds);
}

TEST(JobPricing, EpochsWithStepsIsAnErrorNamingBoth) {
  auto spec = Parse(TinyKd("steps = 300\nepochs = 2", ""));
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("job.epochs"), std::string::npos) << spec.status().message();
  EXPECT_NE(spec.status().message().find("job.steps"), std::string::npos) << spec.status().message();
}

TEST(JobPricing, EpochsWithoutADatasetSizeIsAnError) {
  auto spec = Parse(TinyKd("epochs = 2", ""));
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  auto r = Compile(*spec, CompileOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("[data] samples"), std::string::npos) << r.status().message();
}

TEST(JobPricing, OfflineIsPlannerOnlyAndNeverChosen) {
  for (bool allow : {false, true}) {
    auto spec = Parse(Epochs(3));
    ASSERT_TRUE(spec.ok());
    CompileOptions options;
    options.allow_planner_only = allow;
    auto r = Compile(*spec, options);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const JobAlternative* offline = Find(r->job, "offline");
    ASSERT_NE(offline, nullptr);
    EXPECT_FALSE(offline->runtime_supported);
    EXPECT_FALSE(offline->chosen);
    EXPECT_NE(r->report.find("[planner-only]"), std::string::npos);
    const auto js = nlohmann::json::parse(r->report_json);
    bool seen = false;
    for (const auto& a : js.at("job_alternatives")) {
      if (a.at("name") == "offline") {
        seen = true;
        EXPECT_FALSE(a.at("runtime_supported").get<bool>());
        EXPECT_FALSE(a.at("chosen").get<bool>());
      }
    }
    EXPECT_TRUE(seen);
  }
}

TEST(JobPricing, AManifestIsCountedByItsNonEmptyLines) {
  Spec spec;
  spec.data.global_batch = 4;
  spec.data.manifest = std::string(MAESTRO_SOURCE_DIR) + "/tests/compiler/job_pricing_test.cc";
  const DatasetSize size = DatasetSizeOf(spec);
  EXPECT_TRUE(size.known);
  EXPECT_GT(size.samples, 100);
  spec.data.samples = 7;
  EXPECT_EQ(DatasetSizeOf(spec).samples, 7);  // [data] samples wins
}

}  // namespace
}  // namespace maestro::compiler
