// SPDX-License-Identifier: Apache-2.0
// The demo manifest is what the datalayer's SampleIndex ingests: every sample
// arrives with its location and token counts, and a global batch's samples
// load from the dataset by id.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "datalayer/sample_index.h"
#include "datasets/demo_data.h"
#include "tests/fixtures/demo_images.h"
#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

namespace fs = std::filesystem;

// This file's scratch folders: <test-tmp>/maestro-datasets-ingest-<pid>/<name> (fixtures::ScratchDir).
constexpr char kScratch[] = "maestro-datasets-ingest-";

TEST(DemoManifest, IngestsIntoTheSampleIndexWithMatchingTokenCounts) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  DemoOptions options;
  options.kind = DemoKind::kFashionMnistCaptions;
  options.seq_len = 64;
  options.image_fraction = 0.5;
  auto ds = DemoDataset::Open(options);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const std::string dir = fixtures::ScratchDir(kScratch, "ingest");
  auto written = (*ds)->WriteManifest(dir + "/train.jsonl");
  ASSERT_TRUE(written.ok()) << written.status().ToString();

  auto index = datalayer::SampleIndex::Open(dir + "/index.sqlite");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  auto stats = (*index)->IngestManifest(dir + "/train.jsonl");
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->samples, *written);
  EXPECT_EQ((*index)->NumSamples(), (*ds)->NumTrain());
  std::vector<std::string> modalities = stats->modalities;
  std::sort(modalities.begin(), modalities.end());
  EXPECT_EQ(modalities, (std::vector<std::string>{"image", "text"}));

  ASSERT_TRUE((*index)->ConfigureRun(/*seed=*/11, /*global_batch_size=*/64).ok());
  auto batch = (*index)->BatchForStep(3);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  auto infos = (*index)->GetSamples(batch->sample_ids);
  ASSERT_TRUE(infos.ok()) << infos.status().ToString();
  ASSERT_EQ(infos->size(), 64u);
  int with_image = 0;
  for (const datalayer::SampleInfo& info : *infos) {
    auto s = (*ds)->LoadTrain(info.sample_id);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    int64_t text_tokens = 0;
    for (int64_t id : s->input_ids) text_tokens += (id != kPad && id != kImage) ? 1 : 0;
    EXPECT_EQ(info.tokens.at("text"), text_tokens) << info.location;
    EXPECT_EQ(info.tokens.count("image") == 1, s->has_image) << info.location;
    EXPECT_EQ(info.location.rfind(s->has_image ? "fmnist:train:" : "text:", 0), 0u) << info.location;
    with_image += s->has_image ? 1 : 0;
  }
  EXPECT_GT(with_image, 0);
  EXPECT_LT(with_image, 64);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace maestro::datasets
