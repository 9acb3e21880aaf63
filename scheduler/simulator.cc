// SPDX-License-Identifier: Apache-2.0
// The op graph of a schedule is a DAG (program order on each rank, plus one
// arc per sample and edge from the producing op to the consuming op, lagged
// by the transfer, plus a barrier node per DP all-reduce). A rank that runs
// its ops in order and blocks on receives starts each op at the latest end
// (+ lag) of its predecessors, so one pass in topological order is the
// discrete-event simulation; ops left over mean a deadlock. With shared cores
// an op's length depends on what else runs meanwhile: a second, event-driven
// pass over the same graph advances every running op at the shared rate.
#include "scheduler/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/checks.h"
#include "base/files.h"
#include "scheduler/prepared.h"

namespace maestro::scheduler {
namespace {

struct Arc {
  int from = 0, to = 0;
  double lag = 0.0;
};

// Text for an SVG element (section names come from the user's spec).
std::string XmlEscape(const std::string& in) {
  std::string out;
  for (char c : in) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string OpLabel(const OpInterval& op) {
  if (op.kind == OpKind::kOptimizer) return "optimizer";
  return std::string(op.kind == OpKind::kForward ? "F" : "B") + std::to_string(op.micro_batch);
}

// The op graph of a schedule: nodes are the ops (in Simulation::ops order)
// and, past them, one barrier per DP all-reduce; successors in CSR form.
struct OpGraph {
  int num_ops = 0;
  int num_nodes = 0;
  std::vector<double> duration;  // per node: seconds with a core of its own
  std::vector<int> out_begin;    // successors of v: succ[out_begin[v] .. out_begin[v + 1])
  std::vector<int> succ;
  std::vector<double> succ_lag;  // per successor arc: the transfer's seconds
  std::vector<int> indeg;        // per node: predecessors
};

// node[rank][micro-batch]: the node of that micro-batch's forward (or backward).
using NodeTable = std::vector<std::vector<int>>;

// One node per op of every rank, in program order (sim->ops without times,
// g->duration), and the nodes of each micro-batch's forward and backward.
void AddOpNodes(const Problem& p, const Schedule& sch, Simulation* sim, OpGraph* g, NodeTable* node_f,
                NodeTable* node_b) {
  // Sample index by id, for the micro-batches' ids.
  const internal::SamplesById by_id(p);
  std::vector<double>& duration = g->duration;
  std::vector<const Sample*> buf;
  node_f->resize(sch.ranks.size());
  node_b->resize(sch.ranks.size());
  for (size_t rk = 0; rk < sch.ranks.size(); ++rk) {
    const RankProgram& prog = sch.ranks[rk];
    (*node_f)[rk].assign(prog.micro_batches.size(), -1);
    (*node_b)[rk].assign(prog.micro_batches.size(), -1);
    for (const Op& op : prog.ops) {
      OpInterval oi;
      oi.rank = static_cast<int>(rk);
      oi.kind = op.kind;
      oi.micro_batch = op.micro_batch;
      double d = 0;
      if (op.kind == OpKind::kOptimizer) {
        d = p.costs->OptimizerSeconds(prog.section);
      } else {
        const auto& ids = prog.micro_batches[static_cast<size_t>(op.micro_batch)].sample_ids;
        buf.clear();
        for (uint64_t id : ids) buf.push_back(&p.samples[static_cast<size_t>(by_id.Find(id))]);
        oi.samples = static_cast<int>(ids.size());
        d = op.kind == OpKind::kForward ? p.costs->ForwardSeconds(prog.section, buf)
                                        : p.costs->BackwardSeconds(prog.section, buf);
        (op.kind == OpKind::kForward ? *node_f : *node_b)[rk][static_cast<size_t>(op.micro_batch)] =
            static_cast<int>(sim->ops.size());
      }
      sim->ops.push_back(oi);
      duration.push_back(d);
    }
  }
  g->num_ops = static_cast<int>(sim->ops.size());
  g->num_nodes = g->num_ops;
}

// The arcs: program order on each rank; per sample and edge, the upstream
// forward before the downstream one (and, when a gradient comes back, the
// downstream backward before the upstream one), lagged by the transfer; and
// the DP all-reduce barriers, whose nodes this adds to `g`.
std::vector<Arc> OpArcs(const Problem& p, const Schedule& sch, const ScheduleIndex& idx,
                        const std::vector<OpInterval>& ops, const NodeTable& node_f, const NodeTable& node_b,
                        OpGraph* g) {
  const int n = idx.num_samples;
  const int num_ops = g->num_ops;
  const auto op_at = [&](int v) -> const OpInterval& { return ops[static_cast<size_t>(v)]; };
  std::vector<Arc> arcs;
  for (int v = 1; v < num_ops; ++v) {
    if (op_at(v).rank == op_at(v - 1).rank) arcs.push_back({v - 1, v, 0.0});
  }
  for (size_t e = 0; e < p.edges.size(); ++e) {
    const EdgeSpec& edge = p.edges[e];
    const bool grad = p.CarriesGradient(edge);
    // Run-ahead (SectionSpec::run_ahead, forward-only producers): one
    // zero-length node at time 0 per such edge stands for "rows ready".
    int ahead_start = -1;
    if (p.sections[static_cast<size_t>(edge.from)].run_ahead > 0 && !grad) {
      ahead_start = g->num_nodes++;
      g->duration.push_back(0.0);
    }
    for (int i = 0; i < n; ++i) {
      const int ru = idx.RankOf(edge.from, i), rd = idx.RankOf(edge.to, i);
      if (ru < 0 || rd < 0) continue;
      const int mu = idx.MicroBatchOf(edge.from, i), md = idx.MicroBatchOf(edge.to, i);
      const double lag = p.costs->TransferSeconds(static_cast<int>(e), p.samples[static_cast<size_t>(i)]);
      // A running-ahead producer computed these rows during the previous
      // step: they leave at the step's start.
      const int from_node = ahead_start >= 0 ? ahead_start : node_f[static_cast<size_t>(ru)][static_cast<size_t>(mu)];
      arcs.push_back({from_node, node_f[static_cast<size_t>(rd)][static_cast<size_t>(md)], lag});
      if (grad) {
        arcs.push_back({node_b[static_cast<size_t>(rd)][static_cast<size_t>(md)],
                        node_b[static_cast<size_t>(ru)][static_cast<size_t>(mu)], lag});
      }
    }
  }
  // The DP gradient all-reduce of a training section with several replicas
  // is a barrier: no replica's optimizer step starts before every replica
  // has run its last op before it. One zero-length node per such section
  // (nodes past num_ops), after those ops and before the optimizer steps.
  std::vector<std::vector<int>> optimizer_ops(p.sections.size());
  for (int v = 0; v < num_ops; ++v) {
    if (op_at(v).kind == OpKind::kOptimizer) {
      optimizer_ops[static_cast<size_t>(sch.ranks[static_cast<size_t>(op_at(v).rank)].section)].push_back(v);
    }
  }
  for (const auto& section_ops : optimizer_ops) {
    if (section_ops.size() < 2) continue;
    const int barrier = g->num_nodes++;
    g->duration.push_back(0.0);
    for (int o : section_ops) {
      if (o > 0 && op_at(o - 1).rank == op_at(o).rank) arcs.push_back({o - 1, barrier, 0.0});
      arcs.push_back({barrier, o, 0.0});
    }
  }
  return arcs;
}

// CSR successors and in-degrees of `arcs`.
void LinkSuccessors(const std::vector<Arc>& arcs, OpGraph* g) {
  const int num_nodes = g->num_nodes;
  g->out_begin.assign(static_cast<size_t>(num_nodes) + 1, 0);
  g->indeg.assign(static_cast<size_t>(num_nodes), 0);
  for (const Arc& a : arcs) {
    ++g->out_begin[static_cast<size_t>(a.from) + 1];
    ++g->indeg[static_cast<size_t>(a.to)];
  }
  for (int v = 0; v < num_nodes; ++v) g->out_begin[static_cast<size_t>(v) + 1] += g->out_begin[static_cast<size_t>(v)];
  std::vector<int> fill(g->out_begin.begin(), g->out_begin.end() - 1);
  g->succ.resize(arcs.size());
  g->succ_lag.resize(arcs.size());
  for (const Arc& a : arcs) {
    const int at = fill[static_cast<size_t>(a.from)]++;
    g->succ[static_cast<size_t>(at)] = a.to;
    g->succ_lag[static_cast<size_t>(at)] = a.lag;
  }
}

// One pass in Kahn's order: each node starts at the latest end (+ lag) of its
// predecessors. Fails, naming the first stuck op of up to 4 ranks, when some
// nodes never become ready (the schedule deadlocks).
Status TimeInTopologicalOrder(const Problem& p, const Schedule& sch, const std::vector<OpInterval>& ops,
                              const OpGraph& g, std::vector<double>* start, std::vector<double>* end) {
  const int num_nodes = g.num_nodes;
  std::vector<int> indeg = g.indeg;
  std::vector<double> earliest(static_cast<size_t>(num_nodes), 0.0);
  std::vector<int> queue;
  for (int v = 0; v < num_nodes; ++v) {
    if (indeg[static_cast<size_t>(v)] == 0) queue.push_back(v);
  }
  size_t head = 0;
  while (head < queue.size()) {
    const int v = queue[head++];
    (*start)[static_cast<size_t>(v)] = earliest[static_cast<size_t>(v)];
    (*end)[static_cast<size_t>(v)] = (*start)[static_cast<size_t>(v)] + g.duration[static_cast<size_t>(v)];
    for (int k = g.out_begin[static_cast<size_t>(v)]; k < g.out_begin[static_cast<size_t>(v) + 1]; ++k) {
      const int w = g.succ[static_cast<size_t>(k)];
      earliest[static_cast<size_t>(w)] = std::max(earliest[static_cast<size_t>(w)],
                                                  (*end)[static_cast<size_t>(v)] + g.succ_lag[static_cast<size_t>(k)]);
      if (--indeg[static_cast<size_t>(w)] == 0) queue.push_back(w);
    }
  }
  if (static_cast<int>(queue.size()) == num_nodes) return Status::Ok();
  // Name the first stuck op of each rank (at most 4).
  std::string where;
  int named = 0;
  for (size_t rk = 0; rk < sch.ranks.size() && named < 4; ++rk) {
    for (int v = 0; v < g.num_ops; ++v) {
      if (ops[static_cast<size_t>(v)].rank == static_cast<int>(rk) && indeg[static_cast<size_t>(v)] > 0) {
        where += (named ? ", " : "") + p.sections[static_cast<size_t>(sch.ranks[rk].section)].name + " replica " +
                 std::to_string(sch.ranks[rk].replica) + " at " + OpLabel(ops[static_cast<size_t>(v)]);
        ++named;
        break;
      }
    }
  }
  return Status::InvalidArgument(
      "schedule '" + sch.policy + "' deadlocks: " + std::to_string(num_nodes - static_cast<int>(queue.size())) +
      " ops can never start (" + where + "); a rank orders a backward or forward before one it depends on");
}

// Shared cores: when the replicas' processes outnumber the cores, replay the
// same graph as a fluid simulation in which the processes computing at each
// moment share the cores evenly (each op advances at min(1, cores / demand)
// of its alone-on-a-core speed). Leaves start/end as they are otherwise.
void ShareCores(const Problem& p, const Schedule& sch, const std::vector<OpInterval>& ops, const OpGraph& g,
                std::vector<double>* start, std::vector<double>* end) {
  const int num_nodes = g.num_nodes;
  std::vector<int> processes(sch.ranks.size(), 1);
  int demand_all = 0;
  for (size_t rk = 0; rk < sch.ranks.size(); ++rk) {
    processes[rk] = std::max(1, p.sections[static_cast<size_t>(sch.ranks[rk].section)].processes);
    demand_all += processes[rk];
  }
  if (demand_all <= p.shared_cores) return;
  const double cores = static_cast<double>(p.shared_cores);
  std::vector<int> unmet = g.indeg;
  std::vector<double> ready(static_cast<size_t>(num_nodes), 0.0), remaining = g.duration;
  std::vector<int> waiting, running;  // released (all predecessors done) but not started; computing
  for (int v = 0; v < num_nodes; ++v) {
    if (unmet[static_cast<size_t>(v)] == 0) waiting.push_back(v);
  }
  double t = 0.0;
  int finished = 0;
  const auto finish = [&](int v) {
    (*end)[static_cast<size_t>(v)] = t;
    ++finished;
    for (int k = g.out_begin[static_cast<size_t>(v)]; k < g.out_begin[static_cast<size_t>(v) + 1]; ++k) {
      const int w = g.succ[static_cast<size_t>(k)];
      ready[static_cast<size_t>(w)] = std::max(ready[static_cast<size_t>(w)], t + g.succ_lag[static_cast<size_t>(k)]);
      if (--unmet[static_cast<size_t>(w)] == 0) waiting.push_back(w);
    }
  };
  while (finished < num_nodes) {
    // Start what is due; zero-length nodes (barriers) end at once and may
    // release more.
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < waiting.size();) {
        const int v = waiting[i];
        if (ready[static_cast<size_t>(v)] > t) {
          ++i;
          continue;
        }
        waiting[i] = waiting.back();
        waiting.pop_back();
        (*start)[static_cast<size_t>(v)] = t;
        if (remaining[static_cast<size_t>(v)] > 0.0) {
          running.push_back(v);
        } else {
          finish(v);
          changed = true;
        }
      }
    }
    double demand = 0.0;
    for (int v : running) demand += processes[static_cast<size_t>(ops[static_cast<size_t>(v)].rank)];
    const double rate = demand > cores ? cores / demand : 1.0;
    double dt = std::numeric_limits<double>::infinity();
    for (int v : running) dt = std::min(dt, remaining[static_cast<size_t>(v)] / rate);
    for (int v : waiting) dt = std::min(dt, ready[static_cast<size_t>(v)] - t);
    if (!std::isfinite(dt)) break;  // cannot happen: the graph has no cycle
    t += dt;
    for (size_t i = 0; i < running.size();) {
      const int v = running[i];
      double& left = remaining[static_cast<size_t>(v)];
      left -= dt * rate;
      if (left <= 1e-12 * (1.0 + g.duration[static_cast<size_t>(v)])) {
        left = 0.0;
        running[i] = running.back();
        running.pop_back();
        finish(v);
      } else {
        ++i;
      }
    }
  }
}

// Per-rank and per-section statistics of the timed ops.
void CollectStatistics(const Problem& p, const Schedule& sch, Simulation* sim_out) {
  Simulation& sim = *sim_out;
  sim.ranks.resize(sch.ranks.size());
  sim.sections.resize(p.sections.size());
  for (size_t s = 0; s < p.sections.size(); ++s) {
    sim.sections[s].name = p.sections[s].name;
    sim.sections[s].replicas = p.sections[s].dp;
  }
  constexpr double kEps = 1e-12;
  for (size_t rk = 0; rk < sch.ranks.size(); ++rk) {
    sim.ranks[rk].section = sch.ranks[rk].section;
    sim.ranks[rk].replica = sch.ranks[rk].replica;
  }
  std::vector<double> last_end(sch.ranks.size(), 0.0);
  for (const OpInterval& op : sim.ops) {
    RankStats& rs = sim.ranks[static_cast<size_t>(op.rank)];
    rs.busy_seconds += op.end - op.start;
    if (op.start > last_end[static_cast<size_t>(op.rank)] + kEps * (1 + sim.step_seconds)) ++rs.bubbles;
    last_end[static_cast<size_t>(op.rank)] = op.end;
  }
  double busy_all = 0;
  for (size_t rk = 0; rk < sch.ranks.size(); ++rk) {
    RankStats& rs = sim.ranks[rk];
    if (sim.step_seconds > last_end[rk] + kEps * (1 + sim.step_seconds)) ++rs.bubbles;
    rs.idle_seconds = sim.step_seconds - rs.busy_seconds;
    SectionStats& ss = sim.sections[static_cast<size_t>(rs.section)];
    ss.busy_seconds += rs.busy_seconds;
    ss.bubble_seconds += rs.idle_seconds;
    busy_all += rs.busy_seconds;
  }
  for (SectionStats& ss : sim.sections) {
    ss.utilization = sim.step_seconds > 0 ? ss.busy_seconds / (ss.replicas * sim.step_seconds) : 0.0;
  }
  sim.utilization = sim.step_seconds > 0 && !sch.ranks.empty()
                        ? busy_all / (static_cast<double>(sch.ranks.size()) * sim.step_seconds)
                        : 0.0;
}

}  // namespace

StatusOr<Simulation> Simulate(const Problem& p, const Schedule& sch) {
  auto index = IndexSchedule(p, sch);
  if (!index.ok()) return index.status();
  Simulation sim;
  sim.policy = sch.policy;
  OpGraph g;
  NodeTable node_f, node_b;
  AddOpNodes(p, sch, &sim, &g, &node_f, &node_b);
  LinkSuccessors(OpArcs(p, sch, *index, sim.ops, node_f, node_b, &g), &g);
  std::vector<double> start(static_cast<size_t>(g.num_nodes), 0.0), end(static_cast<size_t>(g.num_nodes), 0.0);
  MAESTRO_RETURN_IF_ERROR(TimeInTopologicalOrder(p, sch, sim.ops, g, &start, &end));
  if (p.shared_cores > 0) ShareCores(p, sch, sim.ops, g, &start, &end);
  for (int v = 0; v < g.num_ops; ++v) {
    OpInterval& op = sim.ops[static_cast<size_t>(v)];
    op.start = start[static_cast<size_t>(v)];
    op.end = end[static_cast<size_t>(v)];
    sim.step_seconds = std::max(sim.step_seconds, op.end);
  }
  CollectStatistics(p, sch, &sim);
  return sim;
}

std::vector<double> AloneSeconds(const std::vector<std::pair<double, double>>& intervals, int cores) {
  std::vector<double> out;
  out.reserve(intervals.size());
  for (const auto& [s, e] : intervals) out.push_back(std::max(0.0, e - s));
  if (cores <= 0 || intervals.empty()) return out;
  std::vector<std::pair<double, int>> edges;  // (time, +1 start / -1 end)
  for (const auto& [s, e] : intervals) {
    edges.push_back({s, +1});
    edges.push_back({std::max(s, e), -1});
  }
  std::sort(edges.begin(), edges.end());  // at one instant, ends (-1) before starts
  // G(t) = the integral of the rate up to t, at every edge time.
  std::vector<double> times, integral;
  int running = 0;
  double g = 0.0, last = edges.front().first;
  for (const auto& [t, delta] : edges) {
    if (t > last) {
      g += (t - last) * (running > cores ? static_cast<double>(cores) / running : 1.0);
      last = t;
    }
    running += delta;
    if (times.empty() || times.back() != t) {
      times.push_back(t);
      integral.push_back(g);
    } else {
      integral.back() = g;
    }
  }
  const auto at = [&](double t) {
    const size_t i = static_cast<size_t>(std::lower_bound(times.begin(), times.end(), t) - times.begin());
    return integral[std::min(i, integral.size() - 1)];
  };
  for (size_t i = 0; i < intervals.size(); ++i) {
    out[i] = at(std::max(intervals[i].first, intervals[i].second)) - at(intervals[i].first);
  }
  return out;
}

std::string Simulation::SummaryJson() const {
  nlohmann::json j;
  j["policy"] = policy;
  j["step_seconds"] = step_seconds;
  j["utilization"] = utilization;
  nlohmann::json secs = nlohmann::json::array();
  for (const SectionStats& s : sections) {
    secs.push_back({{"name", s.name},
                    {"replicas", s.replicas},
                    {"utilization", s.utilization},
                    {"busy_seconds", s.busy_seconds},
                    {"bubble_seconds", s.bubble_seconds}});
  }
  j["sections"] = std::move(secs);
  nlohmann::json rks = nlohmann::json::array();
  for (const RankStats& r : ranks) {
    rks.push_back({{"section", r.section},
                   {"replica", r.replica},
                   {"busy_seconds", r.busy_seconds},
                   {"idle_seconds", r.idle_seconds},
                   {"bubbles", r.bubbles}});
  }
  j["ranks"] = std::move(rks);
  return j.dump();
}

std::string Simulation::ChromeTraceJson() const {
  nlohmann::json events = nlohmann::json::array();
  std::vector<char> named_thread;
  for (size_t s = 0; s < sections.size(); ++s) {
    events.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", s}, {"tid", 0}, {"args", {{"name", sections[s].name}}}});
    events.push_back(
        {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", s}, {"tid", 0}, {"args", {{"sort_index", s}}}});
  }
  for (const RankStats& r : ranks) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", r.section},
                      {"tid", r.replica},
                      {"args", {{"name", "dp " + std::to_string(r.replica)}}}});
  }
  for (const OpInterval& op : ops) {
    const RankStats& r = ranks[static_cast<size_t>(op.rank)];
    const char* cat = op.kind == OpKind::kForward ? "forward" : op.kind == OpKind::kBackward ? "backward" : "optimizer";
    nlohmann::json ev = {{"name", OpLabel(op)},
                         {"cat", cat},
                         {"ph", "X"},
                         {"ts", op.start * 1e6},
                         {"dur", (op.end - op.start) * 1e6},
                         {"pid", r.section},
                         {"tid", r.replica}};
    if (op.kind != OpKind::kOptimizer) ev["args"] = {{"micro_batch", op.micro_batch}, {"samples", op.samples}};
    events.push_back(std::move(ev));
  }
  nlohmann::json j;
  j["traceEvents"] = std::move(events);
  j["displayTimeUnit"] = "ms";
  j["otherData"] = {{"policy", policy}, {"step_seconds", step_seconds}, {"utilization", utilization}};
  return j.dump();
}

Status Simulation::WriteChromeTrace(const std::string& path) const {
  return WriteFileAtomically(path, ChromeTraceJson());
}

std::string Simulation::GanttSvg(const std::string& title, double axis_seconds) const {
  static const char* kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                   "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};
  auto colour = [](int s) { return std::string(kPalette[static_cast<size_t>(s) % 8]); };
  auto darker = [](const std::string& hex) {
    const unsigned v = static_cast<unsigned>(std::stoul(hex.substr(1), nullptr, 16));
    auto ch = [&](int shift) { return static_cast<unsigned>(((v >> shift) & 0xffu) * 0.6); };
    char out[8];
    std::snprintf(out, sizeof(out), "#%02x%02x%02x", ch(16), ch(8), ch(0));
    return std::string(out);
  };
  const double left = 150, right = 30, top = 64, row_h = 20, gap = 4, plot_w = 1000;
  const double rows_h = static_cast<double>(ranks.size()) * row_h;
  const double axis_y = top + rows_h + 6;
  const double legend_y = axis_y + 40;
  const double width = left + plot_w + right;
  const double height = legend_y + 30;
  const double span = std::max(axis_seconds, step_seconds > 0 ? step_seconds : 1.0);
  auto x_of = [&](double t) { return left + t / span * plot_w; };
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(2);
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height << "\" viewBox=\"0 0 "
    << width << ' ' << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::string head = title.empty() ? ("policy " + policy) : title;
  char stats[160];
  std::snprintf(stats, sizeof(stats), "step %.4g s, utilization %.1f%% over %zu ranks (one row per DP replica)",
                step_seconds, 100.0 * utilization, ranks.size());
  o << "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << XmlEscape(head) << "</text>\n";
  o << "<text x=\"10\" y=\"42\" font-size=\"12\" fill=\"#333333\">" << stats << "</text>\n";
  for (size_t r = 0; r < ranks.size(); ++r) {
    const double y = top + static_cast<double>(r) * row_h;
    if (r % 2 == 0) {
      o << "<rect x=\"" << left << "\" y=\"" << y << "\" width=\"" << plot_w << "\" height=\"" << row_h
        << "\" fill=\"#f4f4f4\"/>\n";
    }
    o << "<text x=\"" << left - 8 << "\" y=\"" << y + row_h * 0.7 << "\" text-anchor=\"end\">"
      << XmlEscape(sections[static_cast<size_t>(ranks[r].section)].name) << " dp" << ranks[r].replica << "</text>\n";
  }
  for (const OpInterval& op : ops) {
    const RankStats& r = ranks[static_cast<size_t>(op.rank)];
    const double y = top + static_cast<double>(op.rank) * row_h + gap / 2;
    const double x0 = x_of(op.start);
    const double w = std::max(0.5, x_of(op.end) - x0);
    const std::string fill = op.kind == OpKind::kForward    ? colour(r.section)
                             : op.kind == OpKind::kBackward ? darker(colour(r.section))
                                                            : std::string("#888888");
    o << "<rect x=\"" << x0 << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << row_h - gap << "\" fill=\""
      << fill << "\" stroke=\"white\" stroke-width=\"0.3\"><title>"
      << XmlEscape(sections[static_cast<size_t>(r.section)].name) << " dp" << r.replica << ' ' << OpLabel(op) << " ["
      << op.start << ", " << op.end << "] s</title></rect>\n";
  }
  // Time axis with about 8 round ticks.
  o << "<line x1=\"" << left << "\" y1=\"" << axis_y << "\" x2=\"" << left + plot_w << "\" y2=\"" << axis_y
    << "\" stroke=\"black\"/>\n";
  const double raw = span / 8;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
  for (double t = 0; t <= span * 1.0001; t += step) {
    const double x = x_of(t);
    o << "<line x1=\"" << x << "\" y1=\"" << axis_y << "\" x2=\"" << x << "\" y2=\"" << axis_y + 5
      << "\" stroke=\"black\"/>\n";
    char label[32];
    std::snprintf(label, sizeof(label), "%g", t);
    o << "<text x=\"" << x << "\" y=\"" << axis_y + 18 << "\" text-anchor=\"middle\">" << label << "</text>\n";
  }
  o << "<text x=\"" << left + plot_w << "\" y=\"" << axis_y + 32 << "\" text-anchor=\"end\">seconds</text>\n";
  // Legend.
  double lx = left;
  for (size_t s = 0; s < sections.size(); ++s) {
    o << "<rect x=\"" << lx << "\" y=\"" << legend_y << "\" width=\"12\" height=\"12\" fill=\""
      << colour(static_cast<int>(s)) << "\"/><rect x=\"" << lx + 12 << "\" y=\"" << legend_y
      << "\" width=\"12\" height=\"12\" fill=\"" << darker(colour(static_cast<int>(s))) << "\"/>";
    o << "<text x=\"" << lx + 30 << "\" y=\"" << legend_y + 11 << "\">" << XmlEscape(sections[s].name) << "</text>\n";
    lx += 40 + 8.0 * static_cast<double>(sections[s].name.size()) + 20;
  }
  o << "<rect x=\"" << lx << "\" y=\"" << legend_y << "\" width=\"12\" height=\"12\" fill=\"#888888\"/>";
  o << "<text x=\"" << lx + 18 << "\" y=\"" << legend_y + 11
    << "\">optimizer   (light = forward, dark = backward)</text>\n";
  o << "</svg>\n";
  return o.str();
}

Status Simulation::WriteGanttSvg(const std::string& path, const std::string& title, double axis_seconds) const {
  return WriteFileAtomically(path, GanttSvg(title, axis_seconds));
}

}  // namespace maestro::scheduler
