// SPDX-License-Identifier: Apache-2.0
// launcher/comm.h without a job: the shape rules every backend shares, and an
// optional operation a backend lacks ("backend X does not support Y").
#include <gtest/gtest.h>

#include <vector>

#include "launcher/comm.h"

namespace maestro::launcher {
namespace {

// A backend with only the required operations, as a new one starts out.
class MinimalBackend final : public Backend {
 public:
  MinimalBackend() {
    info_.description = "ep group of section 'moe' (ranks 0,1)";
    info_.ranks = {0, 1};
    info_.my_index = 0;
    info_.world_rank = 0;
  }
  const char* name() const override { return "minimal"; }
  Device device() const override { return Device::kCpu; }
  const GroupInfo& group() const override { return info_; }
  Millis timeout() const override { return Millis(1000); }
  StatusOr<WorkPtr> AllReduce(Buffer, ReduceOp) override { return Status::Internal("not in this test"); }
  StatusOr<WorkPtr> AllGather(Buffer, Buffer) override { return Status::Internal("not in this test"); }
  StatusOr<WorkPtr> ReduceScatter(Buffer, Buffer, ReduceOp) override { return Status::Internal("not in this test"); }
  StatusOr<WorkPtr> Broadcast(Buffer, int) override { return Status::Internal("not in this test"); }
  StatusOr<WorkPtr> Send(Buffer, int, int) override { return Status::Internal("not in this test"); }
  StatusOr<WorkPtr> Recv(Buffer, int, int) override { return Status::Internal("not in this test"); }
  StatusOr<WorkPtr> Barrier() override { return Status::Internal("not in this test"); }

 private:
  GroupInfo info_;
};

TEST(Backend, AnOptionalOperationItLacksSaysSoNamingBackendAndGroup) {
  MinimalBackend backend;
  std::vector<float> in(4), out(4);
  auto work = backend.AllToAll(CpuBuffer(in), CpuBuffer(out));
  ASSERT_FALSE(work.ok());
  EXPECT_EQ(work.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(work.status().message().find("backend minimal does not support all_to_all"), std::string::npos)
      << work.status().message();
  EXPECT_NE(work.status().message().find("ep group of section 'moe'"), std::string::npos);
}

TEST(CommShapes, BlockCollectivesNeedGTimesTheSmallBuffer) {
  GroupInfo g;
  g.description = "dp group";
  g.ranks = {0, 1, 2};
  std::vector<float> small(4), big(12), wrong(11);
  std::vector<double> big_f64(12);
  EXPECT_TRUE(CheckBlockShapes("all_gather", g, CpuBuffer(small), CpuBuffer(big)).ok());
  const Status bad = CheckBlockShapes("all_gather", g, CpuBuffer(small), CpuBuffer(wrong));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("all_gather on dp group"), std::string::npos) << bad.message();
  EXPECT_FALSE(CheckBlockShapes("reduce_scatter", g, CpuBuffer(small), CpuBuffer(big_f64)).ok());
}

TEST(CommShapes, AllToAllNeedsEqualBuffersOfGBlocks) {
  GroupInfo g;
  g.description = "ep group";
  g.ranks = {0, 1, 2};
  std::vector<float> a(12), b(12), c(11), d(10);
  EXPECT_TRUE(CheckAllToAllShapes(g, CpuBuffer(a), CpuBuffer(b)).ok());
  EXPECT_FALSE(CheckAllToAllShapes(g, CpuBuffer(a), CpuBuffer(c)).ok());
  const Status uneven = CheckAllToAllShapes(g, CpuBuffer(c), CpuBuffer(c));
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.message().find("3 blocks"), std::string::npos) << uneven.message();
  EXPECT_FALSE(CheckAllToAllShapes(g, CpuBuffer(d), CpuBuffer(d)).ok());
}

}  // namespace
}  // namespace maestro::launcher
