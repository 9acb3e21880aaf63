// SPDX-License-Identifier: Apache-2.0
#include "plan/plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "plan/profile.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::plan {
namespace {

void AddSection(Plan& p, const std::string& name, int tp, int cp, int dp, int pp) {
  AppendSingleNodeSection(p, name, tp, cp, dp, pp);
}

Plan VlmPlan(int vit_dp, int llm_dp) {
  Plan p;
  p.job_name = "vlm";
  AddSection(p, "vit", 1, 1, vit_dp, 1);
  AddSection(p, "llm", 2, 1, llm_dp, 2);
  p.edges.push_back({"vit", "llm", "image_embeddings", 1024, true});
  return p;
}

TEST(RankLayout, EveryRankHasUniqueCoordinatesAndRoundTrips) {
  const Plan p = VlmPlan(2, 2);
  ASSERT_TRUE(Validate(p).ok());
  EXPECT_EQ(p.world_size(), 2 + 8);
  std::set<std::tuple<int, int, int, int, int>> seen;
  for (int r = 0; r < p.world_size(); ++r) {
    const auto c = CoordsOfRank(p, r).ValueOrDie();
    EXPECT_TRUE(seen.insert({c.section, c.tp, c.cp, c.dp, c.pp}).second);
    EXPECT_EQ(GlobalRankOf(p, c.section, c.tp, c.cp, c.dp, c.pp), r);
  }
  EXPECT_FALSE(CoordsOfRank(p, p.world_size()).ok());
  // TP is fastest: llm ranks 2,3 are one TP group; PP is slowest.
  EXPECT_EQ(GroupOf(p, 2, GroupKind::kTP), (std::vector<int>{2, 3}));
  EXPECT_EQ(GroupOf(p, 2, GroupKind::kDP), (std::vector<int>{2, 4}));
  EXPECT_EQ(GroupOf(p, 2, GroupKind::kPP), (std::vector<int>{2, 6}));
  EXPECT_EQ(GroupsOf(p, 1, GroupKind::kTP).size(), 4u);
}

// EP groups are carved from the DP ranks (docs/moe.md): ep consecutive DP
// ranks with the same TP/PP indexes; the expert-DP group holds the same
// experts (dp mod ep).
TEST(RankLayout, ExpertParallelGroupsAreConsecutiveDpRanks) {
  Plan p;
  p.job_name = "moe";
  AddSection(p, "llm", 2, 1, 4, 1);  // ranks 0..7: tp fastest, dp 0..3
  p.sections[0].model.experts = 4;
  p.sections[0].config.ep = 2;
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  const auto c = CoordsOfRank(p, 5).ValueOrDie();  // tp 1, dp 2
  EXPECT_EQ(c.dp, 2);
  EXPECT_EQ(c.ep_rank, 0);
  EXPECT_EQ(c.expert_dp, 1);
  EXPECT_EQ(GroupOf(p, 5, GroupKind::kEP), (std::vector<int>{5, 7}));        // dp 2, 3
  EXPECT_EQ(GroupOf(p, 5, GroupKind::kExpertDP), (std::vector<int>{1, 5}));  // dp 0, 2
  EXPECT_EQ(GroupOf(p, 2, GroupKind::kEP), (std::vector<int>{0, 2}));
  EXPECT_EQ(GroupsOf(p, 0, GroupKind::kEP).size(), 4u);
  EXPECT_STREQ(GroupKindName(GroupKind::kExpertDP), "expert-dp");
  p.sections[0].config.ep = 3;  // divides neither dp 4 nor 4 experts
  const Status bad = Validate(p);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("ep = 3 must divide dp (4)"), std::string::npos) << bad.ToString();
  p.sections[0].config.ep = 1;  // no EP: each group is the rank alone
  EXPECT_EQ(GroupOf(p, 5, GroupKind::kEP), (std::vector<int>{5}));
  EXPECT_EQ(GroupOf(p, 5, GroupKind::kExpertDP), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(GroupOf(p, 5, GroupKind::kDPxCP), GroupOf(p, 5, GroupKind::kDP));  // cp 1: the DP group
}

TEST(Groups, DpxCpHoldsEveryDpAndCpRankOfOneTpAndPpIndex) {
  Plan p;
  p.job_name = "dpcp";
  AddSection(p, "llm", 2, 2, 2, 1);  // ranks 0..7: tp fastest, then cp, then dp
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  const auto c = CoordsOfRank(p, 7).ValueOrDie();  // tp 1, cp 1, dp 1
  ASSERT_EQ(c.cp, 1);
  ASSERT_EQ(c.dp, 1);
  const auto group = GroupOf(p, 7, GroupKind::kDPxCP);
  EXPECT_EQ(group, (std::vector<int>{1, 3, 5, 7}));
  // A rank's index in it is dp * cp_size + cp (docs/gradient_sync.md).
  for (size_t i = 0; i < group.size(); ++i) {
    const auto x = CoordsOfRank(p, group[i]).ValueOrDie();
    EXPECT_EQ(static_cast<size_t>(x.dp * 2 + x.cp), i);
    EXPECT_EQ(x.tp, 1);
  }
  EXPECT_EQ(GroupsOf(p, 0, GroupKind::kDPxCP).size(), 2u);  // one per TP index
  EXPECT_STREQ(GroupKindName(GroupKind::kDPxCP), "dp-cp");
}

TEST(Links, FanOutMapsUpstreamReplicaToConsecutiveDownstreamReplicas) {
  const Plan p = VlmPlan(1, 2);  // fan-out 2
  const auto links = LinksOfEdge(p, 0);
  ASSERT_EQ(links.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(links[i].up_dp, 0);
    EXPECT_EQ(links[i].down_dp, i);
    EXPECT_EQ(links[i].up_rank, 0);
    // First PP stage, tp = cp = 0 of downstream replica i.
    EXPECT_EQ(links[i].down_rank, GlobalRankOf(p, 1, 0, 0, i, 0));
  }
}

TEST(Links, FanInMirrorsFanOut) {
  Plan p;
  AddSection(p, "teacher", 1, 1, 4, 2);
  AddSection(p, "student", 1, 1, 2, 1);
  p.edges.push_back({"teacher", "student", "teacher_hidden", 4096, false});
  ASSERT_TRUE(Validate(p).ok());
  const auto links = LinksOfEdge(p, 0);
  ASSERT_EQ(links.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(links[i].up_dp, i);
    EXPECT_EQ(links[i].down_dp, i / 2);
    EXPECT_EQ(links[i].up_rank, GlobalRankOf(p, 0, 0, 0, i, 1));  // last PP stage sends
  }
  EXPECT_EQ(LinksOfRank(p, GlobalRankOf(p, 1, 0, 0, 1, 0)).size(), 2u);
}

// DP degrees that do not divide one another: replicas are linked where their
// shares of [0, 1) overlap. DP 2 -> 3: upstream 0 holds [0, 1/2), which
// meets downstream 0 ([0, 1/3)) and 1 ([1/3, 2/3)); upstream 1 meets 1 and 2.
TEST(Links, DpDegreesThatDoNotDivideLinkReplicasWhoseSharesOverlap) {
  const Plan p = VlmPlan(2, 3);
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  const auto links = LinksOfEdge(p, 0);
  std::vector<std::pair<int, int>> pairs;
  for (const Link& l : links) {
    pairs.emplace_back(l.up_dp, l.down_dp);
    EXPECT_EQ(l.up_rank, GlobalRankOf(p, 0, 0, 0, l.up_dp, 0));
    EXPECT_EQ(l.down_rank, GlobalRankOf(p, 1, 0, 0, l.down_dp, 0));
  }
  EXPECT_EQ(pairs, (std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 1}, {1, 2}}));
  Plan filled = p;
  FillLayout(filled);
  EXPECT_EQ(filled.edges[0].fanout, 0);
  EXPECT_EQ(filled.edges[0].fanin, 0);
  EXPECT_EQ(filled.links.size(), 4u);
  // Every (up, down) pair: linked exactly when LinksOfEdge lists it, for
  // degrees that nest and degrees that do not (DP_from + DP_to - gcd links).
  for (int a = 1; a <= 7; ++a) {
    for (int b = 1; b <= 7; ++b) {
      const Plan q = VlmPlan(a, b);
      std::set<std::pair<int, int>> listed;
      for (const Link& l : LinksOfEdge(q, 0)) EXPECT_TRUE(listed.insert({l.up_dp, l.down_dp}).second);
      EXPECT_EQ(static_cast<int>(listed.size()), a + b - std::gcd(a, b)) << a << " -> " << b;
      for (int u = 0; u < a; ++u) {
        for (int d = 0; d < b; ++d) {
          EXPECT_EQ(ReplicasLinked(u, a, d, b), listed.count({u, d}) == 1)
              << a << " -> " << b << ": " << u << ", " << d;
        }
      }
      // Where one divides the other, the fan-out / fan-in map.
      if (b % a == 0) {
        for (int d = 0; d < b; ++d) EXPECT_TRUE(ReplicasLinked(d / (b / a), a, d, b));
      }
      if (a % b == 0) {
        for (int u = 0; u < a; ++u) EXPECT_TRUE(ReplicasLinked(u, a, u / (a / b), b));
      }
    }
  }
}

TEST(Validate, RejectsCyclesAndLayoutGaps) {
  // The DP rule: a pinned fan-out or fan-in is exact; otherwise any degrees.
  EXPECT_FALSE(EdgeDpRuleHolds(1, 2, 3, 0));
  EXPECT_FALSE(EdgeDpRuleHolds(6, 2, 0, 2));
  EXPECT_TRUE(EdgeDpRuleHolds(2, 6, 3, 0));
  EXPECT_TRUE(EdgeDpRuleHolds(2, 3));
  Plan p = VlmPlan(1, 2);
  p.edges.push_back({"llm", "vit", "loop", 1, false});
  EXPECT_NE(Validate(p).message().find("cycle"), std::string::npos);
  p = VlmPlan(1, 2);
  p.sections[1].placement.first_rank = 5;
  EXPECT_NE(Validate(p).message().find("first_rank"), std::string::npos);
}

TEST(PlanJson, RoundTripsAndRejectsOtherSchemaVersions) {
  Plan p = VlmPlan(2, 4);
  p.sections[0].mode = SectionMode::kForward;
  p.sections[0].model.kind = ModelKind::kVit;
  p.sections[0].model.extra["rope_theta"] = 1e6;
  p.data.modalities.push_back({"image", 1.0 / 3, 256});
  const std::string text = PlanToJson(p);
  const Plan q = PlanFromJson(text).ValueOrDie();
  EXPECT_EQ(PlanToJson(q), text);
  EXPECT_EQ(q.sections[0].mode, SectionMode::kForward);
  EXPECT_DOUBLE_EQ(q.sections[0].model.extra.at("rope_theta"), 1e6);

  std::string old = text;
  old.replace(old.find("\"schema_version\": 3"), 19, "\"schema_version\": 0");
  const auto bad = PlanFromJson(old);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("recompile"), std::string::npos);
  EXPECT_FALSE(PlanFromJson("{not json").ok());
}

// spool_reuse (the compiler's choice over the job): written and read back
// when false; a plan written before the key reads as true (reuse, what the
// runtime did then).
TEST(PlanJson, SpoolReuseRoundTripsAndIsTrueWhenAbsent) {
  Plan p = VlmPlan(2, 4);
  p.spool_reuse = false;
  const std::string text = PlanToJson(p);
  EXPECT_FALSE(PlanFromJson(text).ValueOrDie().spool_reuse);
  auto json = nlohmann::json::parse(text);
  ASSERT_TRUE(json.contains("spool_reuse"));
  json.erase("spool_reuse");
  EXPECT_TRUE(PlanFromJson(json.dump()).ValueOrDie().spool_reuse);
}

// config.pp_layers (docs/pipeline.md): optional, absent from plan.json
// unless set, read back as written; the split it gives each stage; Validate
// refuses a list that does not cover the decoder's layers one stage each.
TEST(PipelineStageSplit, PpLayersIsOptionalRoundTripsAndSplitsTheLayers) {
  Plan p = VlmPlan(1, 1);
  SectionPlan& llm = p.sections[1];
  llm.model.kind = ModelKind::kDecoder;
  llm.model.layers = 5;
  ASSERT_TRUE(Validate(p).ok());
  EXPECT_EQ(PlanToJson(p).find("pp_layers"), std::string::npos) << "the even split writes nothing";
  // The even split: the first stages take the remainder.
  EXPECT_EQ(StageLayerSpan(llm.config, 5, 0).first, 0);
  EXPECT_EQ(StageLayerSpan(llm.config, 5, 0).end, 3);
  EXPECT_EQ(StageLayerSpan(llm.config, 5, 1).first, 3);
  EXPECT_EQ(StageLayerSpan(llm.config, 5, 1).end, 5);

  llm.config.pp_layers = {1, 4};
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  EXPECT_EQ(StageLayerSpan(llm.config, 5, 0).count(), 1);
  EXPECT_EQ(StageLayerSpan(llm.config, 5, 1).first, 1);
  EXPECT_EQ(StageLayerSpan(llm.config, 5, 1).end, 5);
  const std::string text = PlanToJson(p);
  EXPECT_NE(text.find("pp_layers"), std::string::npos);
  const Plan q = PlanFromJson(text).ValueOrDie();
  EXPECT_EQ(q.sections[1].config.pp_layers, llm.config.pp_layers);
  EXPECT_EQ(PlanToJson(q), text);
  // A plan written before the field (no key) reads the even split.
  std::string old = text;
  const size_t key = old.find("\"pp_layers\"");
  old.erase(key, old.find(']', key) + 1 - key);
  old.erase(old.rfind(',', key), 1);  // the comma before it
  const auto older = PlanFromJson(old);
  ASSERT_TRUE(older.ok()) << older.status().ToString() << "\n" << old;
  EXPECT_TRUE(older->sections[1].config.pp_layers.empty());

  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{2, 2}, std::vector<int64_t>{5, 0}, std::vector<int64_t>{1, 1, 3}}) {
    llm.config.pp_layers = bad;
    const Status s = Validate(p);
    ASSERT_FALSE(s.ok()) << bad.size();
    EXPECT_NE(s.message().find("section 'llm': config.pp_layers"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("sum to its 5 layers"), std::string::npos) << s.message();
  }
  llm.config.pp_layers = {3, 2};
  p.sections[0].model.kind = ModelKind::kVit;
  p.sections[0].config.pp_layers = {1};  // a ViT is not a pipelined decoder
  EXPECT_NE(Validate(p).message().find("section 'vit': pp_layers is for pipelined decoder sections"), std::string::npos)
      << Validate(p).message();
}

TEST(FillLayout, WritesGroupsLinksAndFanOutThatMatchTheFunctions) {
  Plan p = VlmPlan(1, 2);
  ASSERT_TRUE(Validate(p).ok());
  FillLayout(p);
  ASSERT_EQ(p.layout.size(), 2u);
  EXPECT_EQ(p.layout[1].first_rank, 1);
  EXPECT_EQ(p.layout[1].ranks, 8);
  EXPECT_EQ(p.layout[1].tp_groups, GroupsOf(p, 1, GroupKind::kTP));
  EXPECT_EQ(p.layout[1].pp_groups, GroupsOf(p, 1, GroupKind::kPP));
  EXPECT_EQ(p.edges[0].fanout, 2);
  EXPECT_EQ(p.edges[0].fanin, 0);
  ASSERT_EQ(p.links.size(), LinksOfEdge(p, 0).size());
  EXPECT_EQ(p.links[1].down_rank, LinksOfEdge(p, 0)[1].down_rank);
  const Plan q = PlanFromJson(PlanToJson(p)).ValueOrDie();
  EXPECT_EQ(PlanToJson(q), PlanToJson(p));
  EXPECT_EQ(q.layout[1].dp_groups, p.layout[1].dp_groups);
}

TEST(ProfileFile, ReadsAndWritesFilesNamingThePathOnFailure) {
  const std::string dir = std::string(MAESTRO_TEST_TMP) + "/profile-file-test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<ProfilePoint> points = {{"vit", 1, 16, 0.012, 0.004, 0.002}};
  ASSERT_TRUE(WriteProfileFile(dir + "/p.json", points).ok());
  auto back = ReadProfileFile(dir + "/p.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_DOUBLE_EQ((*back)[0].seconds, 0.012);
  auto missing = ReadProfileFile(dir + "/none.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("none.json"), std::string::npos);
  std::ofstream(dir + "/bad.json") << R"([{"gpus": 1}])";
  auto bad = ReadProfileFile(dir + "/bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.json: profile point 0"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(WriteProfileFile(dir + "/no-such-dir/p.json", points).ok());
  std::filesystem::remove_all(dir);
}

TEST(ProfileFile, RoundTripsAndNamesTheBadPoint) {
  const std::vector<ProfilePoint> points = {{"vit", 1, 16, 0.012, 0.004, 0.002}, {"llm", 2, 8, 0.02, 0.0, 0.0}};
  auto back = ProfilePointsFromJson(ProfilePointsToJson(points));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].section, "llm");
  EXPECT_EQ((*back)[1].gpus, 2);
  EXPECT_EQ((*back)[0].micro_batch, 16);
  EXPECT_DOUBLE_EQ((*back)[0].forward_seconds, 0.004);
  EXPECT_DOUBLE_EQ((*back)[0].optimizer_seconds, 0.002);
  // The optional parts may be absent; a required one may not.
  auto minimal = ProfilePointsFromJson(R"([{"section": "a", "gpus": 1, "micro_batch": 2, "seconds": 0.5}])");
  ASSERT_TRUE(minimal.ok());
  EXPECT_DOUBLE_EQ((*minimal)[0].forward_seconds, 0.0);
  auto bad = ProfilePointsFromJson(R"([{"section": "a", "gpus": 1, "micro_batch": 2, "seconds": 0.5}, {"gpus": 1}])");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("profile point 1"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ProfilePointsFromJson("{not json").ok());
}

// Issue #18, found by compiler/fuzz/profile_fuzz.cc: "gpus": 3.3e121 was
// converted to an int (undefined behaviour; UBSan: from_json.hpp "outside the
// range of representable values of type 'int'"), and 2^32 + 1 wrapped to 1.
TEST(ProfileFile, AFloatOrHugeCountIsRefusedNotConverted) {
  for (const std::string gpus : {"3.3e121", "1.5", "4294967297", "18446744073709551615", "-2147483649"}) {
    auto p = ProfilePointsFromJson(R"([{"section": "a", "gpus": )" + gpus + R"(, "micro_batch": 2, "seconds": 0.5}])");
    ASSERT_FALSE(p.ok()) << gpus;
    EXPECT_NE(p.status().message().find("profile point 0: 'gpus' must be a whole number (an int), got"),
              std::string::npos)
        << p.status().message();
  }
  auto mb = ProfilePointsFromJson(R"([{"section": "a", "gpus": 1, "micro_batch": 1e300, "seconds": 0.5}])");
  ASSERT_FALSE(mb.ok());
  EXPECT_NE(mb.status().message().find("'micro_batch'"), std::string::npos) << mb.status().message();
  EXPECT_TRUE(ProfilePointsFromJson(R"([{"section": "a", "gpus": 2147483647, "micro_batch": 1, "seconds": 1}])").ok());
}

// A fused section: a ViT and an LLM on the same 4 ranks (TP 2 x DP 2).
Plan FusedVlmPlan() {
  Plan p;
  p.job_name = "vlm";
  AddSection(p, "fused", 2, 1, 2, 1);
  SectionPlan vit, llm;
  vit.name = "vit";
  vit.model.kind = ModelKind::kVit;
  vit.activation = "image";
  llm.name = "llm";
  p.sections[0].components = {vit, llm};
  p.sections[0].component_edges.push_back({"vit", "llm", "image_embeddings", 1024, true});
  return p;
}

TEST(FusedSections, RoundTripAndExpandToTheirComponentsWithTheSectionsConfig) {
  const Plan p = FusedVlmPlan();
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  EXPECT_EQ(p.world_size(), 4);
  const Plan q = PlanFromJson(PlanToJson(p)).ValueOrDie();
  ASSERT_EQ(q.sections[0].components.size(), 2u);
  EXPECT_EQ(q.sections[0].component_edges[0].to, "llm");
  EXPECT_EQ(PlanToJson(q), PlanToJson(p));

  const Plan x = ExpandFusedSections(p);
  ASSERT_TRUE(Validate(x).ok()) << Validate(x).ToString();
  ASSERT_EQ(x.sections.size(), 2u);
  EXPECT_EQ(x.sections[0].name, "vit");
  EXPECT_EQ(x.sections[0].activation, "image");
  EXPECT_EQ(x.sections[1].config.tp, 2);
  EXPECT_EQ(x.sections[1].config.dp, 2);
  ASSERT_EQ(x.edges.size(), 1u);
  EXPECT_EQ(x.edges[0].from, "vit");
  // A plan without fused sections comes back as it was.
  const Plan plain = VlmPlan(1, 2);
  EXPECT_EQ(PlanToJson(ExpandFusedSections(plain)), PlanToJson(plain));
}

TEST(FusedSections, ValidateRefusesWhatTheRuntimeCannotRun) {
  {
    Plan p = FusedVlmPlan();
    p.sections[0].components.pop_back();
    p.sections[0].component_edges.clear();
    EXPECT_NE(Validate(p).message().find("two or more"), std::string::npos) << Validate(p).ToString();
  }
  {
    Plan p = FusedVlmPlan();
    p.sections[0].components[1].name = "vit";
    EXPECT_NE(Validate(p).message().find("appears twice"), std::string::npos) << Validate(p).ToString();
  }
  {
    Plan p = FusedVlmPlan();
    p.sections[0].component_edges[0].to = "nowhere";
    EXPECT_NE(Validate(p).message().find("does not join"), std::string::npos) << Validate(p).ToString();
  }
  {
    Plan p = FusedVlmPlan();
    p.sections[0].component_edges.push_back({"llm", "vit", "back", 1, true});
    EXPECT_NE(Validate(p).message().find("cycle"), std::string::npos) << Validate(p).ToString();
  }
  {
    Plan p = FusedVlmPlan();  // a fused section with an edge to another section
    AddSection(p, "head", 1, 1, 2, 1);
    p.edges.push_back({"fused", "head", "rows", 4, false});
    EXPECT_NE(Validate(p).message().find("whole graphs"), std::string::npos) << Validate(p).ToString();
  }
}

TEST(FusedSections, VersionOnePlansStillLoadAndNewerOnesAreRefused) {
  std::string text = PlanToJson(VlmPlan(1, 2));
  text.replace(text.find("\"schema_version\": 3"), 19, "\"schema_version\": 1");
  EXPECT_TRUE(PlanFromJson(text).ok());
  text.replace(text.find("\"schema_version\": 1"), 19, "\"schema_version\": 4");
  const auto newer = PlanFromJson(text);
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("versions 1 to 3"), std::string::npos) << newer.status().ToString();
}

// Schema 3: the ViT (1 rank) and the projector (1 rank) share the second of
// two 3-task nodes with the LLM's last rank; one het component, the LLM's
// ranks first (ranks map to sections by their index in the component, not
// by the sections' order in the plan).
Plan SharedNodePlan() {
  Plan p;
  p.job_name = "shared";
  AddSection(p, "vit", 1, 1, 1, 1);
  AddSection(p, "proj", 1, 1, 1, 1);
  AddSection(p, "llm", 1, 1, 4, 1);
  p.edges.push_back({"vit", "proj", "patch_embeddings", 64, true});
  p.edges.push_back({"proj", "llm", "image_embeddings", 64, true});
  const int first[] = {4, 5, 0};
  for (int i = 0; i < 3; ++i) {
    Placement& pl = p.sections[static_cast<size_t>(i)].placement;
    pl.het_component = 0;
    pl.first_rank = first[i];
    pl.nodes = 2;
    pl.tasks_per_node = 3;
  }
  return p;
}

TEST(SharedNodes, ASectionsRankIndexInItsComponentSaysItsSectionAndNode) {
  Plan p = SharedNodePlan();
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  EXPECT_EQ(p.world_size(), 6);
  const int want_section[] = {2, 2, 2, 2, 0, 1};
  for (int r = 0; r < 6; ++r) {
    const RankCoords rc = CoordsOfRank(p, r).ValueOrDie();
    EXPECT_EQ(rc.section, want_section[r]) << "rank " << r;
    EXPECT_EQ(GlobalRankOf(p, rc.section, rc.tp, rc.cp, rc.dp, rc.pp), r);
  }
  EXPECT_EQ(CoordsOfRank(p, 3).ValueOrDie().dp, 3);
  const auto groups = NodeGroupsOf(p);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].ranks, 6);
  EXPECT_EQ(groups[0].nodes, 2);
  EXPECT_EQ(groups[0].sections, (std::vector<int>{2, 0, 1}));
  // The LLM spans both nodes; the ViT and the projector sit on the second.
  EXPECT_EQ(NodeSpanOf(p, 2).first, 0);
  EXPECT_EQ(NodeSpanOf(p, 2).last, 1);
  EXPECT_EQ(NodeSpanOf(p, 0).first, 1);
  EXPECT_EQ(NodeSpanOf(p, 1).last, 1);
  // Fan-out links cross sections inside one component unchanged.
  FillLayout(p);
  const auto links = LinksOfEdge(p, 1);
  ASSERT_EQ(links.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(links[static_cast<size_t>(i)].up_rank, 5);
    EXPECT_EQ(links[static_cast<size_t>(i)].down_rank, i);
  }
  const std::string text = PlanToJson(p);
  EXPECT_EQ(PlanToJson(PlanFromJson(text).ValueOrDie()), text);
}

TEST(SharedNodes, ValidateRefusesComponentsThatDisagreeOrDoNotFillTheirNodes) {
  Plan p = SharedNodePlan();
  p.sections[0].placement.gpu_type = "a100";
  EXPECT_NE(Validate(p).message().find("shares het component 0"), std::string::npos) << Validate(p).ToString();
  p = SharedNodePlan();
  for (auto& s : p.sections) s.placement.tasks_per_node = 2;  // 6 ranks do not fit 2 x 2
  EXPECT_NE(Validate(p).message().find("do not fill"), std::string::npos) << Validate(p).ToString();
  p = SharedNodePlan();
  for (auto& s : p.sections) s.placement.nodes = 3;  // the third node would stay empty
  EXPECT_NE(Validate(p).message().find("do not fill"), std::string::npos) << Validate(p).ToString();
  p = SharedNodePlan();
  p.sections[1].placement.het_component = 2;  // components numbered in rank order
  EXPECT_NE(Validate(p).message().find("numbered in rank order"), std::string::npos) << Validate(p).ToString();
  // A version-2 plan keeps component k = section k.
  p = SharedNodePlan();
  p.schema_version = 2;
  EXPECT_NE(Validate(p).message().find("placed in het component"), std::string::npos) << Validate(p).ToString();
}

TEST(SharedNodes, AVersionTwoPlanReadsAsOneComponentPerSection) {
  std::string text = PlanToJson(VlmPlan(2, 2));
  text.replace(text.find("\"schema_version\": 3"), 19, "\"schema_version\": 2");
  const Plan p = PlanFromJson(text).ValueOrDie();
  EXPECT_EQ(p.schema_version, 2);
  const auto groups = NodeGroupsOf(p);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].sections, (std::vector<int>{0}));
  EXPECT_EQ(groups[1].sections, (std::vector<int>{1}));
  EXPECT_EQ(groups[1].first_rank, 2);
  EXPECT_EQ(groups[1].ranks, 8);
  EXPECT_EQ(CoordsOfRank(p, 2).ValueOrDie().section, 1);
}

}  // namespace
// The measured curve the compiler prices and the calibration compares with.
TEST(ProfileCurve, PiecewiseLinearExtendedByTheNearestSegmentAndFlooredOutsideThePoints) {
  using plan::ProfileCurveAt;
  EXPECT_EQ(ProfileCurveAt({}, 4), 0.0);
  EXPECT_EQ(ProfileCurveAt({{4, 1.0}}, 0), 0.0);
  EXPECT_DOUBLE_EQ(ProfileCurveAt({{4, 1.0}}, 6), 1.5);  // one point: proportional
  const std::vector<std::pair<double, double>> rising = {{4, 1.0}, {8, 1.6}, {16, 2.8}};
  EXPECT_DOUBLE_EQ(ProfileCurveAt(rising, 6), 1.3);   // between points
  EXPECT_DOUBLE_EQ(ProfileCurveAt(rising, 32), 5.2);  // the last segment, extended
  EXPECT_DOUBLE_EQ(ProfileCurveAt(rising, 2), 0.7);   // the first segment (a fixed part of 0.4)
  // A noisy sweep: per-sample time rising with the size. Its first segment
  // reaches zero near 3 samples; below the smallest point the curve is at
  // least that point's proportional share.
  const std::vector<std::pair<double, double>> noisy = {{4, 0.0275}, {16, 0.2099}};
  EXPECT_DOUBLE_EQ(ProfileCurveAt(noisy, 1), 0.0275 / 4);
  EXPECT_GT(ProfileCurveAt(noisy, 1), 0.0);
  // A falling last segment: never below the largest point beyond it.
  const std::vector<std::pair<double, double>> falling = {{4, 1.0}, {8, 0.9}};
  EXPECT_DOUBLE_EQ(ProfileCurveAt(falling, 64), 0.9);
}

}  // namespace maestro::plan
