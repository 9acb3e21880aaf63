// SPDX-License-Identifier: Apache-2.0
// What the runtime tests read back from a run directory: a file's text, the loss of every
// step (metrics.jsonl; a step run twice, before and after a resume, keeps its
// last line) and the state of the last committed checkpoint; and the pid of
// a running maestro-worker of a given rank (to kill it). And a test's fresh
// run folders (FreshDir, FreshDirs).
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "datalayer/checkpoint_store.h"
#include "datalayer/sample_index.h"
#include "plan/plan.h"
#include "tests/fixtures/scratch_cleanup.h"
#include "tests/fixtures/test_paths.h"

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

// A sharded checkpoint's state per training component, as tests compare
// it whatever layout wrote it: sections[c].model holds the whole global
// tensors "c/<parameter>" (name, then C-order bytes, in name order),
// sections[c].optimizer the "c/adamw.*" ones and the component's counters.
// Two runs' entries are equal exactly when their weights (or AdamW states)
// are bit-identical.
inline void AddComponentView(datalayer::CheckpointData& data) {
  std::map<std::string, std::vector<const datalayer::SliceRecord*>> by_tensor;
  for (const auto& r : data.slices) by_tensor[r.tensor].push_back(&r);
  datalayer::ShardReader reader(data.dir);
  for (const auto& [name, pieces] : by_tensor) {
    const size_t slash = name.find('/');
    const std::string component = name.substr(0, slash), rest = name.substr(slash + 1);
    auto bytes = datalayer::ReadWholeTensor(reader, pieces);
    EXPECT_TRUE(bytes.ok()) << name << ": " << bytes.status().ToString();
    if (!bytes.ok()) continue;
    auto& state = data.sections[component];
    (rest.rfind("adamw.", 0) == 0 ? state.optimizer : state.model) += name + '\0' + *bytes;
  }
  for (const auto& [name, value] : data.counters) {
    data.sections[name.substr(0, name.find('/'))].optimizer += name + "=" + std::to_string(value);
  }
}

// The rank files holding pieces of the tensors whose names begin with
// `prefix` in a sharded checkpoint (each TP slice, stage, expert group or
// ZeRO-1 shard is written by its own rank, a replica by one).
inline std::set<std::string> PieceFiles(const datalayer::CheckpointData& data, const std::string& prefix) {
  std::set<std::string> files;
  for (const auto& r : data.slices) {
    if (r.tensor.rfind(prefix, 0) == 0) files.insert(r.file);
  }
  return files;
}

// The bytes of those pieces, by rank file.
inline std::map<std::string, double> PieceBytesByFile(const datalayer::CheckpointData& data,
                                                      const std::string& prefix) {
  std::map<std::string, double> bytes;
  for (const auto& r : data.slices) {
    if (r.tensor.rfind(prefix, 0) == 0) {
      bytes[r.file] += static_cast<double>(r.box.elements()) * static_cast<double>(hf::TensorDTypeSize(r.dtype));
    }
  }
  return bytes;
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
  if (!data.ok()) return datalayer::CheckpointData{};
  if (data->sharded()) AddComponentView(*data);
  return *data;
}

// `parent`/`name`, emptied (removed, then created): a test's own run folder.
inline std::string FreshDir(const std::string& parent, const std::string& name) {
  const std::string dir = parent + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  fixtures::RemoveAtExitIfPassed(dir);  // kept when a test failed
  return dir;
}

// A test file's run folders under the build's test-tmp, each emptied when
// asked for (FreshDir): `const FreshDirs Fresh{"runtime_zero1"};`, then
// Fresh("resume") is <test-tmp>/runtime_zero1/resume.
struct FreshDirs {
  std::string folder;
  std::string operator()(const std::string& name) const {
    return FreshDir(std::string(MAESTRO_TEST_TMP) + "/" + folder, name);
  }
};

// Writes `p` to `dir`/plan.json (creating `dir`); returns that path.
inline std::string WritePlan(const plan::Plan& p, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/plan.json";
  EXPECT_TRUE(plan::SavePlan(p, path).ok());
  return path;
}

// The pid of the maestro-worker of world rank `rank` running `plan_path`
// (its environment says its rank: OMPI_COMM_WORLD_RANK), or -1.
inline pid_t WorkerOfRank(const std::string& plan_path, int rank) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = ReadText((entry.path() / "cmdline").string());
    if (cmdline.find("maestro-worker") == std::string::npos || cmdline.find(plan_path) == std::string::npos) continue;
    std::string env = ReadText((entry.path() / "environ").string());
    for (char& c : env) c = c == '\0' ? '\n' : c;
    if (("\n" + env).find("\nOMPI_COMM_WORLD_RANK=" + std::to_string(rank) + "\n") != std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

}  // namespace maestro::runtime_testing
