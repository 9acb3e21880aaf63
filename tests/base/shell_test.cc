// SPDX-License-Identifier: Apache-2.0
// ShellQuote is checked against a real /bin/sh: whatever bytes go in, the
// shell must hand back exactly those bytes as one word and run nothing else.
#include "base/shell.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/text.h"

namespace maestro {
namespace {

// Runs `sh -c "printf %s <quoted>"` and returns what it printed.
std::string EchoThroughShell(const std::string& word) {
  const std::string cmd = "printf %s " + ShellQuote(word);
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  std::array<char, 256> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

TEST(ShellQuote, HostileStringsComeBackUnchanged) {
  for (const std::string s : {"plain", "", "with space", "it's", "$(touch /tmp/pwned)", "`id`", "a;b|c&d", "\"dq\"",
                              "back\\slash", "new\nline", "*glob?", "-dash", "'''"}) {
    EXPECT_EQ(EchoThroughShell(s), s) << "input: " << s;
  }
}

TEST(ShellQuote, RandomBytesRoundTrip) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> byte(1, 255);  // no NUL: a C string cannot carry it
  for (int i = 0; i < 50; ++i) {
    std::string s(static_cast<size_t>(i % 17 + 1), 'x');
    for (char& c : s) c = static_cast<char>(byte(rng));
    EXPECT_EQ(EchoThroughShell(s), s);
  }
}

TEST(ShellQuote, PlainWordsStayReadable) {
  EXPECT_EQ(ShellQuote("node[1-4]"), "'node[1-4]'");
  EXPECT_EQ(ShellQuote("gpu:h100:8"), "gpu:h100:8");
  EXPECT_TRUE(IsPlainShellWord("plan.json"));
  EXPECT_FALSE(IsPlainShellWord("a b"));
  EXPECT_TRUE(IsSingleLine("abc def"));
  EXPECT_FALSE(IsSingleLine("abc\n#SBATCH --x"));
}

// Issue #18: every line of job.sbatch goes through one writer; a control
// character in a line is refused, in a comment escaped.
TEST(ShellScriptWriter, RefusesALineWithAControlCharacterAndNamesIt) {
  ShellScriptWriter w("job.sbatch");
  w.Line("#!/bin/bash");
  w.Line("MAESTRO_PLAN='a\n#SBATCH --uid=0'");
  w.Line("echo fine");
  const auto s = w.Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("job.sbatch line 2 would hold a control character: "
                                      "MAESTRO_PLAN='a\\n#SBATCH --uid=0'"),
            std::string::npos)
      << s.status().message();
  for (const std::string& bad :
       std::vector<std::string>{"a\rb", "bell\a", "esc\x1b[2J", std::string("n\0ul", 4), "del\x7f"}) {
    ShellScriptWriter one("x");
    one.Line(bad);
    EXPECT_FALSE(one.Finish().ok()) << PrintableText(bad);
  }
}

TEST(ShellScriptWriter, CommentsEscapeControlCharactersAndTabsPassInCode) {
  ShellScriptWriter w("job.sbatch");
  w.Line("#!/bin/bash");
  w.Comment("from 'x\n#SBATCH --account=other\ntouch F\x1b'");
  w.Line("\techo ok");
  const auto s = w.Finish();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, "#!/bin/bash\n# from 'x\\n#SBATCH --account=other\\ntouch F\\x1b'\n\techo ok\n");
}
}  // namespace
}  // namespace maestro
