// SPDX-License-Identifier: Apache-2.0
// The default text: fortunes-min's cookie files without their separators, the
// GPL-3 fallback when they are absent, and a clear error when both are.
#include "datasets/default_text.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

namespace fs = std::filesystem;

// This file's scratch folders: <test-tmp>/maestro-datasets-text-<pid>/<name> (fixtures::ScratchDir).
constexpr char kScratch[] = "maestro-datasets-text-";

TEST(DefaultText, FortunesInOrderWithoutSeparators) {
  const std::string dir = fixtures::ScratchDir(kScratch, "fortunes");
  std::ofstream(dir + "/literature") << "A quote.\n\t\t-- Someone\n%\nAnother one.\n%\n";
  std::ofstream(dir + "/fortunes") << "Fortune one.\n%\n100% sure.\n";
  std::ofstream(dir + "/riddles") << "Q: Why?\nA: Because.\n%";
  auto t = ReadDefaultText(dir, dir + "/no-gpl");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->text, "A quote.\n\t\t-- Someone\nAnother one.\nFortune one.\n100% sure.\nQ: Why?\nA: Because.\n");
  EXPECT_EQ(t->source.rfind("fortunes-min (" + dir, 0), 0u) << t->source;
}

TEST(DefaultText, FallsBackToGplThenFailsNamingBothPackages) {
  const std::string dir = fixtures::ScratchDir(kScratch, "fallback");
  std::ofstream(dir + "/GPL-3") << "GNU GENERAL PUBLIC LICENSE\n";
  auto gpl = ReadDefaultText(dir + "/no-fortunes", dir + "/GPL-3");
  ASSERT_TRUE(gpl.ok()) << gpl.status().ToString();
  EXPECT_EQ(gpl->text, "GNU GENERAL PUBLIC LICENSE\n");
  EXPECT_EQ(gpl->source, "base-files (" + dir + "/GPL-3)");

  auto none = ReadDefaultText(dir + "/no-fortunes", dir + "/no-gpl");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  for (const std::string& part : {dir + "/no-fortunes/literature", dir + "/no-gpl", std::string("fortunes-min"),
                                  std::string("base-files"), std::string("text_path")}) {
    EXPECT_NE(none.status().message().find(part), std::string::npos) << part << " in " << none.status().message();
  }
}

TEST(DefaultText, TheInstalledDefaultIsFortunesMin) {
  if (!fs::exists(std::string(kDefaultFortunesDir) + "/literature")) {
    GTEST_SKIP() << "install the Debian package fortunes-min (scripts/setup.sh)";
  }
  auto t = ReadDefaultText();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->source.rfind("fortunes-min", 0), 0u);
  EXPECT_GT(t->text.size(), 50'000u) << "larger than the GPL-3 fallback";
  EXPECT_EQ(t->text.find("\n%\n"), std::string::npos);
}

}  // namespace
}  // namespace maestro::datasets
