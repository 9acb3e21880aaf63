// SPDX-License-Identifier: Apache-2.0
// ModelRunner::Forward (runtime/model_runner.h): one micro-batch through one
// model, a function per model kind. A decoder's forward is named steps: its
// input embeddings (image rows spliced in, or the previous pipeline stage's
// activation), the blocks (a pipeline stage's, or the whole model on this
// CP rank's share of the sequence), then what the section does with the
// hidden states: send them on, or compute a sink's loss and count the
// caption answers.
#include <fmt/format.h>

#include "base/checks.h"
#include "datasets/demo_data.h"
#include "plan/loss_chunk.h"
#include "plan/model_desc.h"
#include "runtime/media_rows.h"
#include "runtime/model_runner.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "runtime/parallel/context_parallel.h"
#include "runtime/parallel/pipeline_parallel.h"
#include "runtime/parallel/pipeline_stages.h"
#include "runtime/plan_data.h"
#include "runtime/teacher_rows.h"
#include "runtime/torch_call.h"
#include "runtime/torch_compat.h"
#include "runtime/vocab_loss.h"

namespace maestro::runtime {

namespace {

// The argmax token at position `pos` of sample `b`: from `logits` (B, T, V)
// when the loss kept them, else the head on that one row of `hidden`
// (B, T, C), without grad (a chunked loss keeps no logits).
int64_t AnswerToken(DecoderLMImpl* lm, const torch::Tensor& hidden, const torch::Tensor& logits, int64_t b,
                    int64_t pos) {
  if (logits.defined()) return logits[b][pos].argmax().item<int64_t>();
  torch::NoGradGuard no_grad;
  return lm->Logits(hidden[b][pos]).argmax().item<int64_t>();
}

// The decoder's input embeddings (B, T, C) of `ids` (B, T) with every
// upstream encoder section's rows spliced in (inputs: plan edge -> rows; the
// teacher's edge and the pipeline's keys are not media rows).
torch::Tensor EmbedWithMediaRows(DecoderLMImpl* lm, const plan::Plan& plan, const torch::Tensor& ids,
                                 const MicroBatchData& data, const std::map<int, torch::Tensor>& inputs, int kd_edge,
                                 torch::Device device) {
  auto embeds = lm->Embed(ids);  // (B, T, C)
  for (const auto& [edge, rows] : inputs) {
    if (edge == kd_edge || edge < 0) continue;
    const auto& up = plan.sections[static_cast<size_t>(plan.section_index(plan.edges[static_cast<size_t>(edge)].from))];
    embeds = SpliceRows(embeds, ids, rows.to(device), data, plan, up);
  }
  return embeds;
}

// Caption answers of a micro-batch: the argmax at each sample's answer
// position against the label's token (the next input id). Under context
// parallelism only the rank holding the position counts it. hidden,
// logits: this rank's positions (B, T or T/cp, ...).
void CountCaptionAnswers(DecoderLMImpl* lm, const MicroBatchData& data, const torch::Tensor& hidden,
                         const torch::Tensor& logits, int cp, int cp_rank, SectionRunner::Output* out) {
  // Context parallelism: which of this rank's rows holds each position (-1: another rank's).
  std::vector<int64_t> row_of_position;
  if (cp > 1) {
    const auto mine = ContextParallelPositions(data.input_ids.size(1), cp, cp_rank);
    row_of_position.assign(static_cast<size_t>(data.input_ids.size(1)), -1);
    for (int64_t i = 0; i < mine.size(0); ++i) row_of_position[static_cast<size_t>(mine[i].item<int64_t>())] = i;
  }
  for (size_t b = 0; b < data.answer_positions.size(); ++b) {
    int64_t pos = data.answer_positions[b];
    if (pos < 0) continue;
    const int64_t want = data.input_ids[static_cast<int64_t>(b)][pos + 1].item<int64_t>();
    if (cp > 1) pos = row_of_position[static_cast<size_t>(pos)];
    if (pos < 0) continue;
    const int64_t got = AnswerToken(lm, hidden, logits, static_cast<int64_t>(b), pos);
    ++out->answers;
    if (got == want) ++out->answers_right;
  }
}

}  // namespace

StatusOr<SectionRunner::Output> ModelRunner::Forward(const MicroBatchData& data,
                                                     const std::map<int, torch::Tensor>& inputs) {
  const auto& s = section_plan();
  Output out;
  Status status = TorchCall(fmt::format("section '{}': forward", s.name), [&] {
    std::unique_ptr<torch::NoGradGuard> no_grad;
    if (!trains()) no_grad = std::make_unique<torch::NoGradGuard>();
    compat::AutocastGuard autocast(options().device, options().precision == Precision::kBf16);
    switch (s.model.kind) {
      case plan::ModelKind::kVit: out = ForwardVit(data); break;
      case plan::ModelKind::kProjector: out = ForwardProjector(inputs); break;
      case plan::ModelKind::kAudioEncoder: out = ForwardAudio(data); break;
      case plan::ModelKind::kDecoder: out = ForwardDecoder(data, inputs); break;
    }
  });
  if (!status.ok()) return status;
  return out;
}

SectionRunner::Output ModelRunner::ForwardVit(const MicroBatchData& data) {
  Output out;
  out.rows = VitRows(*module_->as<VitEncoderImpl>(), data, plan(), options().device);
  return out;
}

SectionRunner::Output ModelRunner::ForwardAudio(const MicroBatchData& data) {
  Output out;
  out.rows = AudioRows(*module_->as<AudioEncoderImpl>(), data, MaxAudiosPerSample(plan()), options().device);
  return out;
}

SectionRunner::Output ModelRunner::ForwardProjector(const std::map<int, torch::Tensor>& inputs) {
  TORCH_CHECK(inputs.size() == 1, "a projector reads exactly one input edge");
  Output out;
  out.rows = module_->as<MlpProjectorImpl>()->forward(inputs.begin()->second.to(options().device));
  return out;
}

SectionRunner::Output ModelRunner::ForwardDecoder(const MicroBatchData& data,
                                                  const std::map<int, torch::Tensor>& inputs) {
  const auto& s = section_plan();
  auto* lm = module_->as<DecoderLMImpl>();
  const auto device = options().device;
  auto ids = data.input_ids.to(device);
  const int cp = ContextParallelSize();
  const int cp_rank = cp > 1 ? options().context_parallel->group().my_index : 0;
  Output out;
  torch::Tensor hidden;  // (B, T, C), or this CP rank's (B, T/cp, C)
  // M-RoPE (plan/mrope.h): each token's (time, height, width) position, (3, B, T); else undefined.
  const auto positions = MropePositionIds(data.input_ids, data, plan(), s);
  if (Staged()) {
    // One pipeline stage: the embeddings on the first, else the previous
    // stage's activation; its blocks; the final norm on the last.
    const auto& pp = *options().pipeline;
    const StageLayers layers = LayersOfStage(s.config, s.model.layers, pp.stage());
    torch::Tensor x;
    if (pp.first()) {
      x = EmbedWithMediaRows(lm, plan(), ids, data, inputs, kd_edge_, device);
    } else {
      auto in = inputs.find(kPipelineInput);
      TORCH_CHECK(in != inputs.end(), "pipeline stage ", pp.stage(), " of section '", s.name,
                  "' got no activation from stage ", pp.stage() - 1);
      x = in->second.to(device);
    }
    x = lm->ForwardBlocks(x, layers.first, layers.end, positions);
    if (!pp.last()) {
      out.rows = x;  // to the next stage
      // MoE: this stage's layers' part of the load-balancing term
      // (docs/moe.md), a loss of its own beside the activation.
      const double coef = RouterAuxLossCoef(s.model);
      if (trains() && coef > 0) {
        if (auto balance = lm->RouterBalanceLoss(); balance.defined()) {
          auto per_sample = coef * balance.to(torch::kFloat32);  // (B)
          out.loss = per_sample.sum() / static_cast<double>(plan().data.global_batch);
          out.loss_sum = per_sample.sum().item<double>();
        }
      }
      return out;
    }
    hidden = lm->FinalNorm(x);
  } else {
    auto embeds = EmbedWithMediaRows(lm, plan(), ids, data, inputs, kd_edge_, device);
    // Context parallelism: this rank's part of the sequence (B, T/cp, C).
    if (cp > 1) embeds = SplitSequenceForContextParallel(embeds, 1, cp, cp_rank);
    hidden = lm->ForwardEmbeds(embeds, positions);
  }
  if (!out_edges().empty()) {
    if (!teacher_rows_) {
      out.rows = cp > 1 ? GatherWholeSequence(hidden, 1, *options().context_parallel) : hidden;  // (B, T, C)
      return out;
    }
    // A KD teacher: its rows (B, T, W) (plan/teacher_rows.h).
    TeacherRowsContext context;
    context.sample_ids = data.sample_ids;
    context.seed = SectionSeed(plan().data.seed, s.name);
    context.seq_len = plan().data.seq_len;
    context.cp = cp;
    context.cp_rank = cp_rank;
    context.cp_group = cp > 1 ? options().context_parallel : nullptr;
    context.values_dtype = SpoolValuesType(plan().spool_dtype);
    out.rows = TeacherRowsFromHidden(lm, hidden, *teacher_rows_, context);
    return out;
  }
  if (!trains()) return out;
  AddSinkLoss(data, hidden, inputs, &out);
  return out;
}

// A training sink's loss (plan::LossDesc: cross-entropy, KD against the
// teacher's rows on kd_edge_), the MoE load-balancing term, and the caption
// answers. hidden: (B, T, C), or this CP rank's (B, T/cp, C).
void ModelRunner::AddSinkLoss(const MicroBatchData& data, const torch::Tensor& hidden,
                              const std::map<int, torch::Tensor>& inputs, Output* out) {
  const auto& s = section_plan();
  auto* lm = module_->as<DecoderLMImpl>();
  const auto device = options().device;
  const int cp = ContextParallelSize();
  const int cp_rank = cp > 1 ? options().context_parallel->group().my_index : 0;
  TeacherRows teacher;  // rows (B, T, W): hidden states, top-K or sampled rows
  teacher.form = kd_form_;
  teacher.head = teacher_head_;
  auto kd = kd_edge_ >= 0 ? inputs.find(kd_edge_) : inputs.end();
  if (kd != inputs.end()) {
    TORCH_CHECK(teacher_head_.defined() || !plan::StudentHoldsTeacherHead(kd_form_), "KD rows without a teacher head");
    teacher.rows = kd->second.to(device);
    if (cp > 1) teacher.rows = SplitSequenceForContextParallel(teacher.rows, 1, cp, cp_rank);
  }
  plan::LossDesc loss = s.loss;
  if (loss.kind != "kd") loss.kd_alpha = 0.0;
  auto targets = data.target_ids.to(device);  // (B, T)
  torch::Tensor target_counts;                // context parallelism: each sample's whole count (B)
  if (cp > 1) {
    target_counts = targets.ne(datasets::kIgnoreTarget).to(torch::kFloat32).sum(-1).clamp_min(1.0);
    targets = SplitSequenceForContextParallel(targets, 1, cp, cp_rank);
  }
  torch::Tensor logits;  // (B, T, V) when the loss ran whole; context parallelism: (B, T/cp, V)
  auto per_sample = PerSampleLoss(lm, hidden, targets, teacher, loss, target_counts,
                                  plan::LossChunkPositions(hidden.size(0), hidden.size(1)), &logits);  // (B)
  // MoE: + router_aux_loss_coef * sample b's load-balancing term
  // (docs/moe.md); a last pipeline stage without MoE layers has no part of it.
  if (const double coef = RouterAuxLossCoef(s.model); coef > 0) {
    if (auto balance = lm->RouterBalanceLoss(); balance.defined()) {
      per_sample = per_sample + coef * balance.to(per_sample.scalar_type());
    }
  }
  out->loss = per_sample.sum() / static_cast<double>(plan().data.global_batch);
  out->loss_sum = per_sample.sum().item<double>();
  out->loss_samples = cp_rank == 0 ? per_sample.size(0) : 0;  // CP ranks' loss_sum are shares of one
  CountCaptionAnswers(lm, data, hidden, logits, cp, cp_rank, out);
}

}  // namespace maestro::runtime
