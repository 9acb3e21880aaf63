// SPDX-License-Identifier: Apache-2.0
// `maestro export` of a sharded checkpoint streams (issue #39 item 6): each
// global tensor is read from the ranks' pieces, converted and appended to its
// shard file, one tensor in memory at a time, so a model larger than the
// machine's memory exports.
//
// Two built-in decoders that differ only in depth (2 and 12 blocks of 4.2M
// fp32 parameters, 16.8 MB each; the largest tensor 4 MB) get their initial
// weights written (`maestro run --steps 0`, sharded like every checkpoint)
// and are exported in shards of at most 64 MB. The exports' peak resident
// sets (the export process's ru_maxrss) differ by far less than the models
// do (168 MB): an export that builds and loads the whole model, or keeps the
// mapped pieces it read resident, holds at least that much more and fails.
// The exported folder opens as a sharded HF checkpoint with every tensor.
// About 25 s on two idle cores (two runs and two exports of up to 0.2 GB of
// fp32 state each): a smaller model sinks under the resident set's noise.
// No torch headers: runs are processes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hf/checkpoint.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/specs.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/multi_rank_harness.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;

// A decoder of `layers` blocks (hidden 512, MHA with 8 heads, FFN 2048,
// vocabulary 512) trained alone on the built-in text.
std::string DecoderSpec(int layers) {
  return fixtures::WithKeys(fixtures::LocalCpuSpecHead("export-stream"), {{"data", "dataset", "\"text\""}}) +
         fixtures::DecoderModelToml("lm", {512, layers, 8, 8, 2048, 512}) + fixtures::SectionToml("lm", "train");
}

struct ExportRun {
  int exit_code = -1;
  long peak_rss_kib = 0;
};

// bin/maestro-export `args`, its output to `log`; its exit code and peak
// resident set (wait4's ru_maxrss: this one child's, not the test's).
ExportRun Export(const std::vector<std::string>& args, const std::string& log) {
  const std::string tool = std::string(test_paths::BinDir()) + "/maestro-export";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    std::vector<char*> argv{const_cast<char*>(tool.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(tool.c_str(), argv.data());
    ::_exit(127);
  }
  ExportRun run;
  int status = 0;
  struct rusage usage {};
  if (pid > 0 && ::wait4(pid, &status, 0, &usage) == pid) {
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    run.peak_rss_kib = usage.ru_maxrss;
  }
  return run;
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(HfExport, AShardedCheckpointStreamsOneTensorAtATime) {
  const fs::path root = fixtures::PerTestDir("hf_export");
  ExportRun runs[2];
  const int layers[2] = {2, 12};
  for (int i = 0; i < 2; ++i) {
    const fs::path out = root / ("lm" + std::to_string(layers[i]));
    fs::remove_all(out);
    fs::create_directories(out);
    std::ofstream(out / "spec.toml") << DecoderSpec(layers[i]);
    auto r = runtime_testing::RunMaestro(
        {"run", (out / "spec.toml").string(), "-o", (out / "o").string(), "--steps", "0", "--no-eval", "--reference"},
        {}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    runs[i] =
        Export({(out / "o").string(), "--section", "lm", "-o", (out / "hf").string(), "--max-shard-gib", "0.0625"},
               (out / "export.log").string());
    ASSERT_EQ(runs[i].exit_code, 0) << ReadAll(out / "export.log");
  }
  // The deep model's export: a sharded folder (0.2 GB in 64 MB shards) with
  // every tensor of the 12 blocks.
  auto exported = hf::HfCheckpoint::Open((root / "lm12" / "hf").string());
  ASSERT_TRUE(exported.ok()) << exported.status().ToString();
  EXPECT_TRUE(fs::exists(root / "lm12" / "hf" / hf::kIndexFileName));
  EXPECT_TRUE((*exported)->Find("model.layers.11.mlp.down_proj.weight").ok());
  EXPECT_TRUE((*exported)->Find("model.norm.weight").ok());

  const double model_gap_mb = 10 * 4.2e6 * 4 / 1e6;  // 10 more blocks of 4.2M fp32 parameters
  const double rss_gap_mb = static_cast<double>(runs[1].peak_rss_kib - runs[0].peak_rss_kib) * 1024 / 1e6;
  std::printf("export peak resident set: %ld MiB (2 blocks), %ld MiB (12 blocks)\n", runs[0].peak_rss_kib / 1024,
              runs[1].peak_rss_kib / 1024);
  EXPECT_LT(rss_gap_mb, 0.25 * model_gap_mb)
      << "peak resident set: " << runs[0].peak_rss_kib / 1024 << " MiB for 2 blocks, " << runs[1].peak_rss_kib / 1024
      << " MiB for 12 (" << model_gap_mb << " MB more state): the export holds more than one tensor at a time";
}

}  // namespace
}  // namespace maestro
