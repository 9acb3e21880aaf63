// SPDX-License-Identifier: Apache-2.0
#include "runtime/executor.h"

#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_map>

#include "base/checks.h"
#include "base/line_fit.h"
#include "base/log.h"
#include "datalayer/activation_spool.h"
#include "datalayer/preemption.h"
#include "datalayer/sample_index.h"
#include "datalayer/training_run.h"
#include "runtime/collectives.h"
#include "runtime/models/decoder.h"
#include "runtime/models/model_desc.h"
#include "runtime/reference.h"
#include "runtime/section_runner.h"
#include "scheduler/problem.h"
#include "scheduler/scheduler.h"
#include "scheduler/simulator.h"

namespace maestro::runtime {

namespace {

using launcher::Backend;
using launcher::Buffer;
using launcher::LinkChannel;
using launcher::WorkPtr;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---- the step's batch, as rank 0 broadcasts it -------------------------------
// [step, epoch, n, then n x (id, modality mask, text tokens, tokens of each modality...)]

struct StepBatch {
  int64_t step = -1;  // -1: no more steps
  int64_t epoch = 0;
  std::vector<scheduler::Sample> samples;
  std::vector<int64_t> ids;
};

std::vector<int64_t> EncodeBatch(const datalayer::GlobalBatch& batch, const std::vector<datalayer::SampleInfo>& infos,
                                 const std::vector<std::string>& modalities) {
  std::vector<int64_t> v{batch.step, batch.epoch, static_cast<int64_t>(infos.size())};
  for (const auto& info : infos) {
    int64_t mask = 0;
    std::vector<int64_t> tokens(modalities.size(), 0);
    for (size_t m = 0; m < modalities.size(); ++m) {
      auto it = info.tokens.find(modalities[m]);
      if (it != info.tokens.end() && it->second > 0) {
        mask |= int64_t{1} << m;
        tokens[m] = it->second;
      }
    }
    auto text = info.tokens.find("text");
    v.push_back(info.sample_id);
    v.push_back(mask);
    v.push_back(text == info.tokens.end() ? 0 : text->second);
    v.insert(v.end(), tokens.begin(), tokens.end());
  }
  return v;
}

StepBatch DecodeBatch(const std::vector<int64_t>& v, size_t modalities) {
  StepBatch b;
  if (v.size() < 3) return b;
  b.step = v[0];
  b.epoch = v[1];
  const auto n = static_cast<size_t>(v[2]);
  size_t at = 3;
  for (size_t i = 0; i < n; ++i) {
    scheduler::Sample s;
    s.id = static_cast<uint64_t>(v[at]);
    s.modalities = static_cast<uint32_t>(v[at + 1]);
    s.text_tokens = v[at + 2];
    for (size_t m = 0; m < modalities && m < scheduler::kMaxModalities; ++m) s.modality_tokens[m] = v[at + 3 + m];
    at += 3 + modalities;
    b.ids.push_back(static_cast<int64_t>(s.id));
    b.samples.push_back(s);
  }
  return b;
}

// The costs the compiler planned with (plan.json's per-section MicroBatchCost
// and per-edge seconds_per_sample): a micro-batch of n samples costs
// fixed + n * per_sample, split forward : backward by the measured (or
// modelled) share. The schedule and the predicted timeline use them.
class PlannedCostModel : public scheduler::SectionCostModel {
 public:
  explicit PlannedCostModel(const plan::Plan& plan) {
    for (const auto& s : plan.sections) {
      costs_.push_back(s.cost);
      trains_.push_back(s.mode == plan::SectionMode::kTrain);
    }
    for (const auto& e : plan.edges) edges_.push_back(e.seconds_per_sample);
  }
  double ForwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const override {
    const auto& c = costs_[static_cast<size_t>(section)];
    return trains_[static_cast<size_t>(section)] ? Total(c, samples.size()) * c.forward_share
                                                 : Total(c, samples.size());
  }
  double BackwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const override {
    const auto& c = costs_[static_cast<size_t>(section)];
    return trains_[static_cast<size_t>(section)] ? Total(c, samples.size()) * (1.0 - c.forward_share) : 0.0;
  }
  double TransferSeconds(int edge, const scheduler::Sample& sample) const override {
    (void)sample;
    return edges_[static_cast<size_t>(edge)];
  }
  double OptimizerSeconds(int section) const override { return costs_[static_cast<size_t>(section)].optimizer_seconds; }

 private:
  static double Total(const plan::MicroBatchCost& c, size_t n) {
    return n == 0 ? 0.0 : c.fixed_seconds + static_cast<double>(n) * c.seconds_per_sample;
  }
  std::vector<plan::MicroBatchCost> costs_;
  std::vector<bool> trains_;
  std::vector<double> edges_;
};

// The scheduler's costs: the plan's when the compiler wrote them, else a
// proxy — 2 (forward) or 4 (backward) x parameters x tokens seen, at 1
// TFLOP/s — that only ranks sections. Only the order of work depends on the
// costs, never the result.
std::shared_ptr<const scheduler::SectionCostModel> RuntimeCostModel(const plan::Plan& plan) {
  const bool planned = std::all_of(plan.sections.begin(), plan.sections.end(),
                                   [](const plan::SectionPlan& s) { return s.cost.seconds_per_sample > 0; });
  if (planned) return std::make_shared<PlannedCostModel>(plan);
  std::vector<scheduler::SectionSpec> specs;
  std::vector<scheduler::LinearCostModel::SectionCost> costs;
  const auto names = scheduler::ModalityNamesOf(plan);
  for (const auto& s : plan.sections) {
    scheduler::SectionSpec spec;
    spec.name = s.name;
    spec.trains = s.mode == plan::SectionMode::kTrain;
    spec.dp = s.config.dp;
    spec.micro_batch = s.config.micro_batch;
    for (size_t m = 0; m < names.size(); ++m) {
      if (names[m] == s.activation) spec.modality = static_cast<int>(m);
    }
    specs.push_back(spec);
    auto params = ParameterCount(s.model);
    scheduler::LinearCostModel::SectionCost c;
    c.seconds_per_token = 2.0 * static_cast<double>(params.ok() ? *params : 1) * 1e-12;
    c.fixed_seconds = 1e-4;
    c.backward_factor = 2.0;
    costs.push_back(c);
  }
  std::vector<scheduler::EdgeSpec> edges;
  std::vector<scheduler::LinearCostModel::EdgeCost> edge_costs;
  for (const auto& e : plan.edges) {
    edges.push_back({plan.section_index(e.from), plan.section_index(e.to)});
    edge_costs.push_back({1e-5, 0.0});
  }
  return std::make_shared<scheduler::LinearCostModel>(specs, costs, edges, edge_costs);
}

// Checkpoint key of TP rank t's optimizer state of section `name`.
std::string OptimizerKey(const std::string& name, int t) {
  return t == 0 ? name : fmt::format("{}#tp{}", name, t);
}

// ---- one rank's loop -----------------------------------------------------------

struct TraceEvent {
  std::string name;
  int64_t step = 0;
  int64_t start_us = 0, dur_us = 0;
  int samples = 0;
};

struct PendingSend {
  torch::Tensor keep_alive;
  WorkPtr work;
};

// A message of this step seen from this rank: which transfer, which link, which tag.
struct Message {
  const scheduler::Transfer* transfer = nullptr;
  LinkChannel* link = nullptr;
  int tag_index = 0;
};

class RankLoop {
 public:
  RankLoop(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Communicators& comms,
           const TrainOptions& options)
      : plan_(plan),
        place_(place),
        comms_(comms),
        options_(options),
        section_(place.coords.section),
        replica_(place.coords.dp) {}

  StatusOr<TrainSummary> Run();

 private:
  Status Setup();
  Status RunStep(const StepBatch& batch);
  Status Forward(int mb_index);
  Status Backward(int mb_index);
  Status OptimizerStep(int64_t step);
  Status Checkpoint(int64_t step);
  Status FinishStep(const StepBatch& batch, Clock::time_point step_start, bool* stop);
  Status WriteTrace();
  Status WriteTimelines(const nlohmann::json& events);
  StatusOr<torch::Tensor> SpooledOrComputed(const MicroBatchData& data);
  LinkChannel* FindLink(int edge, int up_dp, int down_dp);
  bool Rank0() const { return place_.world_rank == 0; }
  bool Tp0() const { return place_.coords.tp == 0; }
  int TpSize() const { return plan_.sections[static_cast<size_t>(section_)].config.tp; }
  // Tensor-parallel ranks of a replica share what arrives at its TP rank 0.
  Status BroadcastInTp(torch::Tensor& t) {
    if (TpSize() == 1) return Status::Ok();
    return TimedWait(comms_.group(plan::GroupKind::kTP).Broadcast(FloatBuffer(t), 0));
  }
  bool UpstreamTrains(int edge) const {
    const auto& up =
        plan_.sections[static_cast<size_t>(plan_.section_index(plan_.edges[static_cast<size_t>(edge)].from))];
    return up.mode == plan::SectionMode::kTrain;
  }
  bool DownstreamTrains(int edge) const {
    const auto& down =
        plan_.sections[static_cast<size_t>(plan_.section_index(plan_.edges[static_cast<size_t>(edge)].to))];
    return down.mode == plan::SectionMode::kTrain;
  }
  // Waits for a transfer or collective, counting the time as blocked (not
  // compute, not framework overhead).
  Status TimedWait(StatusOr<WorkPtr> work) {
    const auto start = Clock::now();
    Status s = Wait(std::move(work));
    blocked_seconds_ += SecondsSince(start);
    return s;
  }
  // Long runs keep the trace of their first 20 and last 100 steps.
  void Trace(const std::string& name, int64_t start_us, int samples) {
    const int64_t total = options_.steps > 0 ? options_.steps : plan_.data.steps;
    if (current_step_ >= 20 && current_step_ < total - 100) return;
    trace_.push_back({name, current_step_, start_us, WallMicros() - start_us, samples});
  }

  const plan::Plan& plan_;
  const launcher::RankPlace& place_;
  launcher::Communicators& comms_;
  TrainOptions options_;
  int section_, replica_;
  std::vector<std::string> modality_names_;
  std::shared_ptr<const scheduler::SectionCostModel> costs_;

  std::unique_ptr<datasets::DemoDataset> dataset_;
  std::unique_ptr<GroupReducer> tp_reducer_;  // outlives runner_
  std::unique_ptr<SectionRunner> runner_;
  std::unique_ptr<datalayer::TrainingRun> run_;  // rank 0 only
  std::unique_ptr<datalayer::SampleIndex> spool_index_;
  std::unique_ptr<datalayer::ActivationSpool> spool_;
  std::unique_ptr<datalayer::PreemptionSignal> signal_;
  std::ofstream metrics_;
  std::vector<TraceEvent> trace_;

  // The step in flight.
  int64_t current_step_ = 0;
  int64_t current_epoch_ = 0;
  scheduler::Problem problem_;
  scheduler::Schedule schedule_;
  std::vector<scheduler::Transfer> transfers_;
  const scheduler::RankProgram* program_ = nullptr;
  std::map<std::tuple<int, int>, std::vector<Message>> incoming_;  // (edge, down micro-batch) -> messages
  std::map<std::tuple<int, int>, std::vector<Message>> outgoing_;  // (edge, up micro-batch) -> messages
  struct MicroBatchState {
    MicroBatchData data;
    std::map<int, torch::Tensor> inputs;
    SectionRunner::Output out;
  };
  std::vector<MicroBatchState> states_;
  std::vector<PendingSend> pending_;
  double busy_seconds_ = 0.0;
  double blocked_seconds_ = 0.0;
  double loss_sum_ = 0.0;
  int64_t loss_samples_ = 0, answers_ = 0, answers_right_ = 0;
  int64_t spool_hits_ = 0, spool_computed_ = 0;
  double last_loss_ = 0.0;
  std::vector<double> losses_;
};

LinkChannel* RankLoop::FindLink(int edge, int up_dp, int down_dp) {
  for (auto& link : comms_.links()) {
    if (link.link().edge == edge && link.link().up_dp == up_dp && link.link().down_dp == down_dp) return &link;
  }
  return nullptr;
}

Status RankLoop::Setup() {
  torch::set_num_threads(ThreadsPerRank());
  for (const auto& s : plan_.sections) {
    if (s.config.pp != 1 || s.config.cp != 1) {
      return Status::FailedPrecondition(
          fmt::format("section '{}': the runtime runs PP = CP = 1 today (plan has pp {} cp {}); recompile with "
                      "--pin {}.pp=1 or let the planner choose (it only emits what the runtime runs)",
                      s.name, s.config.pp, s.config.cp, s.name));
    }
  }
  modality_names_ = scheduler::ModalityNamesOf(plan_);
  costs_ = RuntimeCostModel(plan_);
  MAESTRO_ASSIGN_OR_RETURN(dataset_, OpenPlanDataset(plan_));
  RunnerOptions runner_options;
  if (TpSize() > 1) {
    tp_reducer_ = std::make_unique<GroupReducer>(comms_.group(plan::GroupKind::kTP));
    runner_options.tensor_parallel = tp_reducer_.get();
  }
  MAESTRO_ASSIGN_OR_RETURN(runner_, SectionRunner::Create(plan_, section_, runner_options));
  MAESTRO_ASSIGN_OR_RETURN(signal_, datalayer::PreemptionSignal::Install());

  // Resume: rank 0 owns the run directory and sends each training rank its state.
  std::vector<int64_t> header{0};
  std::optional<datalayer::CheckpointData> resumed;
  Status rank0_status;
  if (Rank0()) {
    auto run = OpenPlanRun(plan_, *dataset_, options_.run_dir);
    if (run.ok()) {
      run_ = std::move(*run);
      auto state = run_->Resume();
      if (state.ok()) {
        resumed = std::move(*state);
        header[0] = resumed ? 1 : 0;
      } else {
        rank0_status = state.status();
      }
    } else {
      rank0_status = run.status();
    }
    if (!rank0_status.ok()) header[0] = -1;
    metrics_.open(options_.run_dir + "/metrics.jsonl", std::ios::app);
  }
  MAESTRO_RETURN_IF_ERROR(BroadcastInts(comms_.world(), header));
  if (header[0] < 0) {
    return rank0_status.ok() ? Status::Aborted("rank 0 could not open the run directory") : rank0_status;
  }
  if (header[0] == 1) {
    // Every rank of a training section gets the full model and its own
    // optimizer shard ("<section>" for TP rank 0, "<section>#tp<t>" else).
    constexpr int kTagModel = 900001, kTagOptimizer = 900002;
    if (Rank0()) {
      for (int r = 0; r < plan_.world_size(); ++r) {
        MAESTRO_ASSIGN_OR_RETURN(auto coords, plan::CoordsOfRank(plan_, r));
        const auto& s = plan_.sections[static_cast<size_t>(coords.section)];
        if (s.mode != plan::SectionMode::kTrain) continue;
        auto model = resumed->sections.find(s.name);
        auto optimizer = resumed->sections.find(OptimizerKey(s.name, coords.tp));
        if (model == resumed->sections.end() || optimizer == resumed->sections.end()) {
          return Status::Corruption(fmt::format("the checkpoint of step {} has no state for section '{}' tp {}",
                                                resumed->step, s.name, coords.tp));
        }
        if (r == 0) {
          MAESTRO_RETURN_IF_ERROR(runner_->LoadModel(model->second.model));
          MAESTRO_RETURN_IF_ERROR(runner_->LoadOptimizer(optimizer->second.optimizer));
        } else {
          MAESTRO_RETURN_IF_ERROR(SendBytes(comms_.world(), model->second.model, r, kTagModel));
          MAESTRO_RETURN_IF_ERROR(SendBytes(comms_.world(), optimizer->second.optimizer, r, kTagOptimizer));
        }
      }
    } else if (runner_->trains()) {
      MAESTRO_ASSIGN_OR_RETURN(auto model, RecvBytes(comms_.world(), 0, kTagModel));
      MAESTRO_ASSIGN_OR_RETURN(auto optimizer, RecvBytes(comms_.world(), 0, kTagOptimizer));
      MAESTRO_RETURN_IF_ERROR(runner_->LoadModel(model));
      MAESTRO_RETURN_IF_ERROR(runner_->LoadOptimizer(optimizer));
    }
  }

  // A forward-only section that feeds others keeps its outputs in a spool.
  if (!runner_->trains() && !runner_->is_sink() && TpSize() == 1) {
    const std::string base =
        fmt::format("{}/spool/{}-dp{}", options_.run_dir, plan_.sections[static_cast<size_t>(section_)].name, replica_);
    std::error_code ec;
    std::filesystem::create_directories(options_.run_dir + "/spool", ec);
    // The spool's commit records live in a SampleIndex database of this rank's own.
    MAESTRO_ASSIGN_OR_RETURN(spool_index_, datalayer::SampleIndex::Open(base + ".sqlite"));
    datalayer::SpoolOptions spool_options;
    spool_options.name = fmt::format("{}.out", plan_.sections[static_cast<size_t>(section_)].name);
    spool_options.reuse_across_epochs = true;  // a frozen section's output never changes
    MAESTRO_ASSIGN_OR_RETURN(spool_,
                             datalayer::ActivationSpool::Open(base + ".h5", &spool_index_->db(), spool_options));
  }
  return Status::Ok();
}

StatusOr<torch::Tensor> RankLoop::SpooledOrComputed(const MicroBatchData& data) {
  const auto shape = runner_->OutputRowShape();
  std::vector<int64_t> full{static_cast<int64_t>(data.sample_ids.size())};
  full.insert(full.end(), shape.begin(), shape.end());
  auto rows = torch::empty(full, torch::kFloat32);
  std::vector<int64_t> missing;
  std::vector<int64_t> missing_pos;
  for (size_t b = 0; b < data.sample_ids.size(); ++b) {
    MAESTRO_ASSIGN_OR_RETURN(auto row, spool_->Get(data.sample_ids[b], current_epoch_));
    if (row && static_cast<int64_t>(row->data.size()) == rows[static_cast<int64_t>(b)].numel() * 4) {
      std::memcpy(rows[static_cast<int64_t>(b)].data_ptr(), row->data.data(), row->data.size());
      ++spool_hits_;
    } else {
      missing.push_back(data.sample_ids[b]);
      missing_pos.push_back(static_cast<int64_t>(b));
    }
  }
  if (!missing.empty()) {
    MAESTRO_ASSIGN_OR_RETURN(auto sub, LoadMicroBatch(*dataset_, missing));
    MAESTRO_ASSIGN_OR_RETURN(auto out, runner_->Forward(sub, {}));
    auto computed_rows = out.rows.contiguous();
    for (size_t i = 0; i < missing.size(); ++i) {
      auto row = computed_rows[static_cast<int64_t>(i)];
      rows[missing_pos[i]].copy_(row);
      datalayer::RowView view{shape, row.data_ptr(), static_cast<size_t>(row.numel()) * sizeof(float)};
      MAESTRO_RETURN_IF_ERROR(spool_->Put(missing[i], current_epoch_, view).status());
      ++spool_computed_;
    }
  }
  return rows;
}

Status RankLoop::Forward(int mb_index) {
  auto& state = states_[static_cast<size_t>(mb_index)];
  const auto& ids_u = program_->micro_batches[static_cast<size_t>(mb_index)].sample_ids;
  std::vector<int64_t> ids(ids_u.begin(), ids_u.end());
  std::unordered_map<int64_t, int64_t> position;
  for (size_t b = 0; b < ids.size(); ++b) position[ids[b]] = static_cast<int64_t>(b);

  // Receive every upstream row of this micro-batch, then order them as the micro-batch.
  for (int e : runner_->in_edges()) {
    auto it = incoming_.find({e, mb_index});
    if (it == incoming_.end()) continue;
    const int up = plan_.section_index(plan_.edges[static_cast<size_t>(e)].from);
    const std::vector<int64_t> row_shape = RowShapeOf(plan_, up);
    torch::Tensor input;
    if (Tp0()) {
      std::unordered_map<int64_t, torch::Tensor> by_id;
      for (const auto& msg : it->second) {
        std::vector<int64_t> shape{static_cast<int64_t>(msg.transfer->sample_ids.size())};
        shape.insert(shape.end(), row_shape.begin(), row_shape.end());
        auto buf = torch::empty(shape, torch::kFloat32);
        MAESTRO_RETURN_IF_ERROR(TimedWait(msg.link->RecvActivation(FloatBuffer(buf), msg.tag_index)));
        for (size_t i = 0; i < msg.transfer->sample_ids.size(); ++i) {
          by_id[static_cast<int64_t>(msg.transfer->sample_ids[i])] = buf[static_cast<int64_t>(i)];
        }
      }
      std::vector<torch::Tensor> ordered;
      for (int64_t id : ids) {
        auto r = by_id.find(id);
        if (r != by_id.end()) ordered.push_back(r->second);
      }
      if (ordered.size() != by_id.size()) {
        return Status::Internal(fmt::format("step {}: edge {} delivered rows of samples outside micro-batch {}",
                                            current_step_, e, mb_index));
      }
      input = torch::stack(ordered).contiguous();
    } else {
      int64_t rows = 0;
      for (const auto& msg : it->second) rows += static_cast<int64_t>(msg.transfer->sample_ids.size());
      std::vector<int64_t> shape{rows};
      shape.insert(shape.end(), row_shape.begin(), row_shape.end());
      input = torch::empty(shape, torch::kFloat32);
    }
    MAESTRO_RETURN_IF_ERROR(BroadcastInTp(input));
    if (runner_->trains() && UpstreamTrains(e)) input.set_requires_grad(true);
    state.inputs[e] = input;
  }

  const auto start = Clock::now();        // busy = compute, not the wait for inputs
  const int64_t start_us = WallMicros();  // so is the op in the trace
  MAESTRO_ASSIGN_OR_RETURN(state.data, LoadMicroBatch(*dataset_, ids));
  if (spool_) {
    MAESTRO_ASSIGN_OR_RETURN(state.out.rows, SpooledOrComputed(state.data));
  } else {
    MAESTRO_ASSIGN_OR_RETURN(state.out, runner_->Forward(state.data, state.inputs));
  }
  loss_sum_ += state.out.loss_sum;
  loss_samples_ += state.out.loss_samples;
  answers_ += state.out.answers;
  answers_right_ += state.out.answers_right;
  busy_seconds_ += SecondsSince(start);

  // Send the rows down every outgoing message of this micro-batch (TP rank 0;
  // the rows are the same on every TP rank).
  for (int e : runner_->out_edges()) {
    if (!Tp0()) break;
    auto it = outgoing_.find({e, mb_index});
    if (it == outgoing_.end()) continue;
    for (const auto& msg : it->second) {
      std::vector<int64_t> pos;
      for (auto id : msg.transfer->sample_ids) pos.push_back(position.at(static_cast<int64_t>(id)));
      auto rows = state.out.rows.detach().index_select(0, torch::tensor(pos, torch::kInt64)).contiguous();
      MAESTRO_ASSIGN_OR_RETURN(auto work, msg.link->SendActivation(FloatBuffer(rows), msg.tag_index));
      pending_.push_back({rows, std::move(work)});
    }
  }
  Trace(fmt::format("F{}", mb_index), start_us, static_cast<int>(ids.size()));
  return Status::Ok();
}

Status RankLoop::Backward(int mb_index) {
  int64_t start_us = WallMicros();
  auto& state = states_[static_cast<size_t>(mb_index)];
  const auto& ids_u = program_->micro_batches[static_cast<size_t>(mb_index)].sample_ids;
  std::unordered_map<int64_t, int64_t> position;
  for (size_t b = 0; b < ids_u.size(); ++b) position[static_cast<int64_t>(ids_u[b])] = static_cast<int64_t>(b);

  if (runner_->is_sink()) {
    const auto start = Clock::now();
    if (state.out.loss.defined()) state.out.loss.backward();
    busy_seconds_ += SecondsSince(start);
  } else {
    // Gradients of this micro-batch's rows from every training consumer.
    auto grad = torch::zeros_like(state.out.rows);
    bool any = false;
    for (int e : runner_->out_edges()) {
      if (!DownstreamTrains(e)) continue;
      auto it = outgoing_.find({e, mb_index});
      if (it == outgoing_.end()) continue;
      for (const auto& msg : it->second) {
        std::vector<int64_t> pos;
        for (auto id : msg.transfer->sample_ids) pos.push_back(position.at(static_cast<int64_t>(id)));
        std::vector<int64_t> shape{static_cast<int64_t>(pos.size())};
        for (int64_t d = 1; d < state.out.rows.dim(); ++d) shape.push_back(state.out.rows.size(d));
        if (Tp0()) {
          auto buf = torch::empty(shape, torch::kFloat32);
          MAESTRO_RETURN_IF_ERROR(TimedWait(msg.link->RecvGradient(FloatBuffer(buf), msg.tag_index)));
          grad.index_add_(0, torch::tensor(pos, torch::kInt64), buf);
        }
        any = true;
      }
    }
    grad = grad.contiguous();
    if (any) MAESTRO_RETURN_IF_ERROR(BroadcastInTp(grad));
    const auto start = Clock::now();
    start_us = WallMicros();  // the trace shows compute, not the wait for gradients
    if (any) torch::autograd::backward({state.out.rows}, {grad});
    busy_seconds_ += SecondsSince(start);
  }
  // Send the input gradients up to training producers (TP rank 0: the
  // gradients of the replicated inputs are whole on every TP rank).
  for (auto& [e, input] : state.inputs) {
    if (!UpstreamTrains(e) || !Tp0()) continue;
    auto it = incoming_.find({e, mb_index});
    if (it == incoming_.end()) continue;
    // input rows are in micro-batch order of the samples the upstream processed.
    std::unordered_map<int64_t, int64_t> input_pos;
    int64_t k = 0;
    std::unordered_map<int64_t, bool> in_edge;
    for (const auto& msg : it->second) {
      for (auto id : msg.transfer->sample_ids) in_edge[static_cast<int64_t>(id)] = true;
    }
    for (auto id : ids_u) {
      if (in_edge.count(static_cast<int64_t>(id))) input_pos[static_cast<int64_t>(id)] = k++;
    }
    auto input_grad = input.grad().defined() ? input.grad() : torch::zeros_like(input);
    for (const auto& msg : it->second) {
      std::vector<int64_t> pos;
      for (auto id : msg.transfer->sample_ids) pos.push_back(input_pos.at(static_cast<int64_t>(id)));
      auto rows = input_grad.index_select(0, torch::tensor(pos, torch::kInt64)).contiguous();
      MAESTRO_ASSIGN_OR_RETURN(auto work, msg.link->SendGradient(FloatBuffer(rows), msg.tag_index));
      pending_.push_back({rows, std::move(work)});
    }
  }
  state = MicroBatchState();  // frees the graph and activations
  Trace(fmt::format("B{}", mb_index), start_us, static_cast<int>(ids_u.size()));
  return Status::Ok();
}

Status RankLoop::OptimizerStep(int64_t step) {
  runner_->EnsureGradients();
  auto& dp = comms_.group(plan::GroupKind::kDP);
  if (dp.group().size() > 1) {
    auto params = runner_->Parameters();
    std::vector<torch::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad().reshape({-1}));
    auto flat = torch::cat(grads).contiguous();
    MAESTRO_RETURN_IF_ERROR(TimedWait(dp.AllReduce(FloatBuffer(flat), launcher::ReduceOp::kSum)));
    int64_t offset = 0;
    for (auto& p : params) {
      const int64_t n = p.numel();
      p.mutable_grad().copy_(flat.slice(0, offset, offset + n).view_as(p));
      offset += n;
    }
  }
  // The trace's "O" is the optimizer's compute: the DP all-reduce above is
  // mostly the wait for the slowest replica, a barrier the simulator models
  // as such (scheduler/simulator.h), not a cost of the step.
  const int64_t start_us = WallMicros();
  const auto start = Clock::now();
  runner_->OptimizerStep(step);
  busy_seconds_ += SecondsSince(start);
  Trace("O", start_us, 0);
  return Status::Ok();
}

Status RankLoop::RunStep(const StepBatch& batch) {
  current_step_ = batch.step;
  current_epoch_ = batch.epoch;
  MAESTRO_ASSIGN_OR_RETURN(problem_, scheduler::FromPlan(plan_, costs_, batch.samples));
  scheduler::ScheduleOptions so;
  MAESTRO_ASSIGN_OR_RETURN(so.policy, scheduler::PolicyFromName(plan_.schedule_policy));
  so.seed = plan_.data.seed;
  so.step = batch.step;
  MAESTRO_ASSIGN_OR_RETURN(schedule_, scheduler::BuildSchedule(problem_, so));
  MAESTRO_ASSIGN_OR_RETURN(transfers_, scheduler::ImpliedTransfers(problem_, schedule_));
  const int rank_index = schedule_.RankIndex(section_, replica_);
  if (rank_index < 0)
    return Status::Internal(fmt::format("the schedule has no program for section {} dp {}", section_, replica_));
  program_ = &schedule_.ranks[static_cast<size_t>(rank_index)];

  // Messages of this rank, with their link and tag (k-th message of its link).
  incoming_.clear();
  outgoing_.clear();
  std::map<std::tuple<int, int, int>, int> next_tag;
  for (const auto& t : transfers_) {
    const int tag = next_tag[{t.edge, t.up_replica, t.down_replica}]++;
    const bool down_here =
        plan_.section_index(plan_.edges[static_cast<size_t>(t.edge)].to) == section_ && t.down_replica == replica_;
    const bool up_here =
        plan_.section_index(plan_.edges[static_cast<size_t>(t.edge)].from) == section_ && t.up_replica == replica_;
    if (!down_here && !up_here) continue;
    // Links end at TP rank 0 of a replica; the other TP ranks get its data by broadcast.
    LinkChannel* link = Tp0() ? FindLink(t.edge, t.up_replica, t.down_replica) : nullptr;
    if (link == nullptr && Tp0()) {
      return Status::Internal(fmt::format("no link for edge {} dp {} -> dp {}", t.edge, t.up_replica, t.down_replica));
    }
    if (down_here) incoming_[{t.edge, t.down_micro_batch}].push_back({&t, link, tag});
    if (up_here) outgoing_[{t.edge, t.up_micro_batch}].push_back({&t, link, tag});
  }
  states_.assign(program_->micro_batches.size(), MicroBatchState());
  for (const auto& op : program_->ops) {
    switch (op.kind) {
      case scheduler::OpKind::kForward: MAESTRO_RETURN_IF_ERROR(Forward(op.micro_batch)); break;
      case scheduler::OpKind::kBackward: MAESTRO_RETURN_IF_ERROR(Backward(op.micro_batch)); break;
      case scheduler::OpKind::kOptimizer: MAESTRO_RETURN_IF_ERROR(OptimizerStep(batch.step)); break;
    }
  }
  // A training section that received no sample still steps (zero gradient).
  if (runner_->trains() && std::none_of(program_->ops.begin(), program_->ops.end(), [](const scheduler::Op& op) {
        return op.kind == scheduler::OpKind::kOptimizer;
      })) {
    MAESTRO_RETURN_IF_ERROR(OptimizerStep(batch.step));
  }
  const auto drain = Clock::now();
  for (auto& send : pending_) MAESTRO_RETURN_IF_ERROR(send.work->Wait());
  pending_.clear();
  blocked_seconds_ += SecondsSince(drain);
  return Status::Ok();
}

Status RankLoop::Checkpoint(int64_t step) {
  const int64_t start_us = WallMicros();
  if (spool_) MAESTRO_RETURN_IF_ERROR(spool_->Commit());
  constexpr int kTagModel = 900011, kTagOptimizer = 900012;
  datalayer::CheckpointData state;
  state.step = step;
  // The DP-0 replica of each training section sends its state to rank 0:
  // the full model (gathered over TP: collective) and one optimizer shard per
  // TP rank.
  if (runner_->trains() && place_.coords.dp == 0) {
    const std::string& name = runner_->section_plan().name;
    MAESTRO_ASSIGN_OR_RETURN(auto model, runner_->SaveModel());
    MAESTRO_ASSIGN_OR_RETURN(auto optimizer, runner_->SaveOptimizer());
    if (place_.coords.tp != 0) model.clear();
    if (Rank0()) {
      state.sections[name].model = std::move(model);
      state.sections[OptimizerKey(name, 0)].optimizer = std::move(optimizer);
    } else {
      MAESTRO_RETURN_IF_ERROR(SendBytes(comms_.world(), model, 0, kTagModel));
      MAESTRO_RETURN_IF_ERROR(SendBytes(comms_.world(), optimizer, 0, kTagOptimizer));
    }
  }
  if (Rank0()) {
    for (size_t s = 0; s < plan_.sections.size(); ++s) {
      const auto& sp = plan_.sections[s];
      if (sp.mode != plan::SectionMode::kTrain) continue;
      for (int t = 0; t < sp.config.tp; ++t) {
        const int from = plan::GlobalRankOf(plan_, static_cast<int>(s), t, 0, 0, 0);
        if (from == 0) continue;
        MAESTRO_ASSIGN_OR_RETURN(auto model, RecvBytes(comms_.world(), from, kTagModel));
        MAESTRO_ASSIGN_OR_RETURN(auto optimizer, RecvBytes(comms_.world(), from, kTagOptimizer));
        if (t == 0) state.sections[sp.name].model = std::move(model);
        state.sections[OptimizerKey(sp.name, t)].optimizer = std::move(optimizer);
      }
    }
    MAESTRO_RETURN_IF_ERROR(run_->Checkpoint(std::move(state)));
  }
  // Nobody runs ahead of a checkpoint that is not durable yet.
  MAESTRO_RETURN_IF_ERROR(Wait(comms_.world().Barrier()));
  Trace("checkpoint", start_us, 0);
  return Status::Ok();
}

Status RankLoop::FinishStep(const StepBatch& batch, Clock::time_point step_start, bool* stop) {
  // [loss_sum, loss_samples, answers, right, stop, busy per section..., framework seconds per section...]
  const size_t sections = plan_.sections.size();
  std::vector<double> stats(5 + 2 * sections, 0.0);
  if (Tp0()) {  // every TP rank computes the same loss: count it once
    stats[0] = loss_sum_;
    stats[1] = static_cast<double>(loss_samples_);
    stats[2] = static_cast<double>(answers_);
    stats[3] = static_cast<double>(answers_right_);
  }
  stats[4] = signal_->requested() ? 1.0 : 0.0;
  stats[5 + static_cast<size_t>(section_)] = busy_seconds_;
  // Framework time: neither compute nor blocked on a peer (data loading,
  // scheduling, bookkeeping), up to the end of this rank's last op.
  stats[5 + sections + static_cast<size_t>(section_)] =
      std::max(0.0, SecondsSince(step_start) - busy_seconds_ - blocked_seconds_);
  MAESTRO_RETURN_IF_ERROR(Wait(comms_.world().AllReduce(launcher::CpuBuffer(stats), launcher::ReduceOp::kSum)));
  const double step_seconds = SecondsSince(step_start);  // every rank's work of the step is in
  loss_sum_ = 0;
  loss_samples_ = answers_ = answers_right_ = 0;
  busy_seconds_ = 0;
  blocked_seconds_ = 0;
  *stop = stats[4] > 0;
  last_loss_ = stats[1] > 0 ? stats[0] / stats[1] : 0.0;
  losses_.push_back(last_loss_);
  if (!Rank0()) return Status::Ok();
  MAESTRO_RETURN_IF_ERROR(run_->StepDone({batch.step, batch.ids, scheduler::ScheduleToJson(schedule_)}));
  nlohmann::json busy = nlohmann::json::object();
  std::string busy_text;
  double framework = 0.0;
  for (size_t s = 0; s < sections; ++s) framework += stats[5 + sections + s];
  const double overhead = step_seconds > 0 ? framework / (plan_.world_size() * step_seconds) : 0.0;
  for (size_t s = 0; s < sections; ++s) {
    const auto& sp = plan_.sections[s];
    const double share = step_seconds > 0 ? stats[5 + s] / (sp.config.ranks() * step_seconds) : 0.0;
    busy[sp.name] = share;
    busy_text += fmt::format(" {} {:.0f}%", sp.name, 100.0 * share);
  }
  const double samples_per_s = step_seconds > 0 ? static_cast<double>(batch.ids.size()) / step_seconds : 0.0;
  const int64_t total = options_.steps > 0 ? options_.steps : plan_.data.steps;
  nlohmann::json line{{"step", batch.step},
                      {"epoch", batch.epoch},
                      {"loss", last_loss_},
                      {"samples", batch.ids.size()},
                      {"step_seconds", step_seconds},
                      {"samples_per_s", samples_per_s},
                      {"busy", busy},
                      {"overhead", overhead}};
  if (stats[2] > 0) line["answer_accuracy"] = stats[3] / stats[2];
  if (metrics_) metrics_ << line.dump() << "\n" << std::flush;
  if (options_.progress) {
    const std::string text = fmt::format("step {}/{} loss {:.4f} {:.1f} samples/s busy{}", batch.step + 1, total,
                                         last_loss_, samples_per_s, busy_text);
    if (isatty(fileno(stderr))) {
      const int width = 30;
      const int filled = total > 0 ? static_cast<int>(width * (batch.step + 1) / total) : 0;
      std::fprintf(stderr, "\r[%s%s] %s", std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(width - filled), '.').c_str(), text.c_str());
      if (batch.step + 1 >= total) std::fprintf(stderr, "\n");
    } else {
      std::fprintf(stderr, "%s\n", text.c_str());
    }
    std::fflush(stderr);
  }
  return Status::Ok();
}

Status RankLoop::WriteTrace() {
  // Every rank writes its events; rank 0 merges them into trace.json.
  const std::string dir = options_.run_dir + "/trace";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : trace_) {
    events.push_back({{"name", e.name},
                      {"ph", "X"},
                      {"ts", e.start_us},
                      {"dur", e.dur_us},
                      {"pid", section_},
                      {"tid", place_.world_rank},
                      {"args", {{"step", e.step}, {"samples", e.samples}}}});
  }
  const std::string mine = fmt::format("{}/rank-{}.json", dir, place_.world_rank);
  {
    std::ofstream out(mine + ".tmp");
    out << events.dump();
    if (!out) return Status::IOError(fmt::format("cannot write {}", mine));
  }
  std::filesystem::rename(mine + ".tmp", mine, ec);
  MAESTRO_RETURN_IF_ERROR(Wait(comms_.world().Barrier()));
  if (!Rank0()) return Status::Ok();
  nlohmann::json all = nlohmann::json::array();
  for (size_t s = 0; s < plan_.sections.size(); ++s) {
    all.push_back({{"name", "process_name"},
                   {"ph", "M"},
                   {"pid", s},
                   {"args", {{"name", fmt::format("section {}", plan_.sections[s].name)}}}});
  }
  for (int r = 0; r < plan_.world_size(); ++r) {
    std::ifstream in(fmt::format("{}/rank-{}.json", dir, r));
    if (!in) continue;
    auto part = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (part.is_array()) {
      for (auto& e : part) all.push_back(std::move(e));
    }
  }
  std::ofstream out(options_.run_dir + "/trace.json");
  out << nlohmann::json{{"traceEvents", all}, {"displayTimeUnit", "ms"}}.dump();
  return WriteTimelines(all);
}

// The last step as it ran (from the merged trace) and as the simulator
// predicts it with per-section costs fitted to the same step's measured ops
// (fixed + per-sample seconds of a micro-batch, forward share, optimizer
// time; times alone on a core when the ranks share cores): two
// Gantt charts with the same rows, and the step times side by side.
Status RankLoop::WriteTimelines(const nlohmann::json& events) {
  if (schedule_.ranks.empty()) return Status::Ok();
  scheduler::Simulation measured;
  measured.policy = schedule_.policy;
  for (const auto& rp : schedule_.ranks) measured.ranks.push_back({rp.section, rp.replica, 0.0, 0.0, 0});
  for (const auto& sp : plan_.sections) measured.sections.push_back({sp.name, sp.config.dp, 0.0, 0.0, 0.0});
  int64_t t0 = INT64_MAX, t1 = 0;
  // Every rank's computing intervals of this step (TP ranks too: with shared
  // cores they compete), and each TP-0 op's time alone on a core.
  std::vector<std::pair<double, double>> computing;
  std::vector<size_t> op_interval;  // measured.ops[i] <-> computing[op_interval[i]]
  for (const auto& e : events) {
    if (e.value("ph", "") != "X" || !e.contains("args") || e["args"].value("step", int64_t{-1}) != current_step_)
      continue;
    const std::string name = e.value("name", "");
    if (name.empty() || (name[0] != 'F' && name[0] != 'B' && name[0] != 'O')) continue;
    const double ts_s = e.value("ts", 0.0) * 1e-6;
    computing.push_back({ts_s, ts_s + e.value("dur", 0.0) * 1e-6});
    auto coords = plan::CoordsOfRank(plan_, e.value("tid", -1));
    if (!coords.ok() || coords->tp != 0) continue;
    scheduler::OpInterval op;
    op.rank = schedule_.RankIndex(coords->section, coords->dp);
    if (op.rank < 0) continue;
    op.kind = name[0] == 'F'   ? scheduler::OpKind::kForward
              : name[0] == 'B' ? scheduler::OpKind::kBackward
                               : scheduler::OpKind::kOptimizer;
    op.micro_batch = name.size() > 1 ? std::atoi(name.c_str() + 1) : -1;
    op.samples = e["args"].value("samples", 0);
    const int64_t ts = e.value("ts", int64_t{0}), dur = e.value("dur", int64_t{0});
    op.start = static_cast<double>(ts);
    op.end = static_cast<double>(ts + dur);
    t0 = std::min(t0, ts);
    t1 = std::max(t1, ts + dur);
    measured.ops.push_back(op);
    op_interval.push_back(computing.size() - 1);
  }
  const std::vector<double> alone = scheduler::AloneSeconds(computing, plan_.shared_cores);
  if (measured.ops.empty()) return Status::Ok();
  for (auto& op : measured.ops) {
    op.start = (op.start - static_cast<double>(t0)) / 1e6;
    op.end = (op.end - static_cast<double>(t0)) / 1e6;
  }
  measured.step_seconds = static_cast<double>(t1 - t0) / 1e6;
  double busy_all = 0.0;
  for (const auto& op : measured.ops) {
    auto& rank = measured.ranks[static_cast<size_t>(op.rank)];
    rank.busy_seconds += op.end - op.start;
    busy_all += op.end - op.start;
  }
  measured.utilization = busy_all / (static_cast<double>(measured.ranks.size()) * measured.step_seconds);

  // Two predictions of this step (its batch, its schedule): with the costs the
  // compiler planned with (profiled when `maestro profile` measured them), and
  // with costs fitted to this very step (per sample, forward share,
  // optimizer; each op's time alone on a core when the ranks share cores),
  // which isolates what the simulator misses beyond costs.
  plan::Plan fitted_plan = plan_;
  {
    const size_t n = plan_.sections.size();
    std::vector<double> f_sec(n), b_sec(n), samples(n), o_sec(n);
    std::vector<int> o_n(n);
    // Forward + backward of every micro-batch (rank, index) and its samples.
    std::map<std::pair<int, int>, std::pair<double, int>> micro_batches;
    for (size_t i = 0; i < measured.ops.size(); ++i) {
      const scheduler::OpInterval& op = measured.ops[i];
      const auto s = static_cast<size_t>(schedule_.ranks[static_cast<size_t>(op.rank)].section);
      const double d = alone[op_interval[i]];
      if (op.kind == scheduler::OpKind::kOptimizer) {
        o_sec[s] += d;
        ++o_n[s];
        continue;
      }
      auto& mb = micro_batches[{op.rank, op.micro_batch}];
      mb.first += d;
      if (op.kind == scheduler::OpKind::kForward) {
        f_sec[s] += d;
        samples[s] += op.samples;
        mb.second = op.samples;
      } else {
        b_sec[s] += d;
      }
    }
    std::vector<std::vector<double>> x(n), y(n);
    for (const auto& [key, mb] : micro_batches) {
      const auto s = static_cast<size_t>(schedule_.ranks[static_cast<size_t>(key.first)].section);
      x[s].push_back(mb.second);
      y[s].push_back(mb.first);
    }
    for (size_t s = 0; s < n; ++s) {
      plan::MicroBatchCost& c = fitted_plan.sections[s].cost;
      // fixed + per sample through this step's micro-batches; proportional
      // when their sizes do not vary (or the line is not a cost).
      double fixed = 0.0, per_sample = 0.0;
      const bool line = FitWeightedLine(x[s], y[s], std::vector<double>(x[s].size(), 1.0), &fixed, &per_sample) &&
                        fixed >= 0.0 && per_sample > 0.0;
      c.fixed_seconds = line ? fixed : 0.0;
      c.seconds_per_sample = line ? per_sample : samples[s] > 0 ? (f_sec[s] + b_sec[s]) / samples[s] : 1e-9;
      c.forward_share = f_sec[s] + b_sec[s] > 0 ? f_sec[s] / (f_sec[s] + b_sec[s]) : 1.0;
      c.optimizer_seconds = o_n[s] > 0 ? o_sec[s] / o_n[s] : 0.0;
      c.measured = true;
    }
    for (auto& e : fitted_plan.edges) e.seconds_per_sample = 0.0;
  }
  scheduler::Problem with_plan = problem_;
  scheduler::Problem with_fit = problem_;
  with_fit.costs = std::make_shared<PlannedCostModel>(fitted_plan);
  auto predicted = scheduler::Simulate(with_plan, schedule_);
  auto fitted = scheduler::Simulate(with_fit, schedule_);
  if (!predicted.ok() || !fitted.ok()) return Status::Ok();  // the pictures are a report, not the run's result
  const bool profiled = std::all_of(plan_.sections.begin(), plan_.sections.end(),
                                    [](const plan::SectionPlan& s) { return s.cost.measured; });
  const std::string title = fmt::format("step {} of {}", current_step_, plan_.job_name);
  // One time scale for both pictures: they are meant to be seen side by side.
  const double axis = std::max(measured.step_seconds, predicted->step_seconds);
  MAESTRO_RETURN_IF_ERROR(
      measured.WriteGanttSvg(options_.run_dir + "/timeline_measured.svg", "measured: " + title, axis));
  MAESTRO_RETURN_IF_ERROR(predicted->WriteGanttSvg(
      options_.run_dir + "/timeline_predicted.svg",
      fmt::format("simulated ({} costs of the plan): {}", profiled ? "profiled" : "modelled", title), axis));
  std::ofstream summary(options_.run_dir + "/timeline.json");
  summary << nlohmann::json{{"step", current_step_},
                            {"measured_step_seconds", measured.step_seconds},
                            {"predicted_step_seconds", predicted->step_seconds},
                            {"predicted_costs", profiled ? "profiled" : "modelled"},
                            {"relative_error",
                             (predicted->step_seconds - measured.step_seconds) / measured.step_seconds},
                            {"fitted_step_seconds", fitted->step_seconds},
                            {"fitted_relative_error",
                             (fitted->step_seconds - measured.step_seconds) / measured.step_seconds}}
                 .dump(2);
  return Status::Ok();
}

StatusOr<TrainSummary> RankLoop::Run() {
  MAESTRO_RETURN_IF_ERROR(Setup());
  TrainSummary summary;
  const int64_t total = options_.steps > 0 ? options_.steps : plan_.data.steps;
  bool first = true;
  int64_t steps_this_start = 0;
  for (;;) {
    const auto t0 = Clock::now();
    std::vector<int64_t> encoded;
    Status rank0_status;
    if (Rank0()) {
      if (run_->next_step() >= total) {
        encoded = {-1};
      } else {
        auto batch = run_->NextBatch();
        std::vector<datalayer::SampleInfo> infos;
        if (batch.ok()) {
          auto got = run_->index().GetSamples(batch->sample_ids);
          if (got.ok()) {
            encoded = EncodeBatch(*batch, *got, modality_names_);
          } else {
            rank0_status = got.status();
          }
        } else {
          rank0_status = batch.status();
        }
        if (!rank0_status.ok()) encoded = {-2};
      }
    }
    const auto broadcast_start = Clock::now();
    MAESTRO_RETURN_IF_ERROR(BroadcastInts(comms_.world(), encoded));
    if (!Rank0()) blocked_seconds_ += SecondsSince(broadcast_start);  // rank 0's reading is framework time
    if (encoded.size() == 1 && encoded[0] == -2) {
      return rank0_status.ok() ? Status::Aborted("rank 0 could not read the next batch") : rank0_status;
    }
    if (encoded.size() == 1) break;  // done
    auto batch = DecodeBatch(encoded, modality_names_.size());
    if (first) {
      summary.first_step = batch.step;
      first = false;
    }
    MAESTRO_RETURN_IF_ERROR(RunStep(batch));
    bool stop = false;
    MAESTRO_RETURN_IF_ERROR(FinishStep(batch, t0, &stop));
    ++steps_this_start;
    ++summary.steps_done;
    if (options_.stop_after_steps >= 0 && steps_this_start >= options_.stop_after_steps) stop = true;
    const bool last = batch.step + 1 >= total;
    const bool due = plan_.checkpoint_every > 0 && (batch.step + 1) % plan_.checkpoint_every == 0;
    if (stop || last || due) MAESTRO_RETURN_IF_ERROR(Checkpoint(batch.step));
    if (stop && !last) {
      summary.preempted = true;
      if (Rank0()) {
        std::fprintf(stderr, "maestro: stopped after step %lld (checkpoint written); run again to resume\n",
                     static_cast<long long>(batch.step));
      }
      break;
    }
  }
  summary.final_loss = last_loss_;
  MAESTRO_RETURN_IF_ERROR(WriteTrace());
  if (spool_) {
    Log(LogLevel::kInfo, "section '{}' dp {}: spool hits {}, computed {}",
        plan_.sections[static_cast<size_t>(section_)].name, replica_, spool_hits_, spool_computed_);
  }
  // Evaluate the last checkpoint (the loop writes one at its last step).
  if (!summary.preempted && options_.evaluate && Rank0() && run_->next_step() > 0 &&
      dataset_->options().kind == datasets::DemoKind::kFashionMnistCaptions) {
    const auto t0 = Clock::now();
    MAESTRO_ASSIGN_OR_RETURN(summary.caption_accuracy,
                             EvaluateRunCaptions(plan_, options_.run_dir, options_.eval_samples));
    std::fprintf(stderr, "caption accuracy on the Fashion-MNIST test split: %.2f%% (%.1f s)\n",
                 100.0 * summary.caption_accuracy, SecondsSince(t0));
    if (metrics_) {
      metrics_ << nlohmann::json{{"eval", "caption_accuracy"}, {"value", summary.caption_accuracy}}.dump() << "\n";
    }
  }
  return summary;
}

}  // namespace

int ThreadsPerRank() {
  if (const char* v = std::getenv("MAESTRO_THREADS_PER_RANK")) {
    const int n = std::atoi(v);
    if (n > 0) return n;
  }
  int local = 1;
  for (const char* key : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (const char* v = std::getenv(key)) {
      local = std::max(1, std::atoi(v));
      break;
    }
  }
  const int cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  return std::max(1, cores / local);
}

StatusOr<TrainSummary> RunTraining(const plan::Plan& plan, const launcher::RankPlace& place,
                                   launcher::Communicators& comms, const TrainOptions& options) {
  try {
    RankLoop loop(plan, place, comms, options);
    return loop.Run();
  } catch (const c10::Error& e) {
    return Status::Internal(fmt::format("rank {}: torch: {}", place.world_rank, e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Status::Internal(fmt::format("rank {}: {}", place.world_rank, e.what()));
  }
}

}  // namespace maestro::runtime
