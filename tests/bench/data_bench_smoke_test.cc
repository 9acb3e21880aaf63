// SPDX-License-Identifier: Apache-2.0
// `maestro-bench data --quick --json` at small sizes (a 4 MB corpus, a 16 MB
// checkpoint): every key the issue asks for is in the output and positive,
// the sizes asked for are the sizes measured, and the output says how each
// side was timed. Not a timing test: no figure is compared with a goal.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/bench/bench_process.h"
#include "tests/fixtures/test_paths.h"

namespace {

namespace fs = std::filesystem;
using maestro::bench_test::RunTool;
using maestro::bench_test::ToolRun;

TEST(DataBenchSmokeTest, QuickRunReportsEveryKeyPositive) {
  const std::string bench = std::string(MAESTRO_BIN_DIR) + "/maestro-bench";
  const fs::path dir = fs::path(MAESTRO_TEST_TMP) / ("bench-data-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const ToolRun run = RunTool({bench, "data", "--quick", "--json", "--", "--idx-mb=4", "--weights-mb=16"}, dir);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json out = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(out.is_object()) << run.out;

  for (const char* key : {"idx_tokens_per_s",
                          "pread_tokens_per_s",
                          "idx_read_vs_pread",
                          "idx_sample_vs_pread",
                          "images_decoded_per_s",
                          "decode_only_per_s",
                          "png_images_decoded_per_s",
                          "native_images_per_s",
                          "native_decode_only_per_s",
                          "native_preprocess_overhead",
                          "native_mean_tokens",
                          "audio_files_featurised_per_s",
                          "audio_decode_only_per_s",
                          "audio_featurise_overhead",
                          "audio_resampled_files_per_s",
                          "safetensors_load_vs_read",
                          "safetensors_load_same_dtype_vs_read",
                          "safetensors_mmap_copy_vs_read",
                          "safetensors_read_gb_per_s",
                          "safetensors_load_gb_per_s",
                          "safetensors_load_same_dtype_gb_per_s",
                          "safetensors_read_buffer_kib",
                          "safetensors_load_vs_read_into_memory",
                          "safetensors_load_same_dtype_vs_read_into_memory",
                          "safetensors_read_into_memory_gb_per_s"}) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(out.contains(key)) << run.out;
    ASSERT_TRUE(out[key].is_number()) << out[key];
    EXPECT_GT(out[key].get<double>(), 0.0);
  }
  // The sizes asked for after `--` are the ones measured.
  EXPECT_NEAR(out["idx_corpus_mb"].get<double>(), 4.0, 0.5);
  EXPECT_NEAR(out["safetensors_checkpoint_mb"].get<double>(), 16.0, 8.0);
  EXPECT_GT(out["safetensors_tensors"].get<int64_t>(), 0);
  // images_decoded_per_s is one core's.
  EXPECT_EQ(out["image_threads"], 1);
  EXPECT_EQ(out["audio_threads"], 1);
  // How the sides were timed is part of the output.
  for (const char* key : {"idx_method", "safetensors_method", "native_method"}) {
    ASSERT_TRUE(out[key].is_string()) << key;
    EXPECT_NE(out[key].get<std::string>().find("median"), std::string::npos) << out[key];
    EXPECT_NE(out[key].get<std::string>().find("interleaved"), std::string::npos) << out[key];
  }
  // The corpus, the images and the checkpoint were written under
  // MAESTRO_BENCH_DIR and removed afterwards.
  EXPECT_TRUE(fs::is_empty(dir / "scratch"));
  fs::remove_all(dir);
}

}  // namespace
