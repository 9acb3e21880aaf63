// SPDX-License-Identifier: Apache-2.0
// What the runtime tests read back from a run directory: a file's text, the loss of every
// step (metrics.jsonl; a step run twice, before and after a resume, keeps its
// last line) and the state of the last committed checkpoint.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "datalayer/checkpoint_store.h"
#include "datalayer/sample_index.h"

namespace maestro::runtime_testing {

// The whole text of `path` ("" when it cannot be read).
inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::map<int64_t, double> Losses(const std::string& run_dir) {
  std::map<int64_t, double> losses;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j.contains("loss")) losses[j["step"].get<int64_t>()] = j["loss"];
  }
  return losses;
}

inline datalayer::CheckpointData LastCheckpoint(const std::string& run_dir) {
  auto index = datalayer::SampleIndex::Open(run_dir + "/index.sqlite");
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  if (!index.ok()) return {};
  auto commit = (*index)->LastCommit();
  EXPECT_TRUE(commit.ok());
  auto store = datalayer::CheckpointStore::Open(run_dir + "/checkpoints", 10);
  EXPECT_TRUE(store.ok());
  if (!commit.ok() || !store.ok()) return {};
  auto data = (*store)->Read(commit->checkpoint_file);
  EXPECT_TRUE(data.ok()) << data.status().ToString();
  return data.ok() ? *data : datalayer::CheckpointData{};
}

}  // namespace maestro::runtime_testing
