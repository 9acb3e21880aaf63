// SPDX-License-Identifier: Apache-2.0
// What the JSONL manifest tests (jsonl_manifest_test.cc, jsonl_native_test.cc)
// share: token-id builders (Repeat, Cat) and the check every refused line
// gets: a manifest whose line 2 is
// bad fails Open with `code`, a message that starts "<path>:2 (sample 1",
// says `says` and gives a fix after "; "; under kSkip it opens with exactly
// that line skipped, with the same message. ExpectOptionsRefused: bad
// options are InvalidArgument saying `says`.
// Header-only. May call: datasets/jsonl_manifest.h, GoogleTest.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "datasets/jsonl_manifest.h"

namespace maestro::testing {

// `n` copies of token `id`.
inline std::vector<int64_t> Repeat(int64_t id, int64_t n) {
  return std::vector<int64_t>(static_cast<size_t>(n), id);
}
// The parts one after another.
inline std::vector<int64_t> Cat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Returns the manifest opened under kSkip (for further checks).
inline StatusOr<datasets::JsonlManifest> ExpectSecondLineRefused(const std::string& path,
                                                                 datasets::JsonlManifestOptions options,
                                                                 StatusCode code, const std::string& says) {
  using datasets::BadSamplePolicy;
  using datasets::JsonlManifest;
  auto m = JsonlManifest::Open(path, options);
  EXPECT_FALSE(m.ok());
  if (m.ok()) return Status::Internal("line 2 was accepted");
  EXPECT_EQ(m.status().code(), code) << m.status().ToString();
  const std::string msg = m.status().message();
  EXPECT_EQ(msg.rfind(path + ":2 (sample 1", 0), 0u) << msg;
  EXPECT_NE(msg.find(says), std::string::npos) << msg << "\n  expected: " << says;
  EXPECT_NE(msg.find("; "), std::string::npos) << "no fix in: " << msg;

  options.on_bad_sample = BadSamplePolicy::kSkip;
  auto s = JsonlManifest::Open(path, options);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return s;
  EXPECT_EQ(s->skipped().size(), 1u);
  if (s->skipped().size() == 1) {
    EXPECT_EQ(s->skipped()[0].line, 2);
    EXPECT_EQ(s->skipped()[0].status.message(), msg);
  }
  return s;
}

inline void ExpectOptionsRefused(const std::string& path, const datasets::JsonlManifestOptions& options,
                                 const std::string& says) {
  auto m = datasets::JsonlManifest::Open(path, options);
  ASSERT_FALSE(m.ok()) << says;
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find(says), std::string::npos) << m.status().message();
}

}  // namespace maestro::testing
