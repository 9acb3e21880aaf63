// SPDX-License-Identifier: Apache-2.0
// Property tests of the scheduler over random plans and batches: every sample
// is processed exactly once by each section it activates (on replicas the
// fan-out maps link), no op consumes an activation or a gradient before it is
// produced, the same (seed, step) gives the same schedule, the step's sample
// set is unchanged, and no schedule beats the lower bound. The checks here
// are written against the raw schedule and the simulated op intervals, not
// through the library's own validator.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "scheduler/scheduler.h"
#include "scheduler/simulator.h"
#include "scheduler/synthetic.h"

namespace maestro::scheduler {
namespace {

struct Case {
  Problem problem;
  std::string name;
};

// A random problem: plan shape, modes, DP degrees, micro-batches and batch
// all drawn from `seed`.
Case RandomCase(uint64_t seed) {
  SyntheticPlanOptions po;
  po.sections = 2 + static_cast<int>(seed % 5);
  po.max_fanout = 1 + static_cast<int>((seed / 5) % 4);
  po.random_modes = true;
  po.seed = seed;
  Case c;
  c.problem = MakeSyntheticPlan(po);
  // Shake the micro-batch sizes and sometimes shrink a DP degree to 1 on a
  // producer (still a legal fan-out) so odd shapes show up too.
  for (size_t s = 0; s < c.problem.sections.size(); ++s) {
    c.problem.sections[s].micro_batch = 1 + static_cast<int>((seed * 7 + s * 3) % 6);
  }
  SyntheticBatchOptions bo;
  bo.samples = static_cast<int>(seed * 37 % 300);
  bo.image_ratio = static_cast<double>(seed * 13 % 11) / 10.0;
  bo.audio_ratio = static_cast<double>(seed * 5 % 7) / 10.0;
  bo.seed = seed * 101 + 3;
  c.problem.samples = MakeSyntheticBatch(c.problem, bo);
  c.name = "seed " + std::to_string(seed) + " sections " + std::to_string(po.sections) + " fanout " +
           std::to_string(po.max_fanout) + " samples " + std::to_string(bo.samples);
  return c;
}

// Where each (section, sample id) ran: (replica, micro-batch), from the raw schedule.
using Where = std::map<std::pair<int, uint64_t>, std::vector<std::pair<int, int>>>;
Where Locate(const Schedule& s) {
  Where w;
  for (const RankProgram& r : s.ranks) {
    for (size_t b = 0; b < r.micro_batches.size(); ++b) {
      for (uint64_t id : r.micro_batches[b].sample_ids) w[{r.section, id}].push_back({r.replica, static_cast<int>(b)});
    }
  }
  return w;
}

TEST(SchedulerProperty, EverySampleExactlyOncePerActivatedSectionOnLinkedReplicas) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const Case c = RandomCase(seed);
    const Problem& p = c.problem;
    for (Policy policy : kAllPolicies) {
      ScheduleOptions o;
      o.policy = policy;
      o.seed = seed;
      auto sch = BuildSchedule(p, o);
      ASSERT_TRUE(sch.ok()) << c.name << ": " << sch.status().ToString();
      const Where w = Locate(*sch);
      for (const Sample& smp : p.samples) {
        for (int s = 0; s < static_cast<int>(p.sections.size()); ++s) {
          auto it = w.find({s, smp.id});
          const size_t count = it == w.end() ? 0 : it->second.size();
          EXPECT_EQ(count, p.Activates(s, smp) ? 1u : 0u)
              << c.name << " " << PolicyName(policy) << ": sample " << smp.id << " section " << p.sections[s].name;
        }
        for (const EdgeSpec& e : p.edges) {
          auto u = w.find({e.from, smp.id});
          auto d = w.find({e.to, smp.id});
          if (u == w.end() || d == w.end()) continue;
          const int a = p.sections[e.from].dp, b = p.sections[e.to].dp;
          const int ur = u->second[0].first, dr = d->second[0].first;
          if (b >= a) {
            EXPECT_EQ(ur, dr / (b / a)) << c.name << ": fan-out map broken for sample " << smp.id;
          } else {
            EXPECT_EQ(dr, ur / (a / b)) << c.name << ": fan-in map broken for sample " << smp.id;
          }
        }
      }
      // Micro-batches respect the section's size.
      for (const RankProgram& r : sch->ranks) {
        for (const MicroBatch& mb : r.micro_batches) {
          EXPECT_GE(mb.sample_ids.size(), 1u);
          EXPECT_LE(mb.sample_ids.size(), static_cast<size_t>(p.sections[r.section].micro_batch));
        }
      }
    }
  }
}

TEST(SchedulerProperty, StepSampleSetIsUnchanged) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Case c = RandomCase(seed);
    std::set<uint64_t> expected;
    for (const Sample& s : c.problem.samples) {
      bool any = false;
      for (int k = 0; k < static_cast<int>(c.problem.sections.size()); ++k) any |= c.problem.Activates(k, s);
      if (any) expected.insert(s.id);
    }
    for (Policy policy : kAllPolicies) {
      ScheduleOptions o;
      o.policy = policy;
      const Schedule sch = BuildSchedule(c.problem, o).ValueOrDie();
      std::set<uint64_t> got;
      for (const RankProgram& r : sch.ranks) {
        for (const MicroBatch& mb : r.micro_batches) got.insert(mb.sample_ids.begin(), mb.sample_ids.end());
      }
      EXPECT_EQ(got, expected) << c.name << " " << PolicyName(policy);
    }
  }
}

TEST(SchedulerProperty, NoOpConsumesBeforeItsInputIsProduced) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    const Case c = RandomCase(seed);
    const Problem& p = c.problem;
    for (Policy policy : kAllPolicies) {
      ScheduleOptions o;
      o.policy = policy;
      const Schedule sch = BuildSchedule(p, o).ValueOrDie();
      auto sim = Simulate(p, sch);
      ASSERT_TRUE(sim.ok()) << c.name << " " << PolicyName(policy) << ": " << sim.status().ToString();
      // (rank, kind, mb) -> interval
      std::map<std::tuple<int, OpKind, int>, std::pair<double, double>> when;
      int last_rank = -1;
      double last_end = 0;
      for (const OpInterval& op : sim->ops) {
        when[{op.rank, op.kind, op.micro_batch}] = {op.start, op.end};
        EXPECT_LE(op.start, op.end);
        if (op.rank == last_rank) {
          EXPECT_GE(op.start, last_end - 1e-12) << "ops of one rank overlap";
        }
        last_rank = op.rank;
        last_end = op.end;
      }
      const Where w = Locate(sch);
      for (size_t e = 0; e < p.edges.size(); ++e) {
        const EdgeSpec& edge = p.edges[e];
        const bool grad = p.sections[edge.from].trains && p.sections[edge.to].trains;
        for (const Sample& smp : p.samples) {
          auto u = w.find({edge.from, smp.id});
          auto d = w.find({edge.to, smp.id});
          if (u == w.end() || d == w.end()) continue;
          const int ur = sch.RankIndex(edge.from, u->second[0].first);
          const int dr = sch.RankIndex(edge.to, d->second[0].first);
          const double lag = p.costs->TransferSeconds(static_cast<int>(e), smp);
          const auto uf = when.at({ur, OpKind::kForward, u->second[0].second});
          const auto df = when.at({dr, OpKind::kForward, d->second[0].second});
          EXPECT_GE(df.first, uf.second + lag - 1e-9) << c.name << ": activation of " << smp.id << " used early";
          if (grad) {
            const auto ub = when.at({ur, OpKind::kBackward, u->second[0].second});
            const auto db = when.at({dr, OpKind::kBackward, d->second[0].second});
            EXPECT_GE(ub.first, db.second + lag - 1e-9) << c.name << ": gradient of " << smp.id << " used early";
          }
        }
      }
      // A backward never precedes its own forward.
      for (const auto& [key, iv] : when) {
        if (std::get<1>(key) != OpKind::kBackward) continue;
        const auto f = when.at({std::get<0>(key), OpKind::kForward, std::get<2>(key)});
        EXPECT_GE(iv.first, f.second - 1e-12);
      }
    }
  }
}

TEST(SchedulerProperty, TransfersCarryEachCrossingSampleOnceAlongTheFanOutMap) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const Case c = RandomCase(seed);
    const Problem& p = c.problem;
    const Schedule sch = BuildSchedule(p, ScheduleOptions{}).ValueOrDie();
    const auto transfers = ImpliedTransfers(p, sch);
    ASSERT_TRUE(transfers.ok()) << transfers.status().ToString();
    const Where w = Locate(sch);
    std::map<std::pair<int, uint64_t>, int> carried;  // (edge, id) -> messages
    for (const Transfer& t : *transfers) {
      const EdgeSpec& e = p.edges[t.edge];
      EXPECT_EQ(t.gradient, p.sections[e.from].trains && p.sections[e.to].trains);
      for (uint64_t id : t.sample_ids) {
        ++carried[{t.edge, id}];
        EXPECT_EQ(w.at({e.from, id})[0], std::make_pair(t.up_replica, t.up_micro_batch)) << c.name;
        EXPECT_EQ(w.at({e.to, id})[0], std::make_pair(t.down_replica, t.down_micro_batch)) << c.name;
      }
    }
    for (size_t e = 0; e < p.edges.size(); ++e) {
      for (const Sample& smp : p.samples) {
        const bool crosses = p.Activates(p.edges[e].from, smp) && p.Activates(p.edges[e].to, smp);
        const auto it = carried.find({static_cast<int>(e), smp.id});
        EXPECT_EQ(it == carried.end() ? 0 : it->second, crosses ? 1 : 0) << c.name << " sample " << smp.id;
      }
    }
  }
}

TEST(SchedulerProperty, InFlightCapHoldsAndStillCompletes) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const Case c = RandomCase(seed);
    for (int cap : {1, 2, 4}) {
      ScheduleOptions o;
      o.max_in_flight = cap;
      auto sch = BuildSchedule(c.problem, o);
      ASSERT_TRUE(sch.ok()) << c.name << ": " << sch.status().ToString();
      ASSERT_TRUE(Simulate(c.problem, *sch).ok()) << c.name << " cap " << cap;
      for (const RankProgram& r : sch->ranks) {
        if (!c.problem.sections[r.section].trains) continue;
        int in_flight = 0, most = 0;
        for (const Op& op : r.ops) {
          in_flight += op.kind == OpKind::kForward ? 1 : op.kind == OpKind::kBackward ? -1 : 0;
          most = std::max(most, in_flight);
        }
        // Exact on a chain (vit -> projector -> llm); joins may need relief.
        if (c.problem.sections.size() <= 3) {
          EXPECT_LE(most, cap) << c.name << " " << c.problem.sections[r.section].name;
        }
      }
    }
  }
}

TEST(SchedulerProperty, SameSeedAndStepGiveTheSameSchedule) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const Case c = RandomCase(seed);
    for (Policy policy : kAllPolicies) {
      ScheduleOptions o;
      o.policy = policy;
      o.seed = seed;
      o.step = 5;
      const Schedule a = BuildSchedule(c.problem, o).ValueOrDie();
      const Problem copy = c.problem;  // a fresh problem object, same content
      const Schedule b = BuildSchedule(copy, o).ValueOrDie();
      EXPECT_TRUE(a == b) << c.name << " " << PolicyName(policy);
      EXPECT_EQ(ScheduleToJson(a), ScheduleToJson(b));
    }
  }
}

TEST(SchedulerProperty, NoScheduleBeatsTheLowerBound) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Case c = RandomCase(seed);
    if (c.problem.samples.empty()) continue;
    const LowerBound lb = ComputeLowerBound(c.problem).ValueOrDie();
    for (Policy policy : kAllPolicies) {
      ScheduleOptions o;
      o.policy = policy;
      const Schedule sch = BuildSchedule(c.problem, o).ValueOrDie();
      const Simulation sim = Simulate(c.problem, sch).ValueOrDie();
      EXPECT_GE(sim.step_seconds, lb.seconds * (1 - 1e-9)) << c.name << " " << PolicyName(policy);
    }
  }
}

TEST(SchedulerProperty, WavefrontPredictionIsWhatTheSimulatorComputes) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Case c = RandomCase(seed);
    const Schedule sch = BuildSchedule(c.problem, ScheduleOptions{}).ValueOrDie();
    const Simulation sim = Simulate(c.problem, sch).ValueOrDie();
    EXPECT_NEAR(sch.predicted_step_seconds, sim.step_seconds, 1e-9 * (1 + sim.step_seconds)) << c.name;
  }
}

TEST(SchedulerProperty, WavefrontBeatsFifoOnVaryingImageRatios) {
  // Deterministic simulated times (not wall time): over a spread of batches the
  // wavefront's mean step is shorter than FIFO's and close to the bound.
  double sum_fifo = 0, sum_wf = 0, sum_wf_lb = 0;
  int n = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SyntheticPlanOptions po;
    po.sections = 2 + static_cast<int>(seed % 5);
    po.max_fanout = 1 + static_cast<int>(seed % 4);
    po.seed = seed;
    Problem p = MakeSyntheticPlan(po);
    SyntheticBatchOptions bo;
    bo.samples = 256;
    bo.image_ratio = static_cast<double>(seed % 6) / 5.0;
    bo.seed = seed;
    p.samples = MakeSyntheticBatch(p, bo);
    ScheduleOptions o;
    const double wf = Simulate(p, BuildSchedule(p, o).ValueOrDie()).ValueOrDie().step_seconds;
    o.policy = Policy::kFifo;
    const double fifo = Simulate(p, BuildSchedule(p, o).ValueOrDie()).ValueOrDie().step_seconds;
    sum_wf += wf;
    sum_fifo += fifo;
    sum_wf_lb += wf / ComputeLowerBound(p).ValueOrDie().seconds;
    ++n;
  }
  EXPECT_LT(sum_wf, sum_fifo);
  EXPECT_LT(sum_wf_lb / n, 1.25);
}

}  // namespace
}  // namespace maestro::scheduler
