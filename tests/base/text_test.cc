// SPDX-License-Identifier: Apache-2.0
// base/text.h: a user's text on its way to a terminal, report or message
// (issue #18: ESC, BEL, newlines and NULs from a spec were echoed raw).
#include "base/text.h"

#include <gtest/gtest.h>

#include <string>

namespace maestro {
namespace {

TEST(PrintableText, EscapesEveryControlCharacter) {
  EXPECT_EQ(PrintableText("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(PrintableText(std::string("n\0l", 3)), "n\\0l");
  EXPECT_EQ(PrintableText("\x1b[2J\a\x7f\x01"), "\\x1b[2J\\x07\\x7f\\x01");
  EXPECT_EQ(PrintableText("\xc2\x9b"
                          "31m"),
            "\\u009b31m");  // C1 CSI in UTF-8
  EXPECT_EQ(PrintableText("plain text, 'quoted' \\ slash"), "plain text, 'quoted' \\ slash");
}

TEST(PrintableText, KeepsValidUtf8AndEscapesTheRest) {
  EXPECT_EQ(PrintableText("modèle 模型 🚀"), "modèle 模型 🚀");
  EXPECT_EQ(PrintableText("spec\xff\xfe.toml"), "spec\\xff\\xfe.toml");
  EXPECT_EQ(PrintableText("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(PrintableText("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(PrintableText("\xe6\xa8"), "\\xe6\\xa8");           // cut short
}

TEST(PrintableLines, KeepsOnlyTheLineBreaks) {
  EXPECT_EQ(PrintableLines("one\ntwo\x1b\n"), "one\ntwo\\x1b\n");
  EXPECT_EQ(PrintableLines("cr\r\n"), "cr\\r\n");
}

TEST(Utf8ErrorOffset, FindsTheFirstBadByte) {
  EXPECT_EQ(Utf8ErrorOffset("abc"), std::string_view::npos);
  EXPECT_EQ(Utf8ErrorOffset("模型"), std::string_view::npos);
  EXPECT_EQ(Utf8ErrorOffset("ab\xff"), 2u);
  EXPECT_EQ(Utf8ErrorOffset("\xf4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(Utf8ErrorOffset(""), std::string_view::npos);
}

}  // namespace
}  // namespace maestro
