// SPDX-License-Identifier: Apache-2.0
// Golden cases, duckdb style: every folder of tests/compiler/golden/ holds a
// spec.toml (first line: `# description: ...`), optional args.txt (extra
// flags), and the expected outputs: report.txt + plan.json + job.sbatch for a
// valid spec, or error.txt (stderr, exit status 2) for an invalid one. The
// case runs in a scratch copy of its folder as
//     maestro-compile spec.toml -o out [args]
// so every path in the outputs is relative and stable.
// Regenerate: MAESTRO_UPDATE_GOLDEN=1 ctest -R Golden, then review the diff.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "base/shell.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"

namespace fs = std::filesystem;

namespace {

const fs::path kGolden = fs::path(MAESTRO_SOURCE_DIR) / "tests/compiler/golden";

std::vector<std::string> Cases() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kGolden)) {
    if (e.is_directory() && fs::exists(e.path() / "spec.toml")) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, OutputsMatch) {
  const fs::path src = kGolden / GetParam();
  const fs::path work = fs::path(MAESTRO_TEST_TMP) / "golden" / GetParam();
  fs::remove_all(work);
  fs::create_directories(work);
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string name = e.path().filename().string();
    if (name == "spec.toml" || (e.path().extension() == ".json" && name != "plan.json")) {
      fs::copy_file(e.path(), work / name);
    }
  }
  std::string args = fs::exists(src / "args.txt") ? maestro::fixtures::ReadFile(src / "args.txt") : "";
  while (!args.empty() && (args.back() == '\n' || args.back() == ' ')) args.pop_back();
  const std::string cmd = "cd " + maestro::ShellQuote(work.string()) + " && " +
                          maestro::ShellQuote(std::string(MAESTRO_BIN_DIR) + "/maestro-compile") +
                          " spec.toml -o out " + args + " > stdout.txt 2> stderr.txt";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  const int rc = WEXITSTATUS(status);
  const bool update = std::getenv("MAESTRO_UPDATE_GOLDEN") != nullptr;
  const bool expect_error = fs::exists(src / "error.txt") || (update && rc != 0);
  if (expect_error) {
    const std::string err = maestro::fixtures::ReadFile(work / "stderr.txt");
    if (update) maestro::fixtures::WriteFile(src / "error.txt", err);
    EXPECT_EQ(rc, 2) << err;
    EXPECT_EQ(err, maestro::fixtures::ReadFile(src / "error.txt"));
    EXPECT_EQ(err.find("terminate"), std::string::npos);  // no crash, no stack trace
    EXPECT_FALSE(fs::exists(work / "out" / "plan.json"));
    return;
  }
  ASSERT_EQ(rc, 0) << maestro::fixtures::ReadFile(work / "stderr.txt");
  const std::vector<std::pair<fs::path, std::string>> outputs = {{work / "stdout.txt", "report.txt"},
                                                                 {work / "out" / "plan.json", "plan.json"},
                                                                 {work / "out" / "job.sbatch", "job.sbatch"}};
  for (const auto& [actual, expected] : outputs) {
    // --dry-run writes no files: a case without an expected file expects none.
    if (!fs::exists(src / expected) && !(update && fs::exists(actual))) {
      EXPECT_FALSE(fs::exists(actual)) << actual << " was written but " << GetParam() << " expects none";
      continue;
    }
    if (update) maestro::fixtures::WriteFile(src / expected, maestro::fixtures::ReadFile(actual));
    EXPECT_EQ(maestro::fixtures::ReadFile(actual), maestro::fixtures::ReadFile(src / expected))
        << GetParam() << "/" << expected << " differs; MAESTRO_UPDATE_GOLDEN=1 regenerates it";
  }
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Golden);
INSTANTIATE_TEST_SUITE_P(Compiler, Golden, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string n = param_info.param;
                           for (char& c : n) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

}  // namespace
