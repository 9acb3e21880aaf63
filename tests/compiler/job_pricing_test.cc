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
#include "datasets/default_text.h"
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
  EXPECT_FALSE(r.plan.spool_reuse) << "the plan runs what was priced: every epoch computes";
  EXPECT_DOUBLE_EQ(chosen->seconds, static_cast<double>(r.job.length.steps) * r.grouping.chosen_step_seconds);
  for (const JobAlternative& a : r.job.alternatives) {
    if (a.spool_reuse) {
      EXPECT_FALSE(a.pays) << a.name;  // one epoch: nothing to read back
    }
  }
}

// The built-in text is sized as the run reads it: this machine's text cut
// into chunks of seq_len - 1 bytes, the last twentieth held out
// (docs/datasets.md). tiny_kd's 300 steps of 16 are then about three epochs,
// and the spool pays.
TEST(JobPricing, TheBuiltInTextIsSizedAsTheRunReadsIt) {
  const auto text = datasets::ReadDefaultText();
  if (!text.ok()) GTEST_SKIP() << "no demo text: " << text.status().message();
  const int64_t chunks = static_cast<int64_t>(text->text.size()) / 63;
  const int64_t train = chunks - std::max<int64_t>(1, chunks / 20);
  const CompileResult r = MustCompile(TinyKd("steps = 300", ""));
  EXPECT_TRUE(r.job.length.data.known) << r.report;
  EXPECT_EQ(r.job.length.data.samples, train);
  EXPECT_EQ(r.job.length.steps, 300);
  ASSERT_LT(train, 300 * 16) << "a text this long is one epoch: the rest of the test does not apply";
  EXPECT_TRUE(r.job.spool_reuse) << r.report;
  EXPECT_TRUE(r.plan.spool_reuse) << "the plan runs what was priced: later epochs read the spool";
}

TEST(JobPricing, AnUnknownDatasetIsOnePassWithoutReuse) {
  // A manifest the compiler cannot read (the run would refuse it; the size is what is tested).
  auto spec = Parse(TinyKd("steps = 300", ""));
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  spec->data.dataset.clear();
  spec->data.manifest = std::string(MAESTRO_SOURCE_DIR) + "/no-such-manifest.jsonl";
  const DatasetSize size = DatasetSizeOf(*spec);
  EXPECT_FALSE(size.known);
  EXPECT_NE(size.source.find("cannot be read at compile time"), std::string::npos) << size.source;
  const auto length = JobLengthOf(*spec);
  ASSERT_TRUE(length.ok()) << length.status().message();
  EXPECT_EQ(length->steps, 300);  // one pass of the given steps
  EXPECT_EQ(length->epochs, 0);
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
  spec->data.dataset.clear();  // a manifest the compiler cannot read: its size is unknown
  spec->data.manifest = std::string(MAESTRO_SOURCE_DIR) + "/no-such-manifest.jsonl";
  const auto length = JobLengthOf(*spec);
  ASSERT_FALSE(length.ok());
  EXPECT_NE(length.status().message().find("[data] samples"), std::string::npos) << length.status().message();
}

// Offline runs (plan.offline_spool_pass): priced on the fused plan, two
// phases (its teacher alone over the epoch's samples, then every step with
// the teacher's rows read), a reuse alternative, and the plan says so
// exactly when it is the choice. Over 1 to 8 epochs both the pass and
// cached may win; whichever does, the plan carries it.
TEST(JobPricing, OfflineIsTheFusedPlanInTwoPhasesAndThePlanSaysWhenItIsChosen) {
  for (int epochs : {1, 3, 8}) {
    const CompileResult r = MustCompile(Epochs(epochs));
    const JobAlternative* offline = Find(r.job, "offline");
    const JobAlternative* cached = Find(r.job, "cached");
    ASSERT_NE(offline, nullptr) << epochs;
    ASSERT_NE(cached, nullptr) << epochs;
    EXPECT_TRUE(offline->runtime_supported);
    EXPECT_TRUE(offline->spool_reuse);
    EXPECT_EQ(offline->pays, epochs > 1);
    // Phase 2's step reads the teacher's rows: the cached plan's later step.
    EXPECT_DOUBLE_EQ(offline->later_step_seconds, cached->later_step_seconds) << epochs;
    EXPECT_LT(offline->first_step_seconds, cached->first_step_seconds) << "the pass runs the teacher alone";
    EXPECT_EQ(r.plan.offline_spool_pass, offline->chosen) << epochs;
    if (offline->chosen) {
      EXPECT_TRUE(r.plan.spool_reuse);
    }
    EXPECT_TRUE(plan::Validate(r.plan).ok());
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
