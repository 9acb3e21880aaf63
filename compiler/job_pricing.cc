// SPDX-License-Identifier: Apache-2.0
#include "compiler/job_pricing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "base/units.h"
#include "compiler/compile_result.h"
#include "compiler/monolithic.h"
#include "compiler/sample_mix.h"
#include "compiler/step_simulation.h"
#include "datasets/demo_data.h"
#include "plan/teacher_rows.h"

namespace maestro::compiler {

namespace {

DatasetSize Unknown(std::string why) {
  DatasetSize out;
  out.source = std::move(why);
  return out;
}

DatasetSize Known(int64_t samples, std::string source, bool estimate = false) {
  DatasetSize out;
  out.samples = samples;
  out.known = samples > 0;
  out.estimate = estimate;
  out.source = std::move(source);
  return out;
}

DatasetSize ManifestSize(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Unknown("the manifest " + path + " cannot be read at compile time");
  int64_t lines = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) ++lines;
  }
  return Known(lines, "the manifest's non-empty lines");
}

// Megatron's DType codes (datasets/megatron_indexed.h) -> bytes per token.
int MegatronTokenBytes(int code) {
  switch (code) {
    case 1:
    case 2: return 1;  // uint8, int8
    case 3:
    case 8: return 2;  // int16, uint16
    case 4:
    case 7: return 4;  // int32, float32
    case 5:
    case 6: return 8;  // int64, float64
    default: return 0;
  }
}

// The .idx header (magic 9 | version u64 | dtype u8 | sequence_count u64 |
// document_count u64, little-endian: datasets/megatron_indexed.h) and the
// .bin's size give the tokens and documents without reading either file.
DatasetSize MegatronSize(const DataSpec& d) {
  std::string prefix = d.corpus;
  for (const char* ext : {".idx", ".bin"}) {
    if (prefix.size() > 4 && prefix.compare(prefix.size() - 4, 4, ext) == 0) prefix.resize(prefix.size() - 4);
  }
  std::ifstream idx(prefix + ".idx", std::ios::binary);
  unsigned char header[34] = {};
  if (!idx || !idx.read(reinterpret_cast<char*>(header), sizeof(header))) {
    return Unknown("the corpus index " + prefix + ".idx cannot be read at compile time");
  }
  std::error_code ec;
  const auto bin_bytes = std::filesystem::file_size(prefix + ".bin", ec);
  const int token_bytes = MegatronTokenBytes(header[17]);
  if (ec || token_bytes == 0 || std::memcmp(header, "MMIDIDX\0\0", 9) != 0) {
    return Unknown("the corpus " + prefix + " cannot be sized at compile time");
  }
  uint64_t document_entries = 0;
  for (int b = 7; b >= 0; --b) document_entries = (document_entries << 8) | header[26 + b];
  const int64_t tokens = static_cast<int64_t>(bin_bytes) / token_bytes;
  const int64_t documents = document_entries > 0 ? static_cast<int64_t>(document_entries) - 1 : 0;
  const int64_t seq_len = std::max<int64_t>(1, d.seq_len);
  if (d.sample_rule == "pack") {
    // datasets/megatron_samples.cc: (stream - 1) / seq_len windows, the
    // stream every token plus one eos a document when eos_id is set.
    const int64_t stream = tokens + (d.eos_id >= 0 ? documents : 0);
    return Known(stream >= 1 ? (stream - 1) / seq_len : 0, "the corpus's tokens packed into seq_len windows");
  }
  return Known(std::max<int64_t>(1, tokens / seq_len),
               "an estimate: the corpus's tokens / seq_len (\"split\" pads each document's last window)", true);
}

}  // namespace

DatasetSize DatasetSizeOf(const Spec& spec) {
  const DataSpec& d = spec.data;
  if (d.samples > 0) return Known(d.samples, "[data] samples");
  if (!d.manifest.empty()) return ManifestSize(d.manifest);
  if (!d.corpus.empty()) return MegatronSize(d);
  bool image = false;
  double fraction = 0.5;  // runtime/plan_data.cc's default image fraction
  for (const plan::ModalityDesc& m : d.modalities) {
    if (m.name == "image") {
      image = true;
      fraction = m.fraction;
    }
  }
  datasets::DemoOptions demo;
  demo.seq_len = d.seq_len;
  demo.image_fraction = fraction;
  const bool captions = datasets::BuiltInDatasetName(d.dataset, image) == "fashion_mnist_captions";
  demo.kind = captions ? datasets::DemoKind::kFashionMnistCaptions : datasets::DemoKind::kText;
  auto n = datasets::DemoTrainSamples(demo);
  if (!n.ok()) return Unknown("the built-in text cannot be read at compile time: " + n.status().message());
  return Known(*n, captions ? "the built-in captions set (Fashion-MNIST's 60,000 train images)"
                            : "the built-in text's train chunks, as this machine's text gives them");
}

StatusOr<JobLength> JobLengthOf(const Spec& spec) {
  JobLength out;
  out.data = DatasetSizeOf(spec);
  const int64_t batch = std::max<int64_t>(1, spec.data.global_batch);
  if (out.data.known) out.steps_per_epoch = (out.data.samples + batch - 1) / batch;
  if (spec.job.epochs > 0) {
    if (!out.data.known) {
      return Status::InvalidArgument(
          AtPos(spec.path, spec.job.pos,
                fmt::format("job.epochs = {} needs the dataset's size, and it is unknown ({}): give [data] samples, or "
                            "job.steps instead of epochs",
                            spec.job.epochs, out.data.source)));
    }
    out.epochs = spec.job.epochs;
    out.steps = out.epochs * out.steps_per_epoch;
  } else if (spec.job.steps > 0) {
    out.steps = spec.job.steps;
    if (out.steps_per_epoch > 0) out.epochs = (out.steps + out.steps_per_epoch - 1) / out.steps_per_epoch;
  } else if (out.steps_per_epoch > 0) {
    out.steps = out.steps_per_epoch;  // no steps: the runtime runs one epoch
    out.epochs = 1;
  }
  out.first_epoch_steps = out.steps_per_epoch > 0 ? std::min(out.steps, out.steps_per_epoch) : out.steps;
  return out;
}

double SpoolBytesPerSample(const plan::Plan& p, int section, std::string* rows) {
  const plan::SectionPlan& s = p.sections[static_cast<size_t>(section)];
  const double tokens = static_cast<double>(s.tokens_per_sample > 0 ? s.tokens_per_sample : p.data.seq_len);
  if (const auto sent = plan::TeacherRowsOf(p, section)) {
    if (rows != nullptr) {
      if (sent->form == plan::TeacherRowsForm::kTopK) {
        *rows = fmt::format("topk rows (K = {}, {} values)", sent->loss.top_k, p.spool_dtype);
      } else if (sent->form == plan::TeacherRowsForm::kSampled) {
        *rows = fmt::format("sampled rows ({} draws a token)", plan::SampledDraws(sent->loss));
      } else {
        *rows = fmt::format("hidden states ({})", p.spool_dtype);
      }
    }
    return tokens *
           static_cast<double>(plan::SpoolBytesPerPosition(sent->form, s.model.hidden, sent->loss, p.spool_dtype));
  }
  double wire_bytes = 0;
  for (const plan::EdgePlan& e : p.edges) {
    if (e.from == s.name) wire_bytes = std::max(wire_bytes, static_cast<double>(e.bytes_per_sample));
  }
  if (rows != nullptr) *rows = fmt::format("rows ({})", p.spool_dtype);
  return wire_bytes / 4.0 * static_cast<double>(plan::SpoolValueBytes(p.spool_dtype));
}

namespace {

// The workload with only the sections `keep` marks, its edges among them
// (renumbered); `kept` gets the original indices of the sections kept.
Workload KeepSections(const Workload& w, const std::vector<bool>& keep, std::vector<size_t>* kept,
                      std::vector<size_t>* kept_edges) {
  Workload out = w;
  out.sections.clear();
  out.edges.clear();
  std::vector<int> index(w.sections.size(), -1);
  for (size_t i = 0; i < w.sections.size(); ++i) {
    if (!keep[i]) continue;
    index[i] = static_cast<int>(out.sections.size());
    out.sections.push_back(w.sections[i]);
    if (kept != nullptr) kept->push_back(i);
  }
  for (size_t e = 0; e < w.edges.size(); ++e) {
    EdgeWork edge = w.edges[e];
    if (index[static_cast<size_t>(edge.from)] < 0 || index[static_cast<size_t>(edge.to)] < 0) continue;
    edge.from = index[static_cast<size_t>(edge.from)];
    edge.to = index[static_cast<size_t>(edge.to)];
    out.edges.push_back(edge);
    if (kept_edges != nullptr) kept_edges->push_back(e);
  }
  return out;
}

// A simulated step, or the analytic one where the simulation failed.
double StepOf(const SimulatedStep& sim, double analytic) {
  return sim.ok ? sim.step_seconds : analytic;
}

// The spools a plan keeps, as the pricing needs them: which workload
// sections spool, their rows' bytes a sample (times the share of samples
// that activate them), and the share of the dataset every spool holds.
struct PlanSpools {
  std::vector<bool> spooled;  // by workload section
  bool any = false;
  double bytes_per_sample = 0;
  double fraction = 1;  // the least over the spooling sections
  std::string rows;
};

PlanSpools SpoolsOfPlan(const plan::Plan& expanded, const Workload& w, int64_t samples) {
  PlanSpools out;
  out.spooled.assign(w.sections.size(), false);
  for (int j = 0; j < static_cast<int>(expanded.sections.size()); ++j) {
    if (!plan::KeepsSpool(expanded, j)) continue;
    const plan::SectionPlan& s = expanded.sections[static_cast<size_t>(j)];
    for (size_t i = 0; i < w.sections.size(); ++i) {
      if (w.sections[i].name != s.name) continue;
      std::string rows;
      const double bytes = SpoolBytesPerSample(expanded, j, &rows) * w.sections[i].active_fraction;
      const double budget = static_cast<double>(plan::SpoolBudgetPerWriter(expanded, j)) * std::max(1, s.config.dp);
      out.spooled[i] = out.any = true;
      out.bytes_per_sample += bytes;
      out.rows += (out.rows.empty() ? "" : ", ") + s.name + "'s " + rows;
      if (samples > 0 && bytes > 0) {
        out.fraction = std::min(out.fraction, std::floor(budget / bytes) / static_cast<double>(samples));
      }
    }
  }
  out.fraction = std::clamp(out.fraction, 0.0, 1.0);
  return out;
}

// Nodes that write and read a plan's spools: the spooling sections' (a
// fused plan's: all of them); at least one.
int SpoolNodes(const plan::Plan& p, const std::vector<bool>& spooled, const Workload& w) {
  int nodes = 0;
  for (const plan::SectionPlan& s : p.sections) {
    bool spools = s.fused();
    for (size_t i = 0; i < w.sections.size(); ++i) spools = spools || (spooled[i] && w.sections[i].name == s.name);
    if (spools) nodes += std::max(1, s.placement.nodes);
  }
  return std::max(1, nodes);
}

// One plan's steps priced for the job: every step computing (`step`), or
// epoch 0 writing and later epochs reading `fraction` of their rows and
// computing the rest (`without`: the step with the spooled sections' work
// gone, the same cost model and simulator).
struct Priced {
  double every = 0, first = 0, later = 0, io_step = 0, cached = 0, io = 0;
};

Priced PriceSteps(const JobLength& len, double step, double without, double fraction, double io_step) {
  Priced out;
  const double steps = static_cast<double>(std::max<int64_t>(1, len.steps));
  const double first = static_cast<double>(len.steps > 0 ? len.first_epoch_steps : 1);
  const double later = static_cast<double>(len.later_steps());
  out.every = steps * step;
  out.io_step = io_step;
  out.first = step + io_step;
  out.later = fraction * without + (1 - fraction) * step + io_step;
  out.cached = first * out.first + later * out.later;
  out.io = (first + later) * io_step;
  return out;
}

JobAlternative Alternative(const std::string& name, double seconds, bool reuse, double first, double later, double io,
                           std::string note) {
  JobAlternative a;
  a.name = name;
  a.seconds = seconds;
  a.spool_reuse = reuse;
  a.first_step_seconds = first;
  a.later_step_seconds = later;
  a.spool_io_seconds = io;
  a.note = std::move(note);
  return a;
}

SimulationSettings SimulationOf(const Spec& spec) {
  SimulationSettings sim;
  sim.seed = spec.data.seed;
  sim.seq_len = spec.data.seq_len;
  sim.modalities = spec.data.modalities;
  sim.draws = DrawsOf(spec);
  return sim;
}

// A fused configuration `m`'s step with only the sections `keep` marks: the
// same configuration on the same GPUs, priced and simulated.
double FusedStepKeeping(const CostModel& model, const PlannerOptions& po, const SimulationSettings& sim,
                        const Workload& w, const std::vector<bool>& keep, const MonolithicPlan& m, int device) {
  const Workload rest = KeepSections(w, keep, nullptr, nullptr);
  if (rest.sections.empty()) return 0;
  const MonolithicPlan m0 = EvaluateMonolithic(model, rest, m.devices, m.config, po);
  if (!m0.found) return 0;
  return StepOf(SimulateMonolithic(model, rest, m0, device, sim), m0.step_seconds);
}

std::vector<bool> Not(const std::vector<bool>& marks) {
  std::vector<bool> out(marks.size());
  for (size_t i = 0; i < marks.size(); ++i) out[i] = !marks[i];
  return out;
}

bool IsSectioned(const JobAlternative& a) {
  return a.name.rfind("sectioned", 0) == 0;
}

// The offline alternative's job seconds (docs/planner.md): ceil(f N / batch)
// passes of the frozen part (`phase1` a batch) with their writes (`io_step`
// a whole batch's rows), then every step reading the share f (`without`)
// and computing the rest (`step`). Its phase-2 step into *later.
double OfflineSeconds(const JobLength& length, int64_t samples, double batch, double f, double phase1, double without,
                      double step, double io_step, double* later) {
  *later = f * without + (1 - f) * step + f * io_step;
  return std::ceil(f * static_cast<double>(samples) / batch) * (phase1 + io_step) +
         static_cast<double>(length.steps) * *later;
}

// The baseline over the job (docs/planner.md): every epoch, or cached or
// offline where its own configuration keeps a spool (the fused plan's
// template at its configuration) and they cost less.
void PriceBaseline(const CostModel& model, const PlannerOptions& po, const SimulationSettings& sim,
                   const CompileResult& r, const JobLength& length, int64_t samples, double batch, double bw,
                   const plan::Plan* fused, JobPricing& job) {
  const Workload& w = r.workload;
  const double m_step = StepOf(r.monolithic_simulated, r.monolithic.step_seconds);
  job.baseline_seconds = length.steps > 0 ? length.steps * m_step : m_step;
  job.baseline_option = "every epoch";
  if (fused == nullptr || length.later_steps() <= 0) return;
  plan::Plan template_plan = *fused;
  template_plan.sections.front().config = r.monolithic.config;
  const PlanSpools sp = SpoolsOfPlan(plan::ExpandFusedSections(template_plan), w, samples);
  if (!sp.any) return;
  const DeviceType& d = model.devices()[static_cast<size_t>(r.monolithic_device)];
  const int nodes = d.shared_node ? 1 : std::max(1, r.monolithic.gpus / std::max(1, d.gpus_per_node));
  const double without = FusedStepKeeping(model, po, sim, w, Not(sp.spooled), r.monolithic, r.monolithic_device);
  if (without <= 0) return;
  const double io_step = batch * sp.bytes_per_sample / (nodes * bw);
  const Priced p = PriceSteps(length, m_step, without, sp.fraction, sp.fraction * io_step);
  if (p.cached < job.baseline_seconds) {
    job.baseline_seconds = p.cached;
    job.baseline_option = "cached";
  }
  const double phase1 = FusedStepKeeping(model, po, sim, w, sp.spooled, r.monolithic, r.monolithic_device);
  if (phase1 <= 0 || samples <= 0) return;
  double later = 0;
  const double offline = OfflineSeconds(length, samples, batch, sp.fraction, phase1, without, m_step, io_step, &later);
  if (offline < job.baseline_seconds) {
    job.baseline_seconds = offline;
    job.baseline_option = "offline";
  }
}

}  // namespace

JobPricing PriceJob(const Spec& spec, const CostModel& model, const PlannerOptions& po, const CompileResult& r,
                    const JobLength& length, const plan::Plan* sectioned, const plan::Plan* fused) {
  JobPricing job;
  job.length = length;
  const Workload& w = r.workload;
  const SimulationSettings sim = SimulationOf(spec);
  const int64_t samples = length.data.known ? length.data.samples : 0;
  const double bw = std::max(spec.cluster.checkpoint_write_gbps, 1e-9) * 1e9;  // per node, read = write
  const double batch = static_cast<double>(spec.data.global_batch);
  const bool reuse_can_pay = length.later_steps() > 0;
  PlanSpools any_spools;
  if (sectioned != nullptr) {
    const double step = StepOf(r.simulated, r.assignment.bottleneck_seconds);
    const PlanSpools sp = SpoolsOfPlan(*sectioned, w, samples);
    if (!sp.any) {
      job.alternatives.push_back(Alternative("sectioned", length.steps > 0 ? length.steps * step : step, true, step,
                                             step, 0, "keeps no spool"));
    } else {
      any_spools = sp;
      std::vector<size_t> kept, kept_edges;
      std::vector<bool> keep(w.sections.size());
      for (size_t i = 0; i < keep.size(); ++i) keep[i] = !sp.spooled[i];
      const Workload rest = KeepSections(w, keep, &kept, &kept_edges);
      Assignment a0 = r.assignment;
      a0.sections.clear();
      a0.edge_seconds.clear();
      for (size_t i : kept) a0.sections.push_back(r.assignment.sections[i]);
      for (size_t e : kept_edges) a0.edge_seconds.push_back(r.assignment.edge_seconds[e]);
      double analytic = 0;
      for (const SectionChoice& c : a0.sections) analytic = std::max(analytic, c.cost.step_seconds);
      const double without = StepOf(SimulateSectioned(model, rest, a0, sim), analytic);
      const double io_step = sp.fraction * batch * sp.bytes_per_sample / (SpoolNodes(*sectioned, sp.spooled, w) * bw);
      const Priced p = PriceSteps(length, step, without, sp.fraction, io_step);
      JobAlternative reuse = Alternative("sectioned", p.cached, true, p.first, p.later, p.io,
                                         "epoch 0 spools its frozen sections' rows, later epochs read them");
      reuse.pays = reuse_can_pay;
      job.alternatives.push_back(reuse);
      job.alternatives.push_back(
          Alternative("sectioned-every-epoch", p.every, false, step, step, 0, "every epoch computes every row"));
    }
  }
  double fused_step = 0, fused_without = 0, fused_io_step = 0;
  PlanSpools fused_spools;
  if (fused != nullptr) {
    fused_step = StepOf(r.fused_simulated, r.fused.step_seconds);
    const plan::Plan expanded = plan::ExpandFusedSections(*fused);
    const PlanSpools sp = SpoolsOfPlan(expanded, w, samples);
    if (!sp.any) {
      job.alternatives.push_back(Alternative("fused", length.steps > 0 ? length.steps * fused_step : fused_step, true,
                                             fused_step, fused_step, 0, "keeps no spool"));
    } else {
      if (!any_spools.any) any_spools = sp;
      fused_spools = sp;
      const double without = FusedStepKeeping(model, po, sim, w, Not(sp.spooled), r.fused, r.monolithic_device);
      fused_without = without > 0 ? without : fused_step;
      fused_io_step = batch * sp.bytes_per_sample / (SpoolNodes(*fused, sp.spooled, w) * bw);
      const double io_step = sp.fraction * fused_io_step;
      const Priced p = PriceSteps(length, fused_step, fused_without, sp.fraction, io_step);
      job.alternatives.push_back(Alternative("fused-every-epoch", p.every, false, fused_step, fused_step, 0,
                                             "every epoch computes the frozen components"));
      JobAlternative cached = Alternative("cached", p.cached, true, p.first, p.later, p.io,
                                          "the fused plan; epoch 0 spools, later epochs skip the frozen forward");
      cached.pays = reuse_can_pay;
      job.alternatives.push_back(cached);
    }
  }
  job.spooled = any_spools.any;
  job.spool_bytes_per_sample = any_spools.bytes_per_sample;
  job.fraction_fits = any_spools.fraction;
  // Offline: the fused plan in two phases, as the runtime runs it
  // (plan.offline_spool_pass, runtime/executor_offline_pass.cc): phase 1 its
  // frozen components alone at its configuration over the spooled share of
  // the data, writing; phase 2 training from step 0, reading that share and
  // computing the misses at the fused step. (Each phase at a configuration
  // of its own would need a plan per phase: not built.)
  if (fused_spools.any && samples > 0) {
    const double phase1 = FusedStepKeeping(model, po, sim, w, fused_spools.spooled, r.fused, r.monolithic_device);
    const double f = fused_spools.fraction;
    if (phase1 > 0) {
      double later = 0;
      const double seconds =
          OfflineSeconds(length, samples, batch, f, phase1, fused_without, fused_step, fused_io_step, &later);
      const double phase1_steps = std::ceil(f * static_cast<double>(samples) / batch);
      JobAlternative offline =
          Alternative("offline", seconds, true, phase1 + fused_io_step, later,
                      (phase1_steps + f * static_cast<double>(length.steps)) * fused_io_step,
                      "the fused plan's frozen components alone fill the spool first, then training reads it");
      offline.pays = reuse_can_pay;
      job.alternatives.push_back(offline);
    }
  }
  if (r.monolithic.found) PriceBaseline(model, po, sim, r, length, samples, batch, bw, fused, job);
  return job;
}

bool ChooseOverJob(const CompileOptions& options, JobPricing& job, CompileResult& r) {
  GroupingChoice& g = r.grouping;
  const bool was_fused = g.fused;
  // Candidates in the order a tie prefers: the grouping chosen by step, no
  // reuse before reuse, then the other grouping.
  std::vector<size_t> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (bool reuse : {false, true}) {
      for (size_t k = 0; k < job.alternatives.size(); ++k) {
        const JobAlternative& a = job.alternatives[k];
        const bool same_grouping = IsSectioned(a) != was_fused;
        if ((pass == 0) == same_grouping && a.spool_reuse == reuse) order.push_back(k);
      }
    }
  }
  size_t best = job.alternatives.size();
  for (size_t k : order) {
    const JobAlternative& a = job.alternatives[k];
    if (!a.runtime_supported || !a.pays) continue;
    const bool sectioned = IsSectioned(a);
    if (options.grouping == Grouping::kSectioned && !sectioned) continue;
    if (options.grouping == Grouping::kFused && sectioned) continue;
    if (!job.spooled && sectioned == was_fused) continue;  // nothing to reuse: the grouping stays as chosen by step
    if (best == job.alternatives.size() || a.seconds < job.alternatives[best].seconds) best = k;
  }
  if (best == job.alternatives.size()) return true;
  JobAlternative& chosen = job.alternatives[best];
  chosen.chosen = true;
  if (job.length.steps > 0 && job.baseline_seconds > 0 && chosen.seconds > 0) {
    job.speedup = job.baseline_seconds / chosen.seconds;
  }
  const bool fused_now = !IsSectioned(chosen);
  if (fused_now != was_fused && options.grouping == Grouping::kAuto) {
    double other = 0;
    for (const JobAlternative& a : job.alternatives) {
      if (IsSectioned(a) == fused_now && a.runtime_supported && a.pays && (other == 0 || a.seconds < other)) {
        other = a.seconds;
      }
    }
    const double step_chosen = g.rejected_step_seconds;
    g.rejected_step_seconds = g.chosen_step_seconds;
    g.chosen_step_seconds = step_chosen;
    g.rejected = was_fused ? "fused" : "sectioned";
    g.fused = fused_now;
    g.why = fmt::format(
        "{} over the job: {:.4g} s ({}) against {:.4g} s {} (per step {:.4g} s against {:.4g} s: the spool's reuse "
        "across epochs decides)",
        fused_now ? "fused" : "sectioned", chosen.seconds, chosen.name, other, fused_now ? "sectioned" : "fused",
        g.chosen_step_seconds, g.rejected_step_seconds);
  }
  return chosen.spool_reuse;
}

std::string JobText(const JobPricing& job, int64_t global_batch) {
  const JobLength& len = job.length;
  std::string t;
  const std::string data = len.data.known
                               ? fmt::format("{} samples ({})", len.data.samples, len.data.source)
                               : fmt::format("dataset size unknown: {}; give [data] samples", len.data.source);
  if (len.steps > 0 && len.steps_per_epoch > 0) {
    t += fmt::format("job: {} steps over {} epoch(s) of {} steps ({} samples a step); {}\n", len.steps, len.epochs,
                     len.steps_per_epoch, global_batch, data);
  } else if (len.steps > 0) {
    t += fmt::format("job: {} steps priced as one pass, no epoch reuse ({})\n", len.steps, data);
  } else {
    t += fmt::format("job: length unknown, priced per step, one pass with no epoch reuse ({}; or [job] steps)\n", data);
  }
  if (job.spooled) {
    t += fmt::format("  spool: {} a sample, the spools' shares ([job] spool_gib) hold {:.1f}% of the samples{}\n",
                     HumanBytes(job.spool_bytes_per_sample), 100 * job.fraction_fits,
                     len.data.known ? "" : " (of an unknown dataset: priced as if all)");
  }
  for (const JobAlternative& a : job.alternatives) {
    t += fmt::format("  {} {:<22} {:>12.4g} s  (epoch-0 step {:.4g} s, later {:.4g} s, spool I/O {:.4g} s){}{}: {}\n",
                     a.chosen ? "*" : " ", a.name, a.seconds, a.first_step_seconds, a.later_step_seconds,
                     a.spool_io_seconds, a.runtime_supported ? "" : " [planner-only]",
                     a.pays ? "" : " [cannot pay: no later epoch]", a.note);
  }
  if (job.baseline_seconds > 0) {
    t += fmt::format("  baseline over the job: {:.4g} s ({}){}\n", job.baseline_seconds, job.baseline_option,
                     job.speedup > 0 ? fmt::format("; speed-up over the job {:.2f}x", job.speedup) : "");
  }
  return t;
}

void AddJobJson(const JobPricing& job, nlohmann::json& js) {
  const JobLength& len = job.length;
  js["job_pricing"] = {{"steps", len.steps},
                       {"epochs", len.epochs},
                       {"steps_per_epoch", len.steps_per_epoch},
                       {"dataset_samples", len.data.known ? nlohmann::json(len.data.samples) : nlohmann::json(nullptr)},
                       {"dataset_source", len.data.source},
                       {"dataset_estimate", len.data.estimate},
                       {"spool_bytes_per_sample", job.spool_bytes_per_sample},
                       {"spool_fraction_fits", job.fraction_fits},
                       {"baseline_seconds", job.baseline_seconds},
                       {"baseline_option", job.baseline_option},
                       {"speedup_vs_monolithic_over_job", job.speedup > 0 ? nlohmann::json(job.speedup) : nullptr}};
  nlohmann::json alternatives = nlohmann::json::array();
  for (const JobAlternative& a : job.alternatives) {
    alternatives.push_back({{"name", a.name},
                            {"seconds", a.seconds},
                            {"runtime_supported", a.runtime_supported},
                            {"chosen", a.chosen},
                            {"pays", a.pays},
                            {"spool_reuse", a.spool_reuse},
                            {"first_step_seconds", a.first_step_seconds},
                            {"later_step_seconds", a.later_step_seconds},
                            {"spool_io_seconds", a.spool_io_seconds}});
  }
  js["job_alternatives"] = alternatives;
}

}  // namespace maestro::compiler
