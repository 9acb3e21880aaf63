// SPDX-License-Identifier: Apache-2.0
// RankLoop's pipeline members (runtime/rank_loop.h; pp > 1,
// docs/pipeline.md): each stage's order of its replica's ops, the
// activation from the previous stage and to the next (a KD teacher's rows
// relayed beside it, a fused KD section's frozen teacher's activation), and
// the tied embedding's gradient summed between the first and last stage.
// The stage split and the 1F1B order are runtime/parallel/pipeline_stages.h;
// the messages, runtime/parallel/pipeline_parallel.h.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "runtime/rank_loop.h"

namespace maestro::runtime::executor_internal {

namespace {

// Test-only fault injection (tests/runtime/pipeline_test.cc, a hung stage):
// MAESTRO_TEST_HANG_BEFORE_STAGE_SEND="<world rank>:<step>" makes that rank
// stop for good before its first send to the next stage in that step, alive
// but silent, as a stage stuck in a kernel or a driver would be. Its
// neighbours' waits must end with the launcher's timeout naming it.
void HangHereIfTestAsks(int world_rank, int64_t step) {
  const char* v = std::getenv("MAESTRO_TEST_HANG_BEFORE_STAGE_SEND");
  if (v == nullptr) return;
  int rank = -1;
  long long at_step = -1;
  if (std::sscanf(v, "%d:%lld", &rank, &at_step) != 2 || rank != world_rank || at_step != step) return;
  std::fprintf(stderr, "[rank %d] MAESTRO_TEST_HANG_BEFORE_STAGE_SEND: hanging before a stage send at step %lld\n",
               world_rank, at_step);
  std::fflush(stderr);
  for (;;) pause();
}

}  // namespace

std::vector<scheduler::Op> RankLoop::OpsInStageOrder(const scheduler::RankProgram& program) const {
  return pipeline_ ? StageOrder(program.ops, pipeline_->stage(), pipeline_->stages(), pipeline_run_ahead_)
                   : program.ops;
}

// The previous stage's activation of micro-batch `mb_index` (`samples` x
// seq_len x hidden), a leaf whose gradient goes back (Backward); a KD
// teacher's rows, relayed from the first stage, go where the edge's would.
Status RankLoop::ReceiveFromPreviousStage(int mb_index, int64_t samples) {
  auto& state = states_[static_cast<size_t>(mb_index)];
  const torch::Device device = TorchDevice(compute_);
  // A fused section's activation is its training decoder's; a fused KD
  // section's frozen teacher sends its own beside it (docs/fused_pipeline.md).
  SectionRunner* decoder = runner_->PipelinedDecoder();
  if (decoder == nullptr) return Status::Internal("a pipelined section without a decoder");
  MAESTRO_ASSIGN_OR_RETURN(
      state.stage_input,
      pipeline_->ReceiveFromAbove(mb_index, PipelineGroup::Part::kActivation,
                                  {samples, plan_.data.seq_len, decoder->section_plan().model.hidden}, device));
  if (runner_->trains()) state.stage_input.set_requires_grad(true);
  if (SectionRunner* teacher = runner_->PipelinedTeacher()) {
    MAESTRO_ASSIGN_OR_RETURN(
        state.stage_teacher_input,
        pipeline_->ReceiveFromAbove(mb_index, PipelineGroup::Part::kTeacherRows,
                                    {samples, plan_.data.seq_len, teacher->section_plan().model.hidden}, device));
  }
  if (const int kd = runner_->kd_edge(); kd >= 0) {
    std::vector<int64_t> shape{samples};
    const auto row = RowShapeOf(plan_, plan_.section_index(plan_.edges[static_cast<size_t>(kd)].from));
    shape.insert(shape.end(), row.begin(), row.end());
    MAESTRO_ASSIGN_OR_RETURN(state.inputs[kd],
                             pipeline_->ReceiveFromAbove(mb_index, PipelineGroup::Part::kTeacherRows, shape, device));
  }
  return Status::Ok();
}

// This stage's activation to the next stage, and the KD teacher's rows on
// their way to the last stage.
Status RankLoop::SendToNextStage(int mb_index) {
  HangHereIfTestAsks(place_.world_rank, current_step_);
  auto& state = states_[static_cast<size_t>(mb_index)];
  if (!state.out.rows.defined()) {
    return Status::Internal(fmt::format("section '{}' pipeline stage {}: micro-batch {} made no activation",
                                        plan_.sections[static_cast<size_t>(section_)].name, pipeline_->stage(),
                                        mb_index));
  }
  MAESTRO_RETURN_IF_ERROR(pipeline_->SendDown(mb_index, PipelineGroup::Part::kActivation, state.out.rows));
  if (runner_->PipelinedTeacher() != nullptr) {
    MAESTRO_RETURN_IF_ERROR(
        pipeline_->SendDown(mb_index, PipelineGroup::Part::kTeacherRows, state.out.teacher_stage_rows.detach()));
  }
  if (const int kd = runner_->kd_edge(); kd >= 0) {
    auto it = state.inputs.find(kd);
    if (it == state.inputs.end()) {
      return Status::Internal(fmt::format("section '{}' pipeline stage {}: micro-batch {} has no teacher rows to relay",
                                          plan_.sections[static_cast<size_t>(section_)].name, pipeline_->stage(),
                                          mb_index));
    }
    MAESTRO_RETURN_IF_ERROR(pipeline_->SendDown(mb_index, PipelineGroup::Part::kTeacherRows, it->second));
  }
  return Status::Ok();
}

// Tied embeddings: the first stage's (embedding) and the last's (head)
// gradients summed on both, before the DP all-reduce.
Status RankLoop::SumTiedEmbeddingGradient() {
  if (!pipeline_) return Status::Ok();
  torch::Tensor tied = runner_->TiedEmbedding();
  if (!tied.defined()) return Status::Ok();
  return pipeline_->SumTiedGradient(tied.mutable_grad());
}

}  // namespace maestro::runtime::executor_internal
