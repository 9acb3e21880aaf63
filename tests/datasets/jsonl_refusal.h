// SPDX-License-Identifier: Apache-2.0
// The check every refused manifest line gets in the JSONL tests
// (jsonl_manifest_test.cc, jsonl_native_test.cc): a manifest whose line 2 is
// bad fails Open with `code`, a message that starts "<path>:2 (sample 1",
// says `says` and gives a fix after "; "; under kSkip it opens with exactly
// that line skipped, with the same message.
// Header-only. May call: datasets/jsonl_manifest.h, GoogleTest.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "datasets/jsonl_manifest.h"

namespace maestro::testing {

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

}  // namespace maestro::testing
