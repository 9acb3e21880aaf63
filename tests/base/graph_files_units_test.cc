// SPDX-License-Identifier: Apache-2.0
// base/graph.h, base/files.h, base/units.h: the one home of each rule.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/files.h"
#include "base/graph.h"
#include "base/units.h"
#include "tests/fixtures/scratch.h"

namespace maestro {
namespace {

TEST(TopologicalOrder, EveryEdgePointsForwardAndTiesGoToTheSmallestIndex) {
  // 3 -> 1 -> 0, 2 free: 2 and 3 are ready first; 2 < 3.
  const DirectedEdges edges = {{3, 1}, {1, 0}};
  EXPECT_EQ(TopologicalOrder(4, edges), (std::vector<int>{2, 3, 1, 0}));
  EXPECT_EQ(TopologicalOrder(3, {}), (std::vector<int>{0, 1, 2}));
}

TEST(TopologicalOrder, ACycleLeavesItsVerticesOut) {
  const DirectedEdges edges = {{0, 1}, {1, 2}, {2, 1}};
  EXPECT_EQ(TopologicalOrder(3, edges), (std::vector<int>{0}));
}

TEST(FindCycle, NoneInADag) {
  const DirectedEdges diamond = {{0, 1}, {0, 2}, {1, 3}, {2, 3}};
  EXPECT_FALSE(FindCycle(4, diamond).found());
}

TEST(FindCycle, NamesTheCycleAndItsClosingEdge) {
  // 0 -> 1 -> 2 -> 1: the cycle is 1 -> 2 -> 1, closed by edge 2 (2 -> 1).
  const DirectedEdges edges = {{0, 1}, {1, 2}, {2, 1}};
  const GraphCycle c = FindCycle(3, edges);
  ASSERT_TRUE(c.found());
  EXPECT_EQ(c.vertices, (std::vector<int>{1, 2}));
  EXPECT_EQ(c.closing_edge, 2);
  const GraphCycle self = FindCycle(2, {{1, 1}});
  EXPECT_EQ(self.vertices, (std::vector<int>{1}));
  EXPECT_EQ(self.closing_edge, 0);
}

// Issue #18: the recursive search overflowed the stack on a chain of 60,000
// sections (SIGSEGV). A chain of a million vertices, and a ring closed at its
// far end, are walked on the heap.
TEST(FindCycle, AChainOfAMillionVerticesNeedsNoCallStack) {
  constexpr int kN = 1'000'000;
  DirectedEdges chain;
  for (int v = 0; v + 1 < kN; ++v) chain.emplace_back(v, v + 1);
  EXPECT_FALSE(FindCycle(kN, chain).found());
  chain.emplace_back(kN - 1, 1);  // closes 1 -> ... -> kN-1 -> 1
  const GraphCycle ring = FindCycle(kN, chain);
  ASSERT_TRUE(ring.found());
  EXPECT_EQ(ring.vertices.size(), static_cast<size_t>(kN - 1));
  EXPECT_EQ(ring.vertices.front(), 1);
  EXPECT_EQ(ring.vertices.back(), kN - 1);
  EXPECT_EQ(ring.closing_edge, kN - 1);
  EXPECT_EQ(TopologicalOrder(kN, DirectedEdges(chain.begin(), chain.end() - 1)).size(), static_cast<size_t>(kN));
}

TEST(FindCycle, FollowsEdgesInTheirOrderFromTheSmallestVertex) {
  // 0 -> 2 -> 0 is met before 0 -> 1 -> 0 would be, as edge 0 comes first.
  const DirectedEdges edges = {{0, 2}, {0, 1}, {1, 0}, {2, 0}};
  const GraphCycle c = FindCycle(3, edges);
  EXPECT_EQ(c.vertices, (std::vector<int>{0, 2}));
  EXPECT_EQ(c.closing_edge, 3);
}

class FilesTest : public fixtures::TempDirTest {
 protected:
  FilesTest() : TempDirTest("maestro-files") {}
  static std::string Read(const std::string& path) { return fixtures::ReadFile(path); }
};

TEST_F(FilesTest, CreateDirectoriesMakesParentsAndAcceptsExisting) {
  const std::string d = dir_ + "/a/b/c";
  ASSERT_TRUE(CreateDirectories(d).ok());
  EXPECT_TRUE(std::filesystem::is_directory(d));
  EXPECT_TRUE(CreateDirectories(d).ok());
  std::ofstream(dir_ + "/file") << "x";
  const Status s = CreateDirectories(dir_ + "/file");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir_ + "/file"), std::string::npos) << s.message();
}

TEST_F(FilesTest, WriteFileAtomicallyReplacesWholeAndSetsTheMode) {
  const std::string path = dir_ + "/job.sbatch";
  ASSERT_TRUE(WriteFileAtomically(path, "first\n").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second\n", 0755).ok());
  EXPECT_EQ(Read(path), "second\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_F(FilesTest, AFailedWriteLeavesTheOldFileAndNamesThePath) {
  const std::string path = dir_ + "/plan.json";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  // A directory where the temporary file would go: the create fails.
  std::filesystem::create_directory(path + ".tmp");
  const Status s = WriteFileAtomically(path, "new");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_EQ(Read(path), "old");
  // A missing directory.
  const Status missing = WriteFileAtomically(dir_ + "/no/such/dir/f", "x");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("no/such/dir"), std::string::npos) << missing.message();
}

// Issue #18: a directory in the way of one output left the others replaced
// and *.tmp files behind; now all are replaced or none.
TEST_F(FilesTest, WriteFilesAtomicallyReplacesAllOrNone) {
  const std::string a = dir_ + "/plan.json", b = dir_ + "/job.sbatch", c = dir_ + "/report.txt";
  ASSERT_TRUE(WriteFilesAtomically({{a, "a1"}, {b, "b1", 0755}, {c, "c1"}}).ok());
  EXPECT_EQ(Read(a) + Read(b) + Read(c), "a1b1c1");
  std::filesystem::remove(c);
  std::filesystem::create_directory(c);
  const Status s = WriteFilesAtomically({{a, "a2"}, {b, "b2", 0755}, {c, "c2"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'" + c + "': Is a directory"), std::string::npos) << s.message();
  EXPECT_EQ(Read(a) + Read(b), "a1b1");
  // A temporary that cannot be created (a directory where it would go): the
  // ones written before it are removed, nothing is replaced.
  std::filesystem::remove(c);
  std::filesystem::create_directory(b + ".tmp");
  const Status t = WriteFilesAtomically({{a, "a3"}, {b, "b3", 0755}, {c, "c3"}});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find(std::strerror(EISDIR)), std::string::npos) << t.message();
  EXPECT_EQ(Read(a) + Read(b), "a1b1");
  EXPECT_FALSE(std::filesystem::exists(a + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(c));
  EXPECT_FALSE(std::filesystem::exists(c + ".tmp"));
}

TEST(Units, BytesAndCounts) {
  EXPECT_EQ(HumanBytes(17), "17 B");
  EXPECT_EQ(HumanBytes(4096), "4.0 KiB");
  EXPECT_EQ(HumanBytes(4096, WholeUnits::kTrimDecimal), "4 KiB");
  EXPECT_EQ(HumanBytes(1536, WholeUnits::kTrimDecimal), "1.5 KiB");
  EXPECT_EQ(HumanBytes(3.5 * kGiB), "3.5 GiB");
  EXPECT_EQ(HumanBytes(2048 * kGiB), "2.0 TiB");
  EXPECT_EQ(GiBText(1.3 * kGiB), "1.3");
  EXPECT_EQ(HumanCount(7.6e9), "7.6B");
  EXPECT_EQ(HumanCount(950), "950");
}

}  // namespace
}  // namespace maestro
