// SPDX-License-Identifier: Apache-2.0
// Issue #18, "Crashes, hangs and unbounded work" and "Paths that are
// directories": a FIFO, a device or a huge file given as the spec, as an
// hf_config, to --model-info or as --profiles is refused at once, naming the
// path and what it must be (before, a FIFO hung forever and /dev/zero ended in
// std::bad_alloc); a directory says it is one. One test per case.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/read_file.h"
#include "compiler/model.h"
#include "compiler/spec.h"
#include "plan/profile.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

namespace fs = std::filesystem;

class HostileFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fixtures::PerTestDir("hostile_files");
    fifo_ = (dir_ / "pipe").string();
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0600), 0);
  }
  static void ExpectMessage(const Status& s, const std::string& what) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
  }
  std::string SpecWithHfConfig(const std::string& config) {
    const std::string path = (dir_ / "spec.toml").string();
    std::ofstream(path) << "[job]\nname = \"x\"\n[cluster]\nnodes = 1\ngpus_per_node = 1\n[cluster.gpu.h100]\n"
                           "memory_gb = 80\ntflops_bf16 = 989\n[data]\nglobal_batch = 8\nseq_len = 64\n"
                           "[models.m]\nhf_config = \""
                        << config << "\"\n[[section]]\nname = \"s\"\nmodel = \"m\"\n";
    return path;
  }
  fs::path dir_;
  std::string fifo_;
};

TEST_F(HostileFiles, FifoAsSpecIsRefusedWithoutWaiting) {
  ExpectMessage(ParseSpecFile(fifo_).status(), "not a regular file");
}

TEST_F(HostileFiles, FifoAsHfConfigIsRefusedAtItsKey) {
  auto spec = ParseSpecFile(SpecWithHfConfig(fifo_));
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("not a regular file"), std::string::npos) << spec.status().ToString();
  EXPECT_NE(spec.status().message().find("spec.toml:13"), std::string::npos) << spec.status().ToString();
}

TEST_F(HostileFiles, FifoAsModelInfoIsRefused) {
  ExpectMessage(ModelFromHfConfigFile(fifo_).status(), "not a regular file");
}

TEST_F(HostileFiles, FifoAsProfilesIsRefused) {
  ExpectMessage(plan::ReadProfileFile(fifo_).status(), "not a regular file");
}

TEST_F(HostileFiles, DevZeroAsSpecIsRefusedNotReadForever) {
  ExpectMessage(ParseSpecFile("/dev/zero").status(), "not a regular file");
  ExpectMessage(ModelFromHfConfigFile("/dev/zero").status(), "not a regular file");
}

TEST_F(HostileFiles, AHugeSpecIsRefusedWithTheLimitInTheMessage) {
  const std::string huge = (dir_ / "huge.toml").string();
  std::ofstream(huge).close();
  fs::resize_file(huge, static_cast<uintmax_t>(kMaxSpecBytes) + 1);  // sparse: nothing written
  auto s = ParseSpecFile(huge);
  ExpectMessage(s.status(), std::to_string(kMaxSpecBytes) + " bytes allowed");
}

TEST_F(HostileFiles, ADirectoryAsSpecSaysItIsADirectory) {
  ExpectMessage(ParseSpecFile(dir_.string()).status(), "is a directory");
}

TEST_F(HostileFiles, ADirectoryAsHfConfigSaysItIsADirectory) {
  auto spec = ParseSpecFile(SpecWithHfConfig(dir_.string()));
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("is a directory"), std::string::npos) << spec.status().ToString();
}

TEST_F(HostileFiles, ARegularFileIsReadWhole) {
  const std::string path = (dir_ / "small.txt").string();
  std::ofstream(path) << "hello\nworld\n";
  auto text = ReadSmallFile(path, 64, "a test file");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "hello\nworld\n");
  EXPECT_EQ(ReadSmallFile((dir_ / "absent").string(), 64, "x").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace maestro::compiler
