// SPDX-License-Identifier: Apache-2.0
#include "datalayer/manifest_line.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace maestro::datalayer::internal {
namespace {

bool Scan(const std::string& s, ManifestLine& out) {
  return ScanSimpleManifestLine(s.data(), s.data() + s.size(), out);
}

// Whenever the fast scanner accepts a line, it must read what nlohmann reads.
void ExpectAgreesWithNlohmann(const std::string& s) {
  ManifestLine line;
  ASSERT_TRUE(Scan(s, line)) << s;
  const auto j = nlohmann::json::parse(s);
  EXPECT_EQ(line.id, j.at("id").get<int64_t>()) << s;
  EXPECT_EQ(std::string(line.location), j.at("location").get<std::string>()) << s;
  ASSERT_EQ(line.tokens.size(), j.at("tokens").size()) << s;
  for (const auto& [name, n] : line.tokens) EXPECT_EQ(j.at("tokens").at(std::string(name)).get<int64_t>(), n) << s;
}

TEST(ManifestLine, FastScannerReadsSimpleLinesLikeNlohmann) {
  ExpectAgreesWithNlohmann(R"({"id": 17, "location": "shard-3.tar:1234", "tokens": {"text": 412, "image": 576}})");
  ExpectAgreesWithNlohmann(R"({"tokens":{"audio":0},"location":"","id":-3})");
  ExpectAgreesWithNlohmann(" {\t\"id\" : 0 , \"location\" : \"a b\" , \"tokens\" : { \"text\" : 1 } }\r");
  ExpectAgreesWithNlohmann(R"({"id": 123456789012345678, "location": "é", "tokens": {"text": 9}})");
}

TEST(ManifestLine, LeavesEverythingElseToNlohmann) {
  ManifestLine line;
  for (const std::string s : {
           R"({"id": 1.5, "location": "a", "tokens": {"text": 1}})",               // float
           R"({"id": 1e3, "location": "a", "tokens": {"text": 1}})",               // exponent
           R"({"id": 1, "location": "a\"b", "tokens": {"text": 1}})",              // escape
           R"({"id": 1, "location": "a", "tokens": {"text": -1}})",                // negative count
           R"({"id": 1, "location": "a", "tokens": {}})",                          // no modality
           R"({"id": 1, "location": "a", "tokens": {"text": 1}, "extra": 2})",     // unknown key
           R"({"id": 1, "location": "a", "tokens": {"text": 1, "text": 2}})",      // duplicate modality
           R"({"id": 1, "location": "a"})",                                        // missing key
           R"({"id": 01, "location": "a", "tokens": {"text": 1}})",                // leading zero
           R"({"id": 1234567890123456789, "location": "a", "tokens": {"t": 1}})",  // 19 digits
           R"({"id": 1, "location": "a", "tokens": {"text": 1}} trailing)",
           R"({"id": 1, "location": "a", "tokens": {"text": 1})",  // unterminated
           "not json",
       }) {
    EXPECT_FALSE(Scan(s, line)) << s;
  }
}

}  // namespace
}  // namespace maestro::datalayer::internal
