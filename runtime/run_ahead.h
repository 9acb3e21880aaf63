// SPDX-License-Identifier: Apache-2.0
// Run-ahead of a forward-only section (plan.json's `run_ahead` = k;
// docs/run_ahead.md): while the training sections finish step s, its ranks
// compute the rows of the samples they will forward in steps s+1 .. s+k into
// their output spool (runtime/output_spool.h), so that at step s+1 their
// forwards read the rows back and send them at once: the training sections
// find their inputs ready and the step has no pipeline fill from it.
//
//  - The batches ahead come with the current one (ShareNextBatch's
//    lookahead: rank 0 reads them from the SampleIndex's deterministic
//    schedule without advancing the run), so no collective with the training
//    ranks is needed to start them; their micro-batches are those of each
//    future step's schedule (ScheduleOfBatch), the ones its own forwards
//    will later ask for.
//  - Nothing is sent ahead: rows go to the spool (disk), one micro-batch in
//    memory at a time; what a rank holds ahead is at most the rows of k
//    batches of its replica (checked; most_rows_ahead() <= bound_rows()).
//  - Results do not change: a frozen section's row of a sample is the same
//    whenever it is computed; the training sections run exactly as with
//    run_ahead = 0.
//  - The spool serves committed rows only: the executor commits it after
//    computing ahead (a step boundary), so the next step reads them back and
//    a kill -9 loses none; checkpoints commit it too. A resumed run reads
//    them back (spool hits). Consumption is
//    the SampleIndex's: a batch computed ahead is not consumed until its step
//    is done and checkpointed (datalayer/training_run.h).
//  - A tensor-, pipeline- or context-parallel section (TP, PP and/or CP > 1)
//    runs ahead too: every rank of a replica computes the same forwards (TP
//    and CP peers in lockstep, stages streaming into the next), and one rank
//    owns the spool: the one that sends downstream (last stage, TP = CP =
//    0). Before a step's forwards (its own or a step computed ahead), the
//    owner looks up which rows its spool lacks and ShareRowsToCompute gives
//    that set to every rank of the replica (a broadcast over the CP group of
//    the TP rank 0s, then over the last stage's TP groups, then over each PP
//    group from the last stage), so all of them skip the same forwards: on a
//    resume, rows spooled before the stop are reused on every rank.
// Torch-free: the executor passes the computation (LoadMicroBatch + the
// spool's Rows) as a function.
// May call: runtime/step_batch, scheduler, plan, base. Thread safety: one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"
#include "runtime/step_batch.h"
#include "scheduler/problem.h"

namespace maestro::runtime {

// The most global batches any section of `plan` runs ahead (ShareNextBatch's lookahead).
int MostRunAhead(const plan::Plan& plan);

// The rows a model-parallel replica computes for one step's micro-batches:
// positions[m] are the positions (ascending) in micro-batch m whose rows the
// spool's owner (last stage, TP rank 0) lacks. The owner broadcasts them to
// the replica's other ranks (first over the last stage's TP group, then over
// each PP group from the last stage; the executor's ShareRowsToCompute) in
// this wire form: the micro-batch count, then per micro-batch its count and
// positions.
std::vector<int64_t> PackRowsToCompute(const std::vector<std::vector<int64_t>>& positions);
// The inverse; an error when `wire` is truncated or has trailing values.
StatusOr<std::vector<std::vector<int64_t>>> UnpackRowsToCompute(const std::vector<int64_t>& wire);

// One micro-batch of a step computed ahead: the unit of the stream a
// pipelined replica's stages pass along (below). The same items, in the same
// order, on every rank of the replica.
struct AheadItem {
  int64_t seq = 0;   // its place in the replica's stream of micro-batches computed ahead
  int64_t step = 0;  // the step whose forward will send its rows
  int index = 0;     // its place among that step's forwards (the stage messages' tag)
  int64_t epoch = 0;
  std::vector<int64_t> sample_ids;
  // The positions (ascending) of sample_ids whose rows are computed: what
  // BeforeStep returned (every position without one).
  std::vector<int64_t> positions;
};

// Pipelined replicas (PP = P > 1) stream across steps. Stage j of P lags the
// first stage by min(j, L) micro-batches of the stream: at the end of a
// ComputeAhead it has computed the stream up to (its end - min(j, L)) and
// holds, received but not computed, the next micro-batch (the one stage j-1
// computed last), so every message of a call is matched inside it (no send
// crosses a step boundary; NCCL's in-order sends and collectives stay
// aligned). L = min(P - 1, micro-batches appended after the last one of step
// s+1): the last stage has finished step s+1's rows when the call for step s
// returns, and the next call begins where this one ended, with no fill or
// drain. With run_ahead = 1 nothing follows step s+1, L = 0, and every call
// fills and drains the pipeline as a whole; run_ahead >= 2 pays the fill
// once per start (docs/run_ahead.md "Streaming across steps").
class RunAhead {
 public:
  // Computes the rows of `item` (on the spool's owner, into the spool where
  // it lacks them); `input_received`: its stage input was received earlier
  // (ReceiveInput), else the stage receives it now. `item.positions` empty:
  // nothing to compute (no stage message either).
  using ComputeRows = std::function<Status(const AheadItem& item, bool input_received)>;
  // A stage > 0 receives `item`'s input from the previous stage and holds it
  // for a later ComputeRows (nothing when item.positions is empty).
  using ReceiveInput = std::function<Status(const AheadItem& item)>;
  // Before a step's micro-batches are computed: all of them (in order);
  // returns per micro-batch the positions to compute, the same on every rank
  // of a model-parallel replica (null: all of them).
  using BeforeStep = std::function<StatusOr<std::vector<std::vector<int64_t>>>(
      const std::vector<std::vector<int64_t>>& micro_batches, int64_t epoch)>;

  // Replica `replica` of section `section` (its plan run_ahead > 0); `costs`:
  // the run's (RuntimeCostModel), which the schedules ahead are built with;
  // this rank is pipeline stage `stage` of `stages`.
  RunAhead(const plan::Plan& plan, int section, int replica, std::shared_ptr<const scheduler::SectionCostModel> costs,
           int stage = 0, int stages = 1);

  int batches() const { return batches_; }

  // During step `step` (after this rank's own ops of it were issued): every
  // batch of `ahead` (steps step+1 .. step+k, ShareNextBatch's lookahead) not
  // yet appended joins the stream (after `before_step`, when given), and
  // this stage computes the stream up to its lag (above), `between` after
  // each micro-batch (it lets sends in flight progress); then a stage > 0
  // receives the inputs its previous stage computed beyond that
  // (`receive`). On return, every row of step+1 is computed on the last stage.
  Status ComputeAhead(int64_t step, const std::vector<StepBatch>& ahead, const ComputeRows& compute,
                      const std::function<void()>& between, const BeforeStep& before_step = nullptr,
                      const ReceiveInput& receive = nullptr);
  // Every micro-batch of the stream not yet computed on this stage, in order
  // (before the run stops: every rank of the replica calls it at the same
  // point, and every row appended is then computed and spooled).
  Status Flush(const ComputeRows& compute, const std::function<void()>& between);

  // Rows of steps after the one in flight computed ahead: now and at most
  // (both <= bound_rows(): k batches of this replica's samples).
  int64_t rows_ahead() const;
  int64_t most_rows_ahead() const { return most_rows_ahead_; }
  int64_t bound_rows() const { return bound_rows_; }
  int64_t steps_computed_ahead() const { return steps_computed_; }
  // Micro-batches this stage has yet to compute / of them, received.
  int64_t pending_micro_batches() const { return static_cast<int64_t>(pending_.size()); }
  int64_t received_micro_batches() const { return received_end_ - computed_end_; }
  // Summed over the calls so far: the micro-batches this stage carried from
  // one call into the next (0 without PP or with run_ahead = 1).
  int64_t carried_micro_batches() const { return carried_; }

 private:
  Status ComputeThrough(int64_t end_seq, const ComputeRows& compute, const std::function<void()>& between);

  const plan::Plan& plan_;
  int section_, replica_, batches_;
  std::shared_ptr<const scheduler::SectionCostModel> costs_;
  int stage_ = 0, stages_ = 1;
  int64_t bound_rows_ = 0;
  std::map<int64_t, int64_t> rows_by_step_;  // steps after the one in flight -> its rows computed ahead
  int64_t last_step_ahead_ = -1;             // the last step appended to the stream
  int64_t most_rows_ahead_ = 0, steps_computed_ = 0;
  std::deque<AheadItem> pending_;          // appended, not yet computed on this stage (seq ascending)
  std::map<int64_t, int64_t> step_begin_;  // steps after the one in flight -> the seq of its first micro-batch
  int64_t next_seq_ = 0;                   // the seq of the next micro-batch appended
  int64_t computed_end_ = 0;               // this stage computed every seq below
  int64_t received_end_ = 0;               // ... and received the input of every seq below (>= computed_end_)
  int64_t carried_ = 0;
};

}  // namespace maestro::runtime
