// SPDX-License-Identifier: Apache-2.0
#include "datalayer/checkpoint_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/datalayer/test_dirs.h"

namespace maestro::datalayer {
namespace {

CheckpointData Sample(int64_t step) {
  CheckpointData d;
  d.step = step;
  d.epoch = 1;
  d.next_step = step + 1;
  d.sections["vision"] = SectionState{std::string(1000, 'v') + std::to_string(step), "adam-v"};
  d.sections["llm"] = SectionState{"weights-llm", std::string(3, '\0') + "x"};
  d.rng_states["torch.cpu"] = "rng-bytes";
  return d;
}

TEST(CheckpointStore, RoundTripsEverySectionAndRngState) {
  const std::string dir = testing::FreshDir("ckpt_roundtrip");
  auto store = CheckpointStore::Open(dir, 2).ValueOrDie();
  const std::string name = store->Write(Sample(7)).ValueOrDie();
  EXPECT_EQ(name, "ckpt-0000000007.mckpt");
  auto back = store->Read(name).ValueOrDie();
  const CheckpointData want = Sample(7);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.epoch, 1);
  EXPECT_EQ(back.next_step, 8);
  ASSERT_EQ(back.sections.size(), 2u);
  EXPECT_EQ(back.sections["vision"].model, want.sections.at("vision").model);
  EXPECT_EQ(back.sections["llm"].optimizer, want.sections.at("llm").optimizer);
  EXPECT_EQ(back.rng_states["torch.cpu"], "rng-bytes");
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + name + ".tmp"));
}

TEST(CheckpointStore, ATornOrFlippedCheckpointIsNeverLoaded) {
  const std::string dir = testing::FreshDir("ckpt_torn");
  auto store = CheckpointStore::Open(dir, 2).ValueOrDie();
  const std::string name = store->Write(Sample(3)).ValueOrDie();
  const std::string path = dir + "/" + name;
  const auto size = std::filesystem::file_size(path);
  for (uintmax_t cut : {uintmax_t{0}, uintmax_t{10}, size / 2, size - 1}) {
    std::filesystem::copy_file(path, path + ".orig", std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(path, cut);
    auto r = store->Read(name);
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << "cut at " << cut;
    std::filesystem::copy_file(path + ".orig", path, std::filesystem::copy_options::overwrite_existing);
  }
  // One flipped byte in the middle of a blob.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.put('#');
  }
  auto r = store->Read(name);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().ToString();
}

TEST(CheckpointStore, ListsOnlyCompleteFilesAndPrunes) {
  const std::string dir = testing::FreshDir("ckpt_prune");
  auto store = CheckpointStore::Open(dir, 2).ValueOrDie();
  for (int64_t s : {1, 2, 3}) ASSERT_TRUE(store->Write(Sample(s)).ok());
  std::ofstream(dir + "/ckpt-0000000004.mckpt.tmp") << "half";
  EXPECT_EQ(store->ListSteps().ValueOrDie(), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE(store->RemoveAllBut({2, 3}).ok());
  EXPECT_EQ(store->ListSteps().ValueOrDie(), (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt-0000000004.mckpt.tmp"));
}

}  // namespace
}  // namespace maestro::datalayer
