// SPDX-License-Identifier: Apache-2.0
#include "base/status.h"

#include <gtest/gtest.h>

#include "base/checks.h"

namespace maestro {
namespace {

StatusOr<int> ParsePositive(int x) {
  if (x <= 0) return Status::InvalidArgument("x must be positive");
  return x;
}

StatusOr<int> Doubled(int x) {
  MAESTRO_ASSIGN_OR_RETURN(int v, ParsePositive(x));
  return 2 * v;
}

Status ForeignCall(int result) {
  MAESTRO_FOREIGN_CHECK("FakeAPI", result, rc == 0, StatusCode::kIOError, "while testing");
  return Status::Ok();
}

TEST(Status, OkAndErrorCarryCodeAndMessage) {
  EXPECT_TRUE(Status::Ok().ok());
  const Status s = Status::NotFound("no such section 'vit'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NotFound: no such section 'vit'");
  EXPECT_EQ(s.WithContext("spec.toml").message(), "spec.toml: no such section 'vit'");
}

TEST(StatusOr, AssignOrReturnPropagatesErrors) {
  EXPECT_EQ(*Doubled(21), 42);
  const auto bad = Doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THROW(Doubled(-1).ValueOrDie(), Error);
}

TEST(Checks, ForeignCheckNamesApiCallCodeAndLocation) {
  EXPECT_TRUE(ForeignCall(0).ok());
  const Status s = ForeignCall(7);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("FakeAPI"), std::string::npos);
  EXPECT_NE(s.message().find("code 7"), std::string::npos);
  EXPECT_NE(s.message().find("while testing"), std::string::npos);
  EXPECT_NE(s.message().find("status_test.cc"), std::string::npos);
}

}  // namespace
}  // namespace maestro
