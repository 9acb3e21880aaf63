// SPDX-License-Identifier: Apache-2.0
// FusedSectionRunner: the SectionRunner (runtime/section_runner.h) of a fused
// section (plan::SectionPlan::components, docs/monolithic.md): one
// ModelRunner per component, built on plan::ExpandFusedSections(plan) in the
// order plan::FusedComponentOrder gives, and run one after another on every
// micro-batch: each component on the samples that activate it, rows passing
// between components in memory so that autograd spans them; the loss is the
// sum of its sinks' losses, its parameters and optimizer steps its
// components' in that order, its checkpoint state its training components'.
// Pipelined (pp > 1; docs/fused_pipeline.md): a stage builds the components
// it holds (runtime/parallel/fused_pipeline.h FusedComponentOnStage).
// Spools: a frozen component that feeds others keeps its rows in a spool
// where its expanded section would (plan::KeepsSpool on the expanded plan:
// CP = PP = EP = 1), as a sectioned one does: its rows are read from the
// spool where it has them, computed for the other samples only and added
// (the executor opens the spools, UseSpool, and commits them). At TP > 1
// each TP rank reads the replica's spool (TP rank 0 writes it) and the
// peers compute the rows any of them lacks, together.
// May call: runtime/section_runner (its components), runtime/micro_batch,
// runtime/parallel (the groups), plan, base, libtorch. Torch-internal.
// Thread safety: one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/graph_forward.h"
#include "runtime/section_runner.h"

namespace maestro::runtime {

class OutputSpool;

class FusedSectionRunner final : public SectionRunner {
 public:
  // Fused section `section` of `plan` (which must outlive the runner).
  static StatusOr<std::unique_ptr<FusedSectionRunner>> Create(const plan::Plan& plan, int section,
                                                              const RunnerOptions& options);

  bool trains() const override;
  std::vector<SectionRunner*> CheckpointedRunners() override;
  std::vector<int64_t> OutputRowShape() const override { return {}; }  // a fused section sends no rows
  StatusOr<Output> Forward(const MicroBatchData& data, const std::map<int, torch::Tensor>& inputs) override;
  std::vector<torch::Tensor> Parameters() override;
  std::vector<bool> ParametersShardedOverTp() override;
  std::vector<bool> ParametersCountedInNorm() override;
  std::vector<bool> ParametersOfRoutedExperts() override;
  // Each component clips and steps on its own, as in the reference; returns
  // the norm over all of them.
  double OptimizerStep(int64_t step) override;
  StatusOr<std::string> SaveModel() override { return StateError(); }
  StatusOr<std::string> SaveOptimizer() override { return StateError(); }
  Status LoadModel(const std::string&) override { return StateError(); }
  Status LoadOptimizer(const std::string&) override { return StateError(); }
  SectionRunner* PipelinedDecoder() override;
  SectionRunner* PipelinedTeacher() override;
  torch::Tensor TiedEmbedding() override;

  // The component-level plan (plan::ExpandFusedSections) its components' runners use.
  const plan::Plan& expanded() const { return *expanded_; }
  // Frozen component `component_section` (an index into expanded()) reads
  // and writes its rows through `spool` (owned by the caller, outliving the
  // runner), at the epoch SetEpoch last gave.
  void UseSpool(int component_section, OutputSpool* spool) { spools_[component_section] = spool; }
  void SetEpoch(int64_t epoch) { epoch_ = epoch; }
  // The offline pass (plan.offline_spool_pass): the frozen components run on
  // `data` (those with a spool read what it has and spool the rest; trained
  // components do not run). Returns the rows computed. Not under PP (a
  // staged section's components span ranks).
  StatusOr<int64_t> FillSpools(const MicroBatchData& data);

 private:
  FusedSectionRunner(const plan::Plan& plan, int section, const RunnerOptions& options)
      : SectionRunner(plan, section, options) {}
  // Forward's step for a component with a spool (fused_section.cc).
  static std::vector<int64_t> MissingOnAnyTpPeer(SectionRunner& component, const std::vector<int64_t>& missing,
                                                 size_t count);
  StatusOr<Output> SpooledForward(SectionRunner& component, OutputSpool& spool, const MicroBatchData& mine,
                                  const std::vector<RowsBySample>& rows);
  // A fused section's state lives in its components (CheckpointedRunners).
  Status StateError() const;
  // The flags of Parameters(), component after component.
  std::vector<bool> Concatenated(std::vector<bool> (SectionRunner::*flags)());

  // The component-level plan its components' runners point into (owned here).
  std::shared_ptr<const plan::Plan> expanded_;
  std::vector<std::unique_ptr<SectionRunner>> components_;
  std::map<int, OutputSpool*> spools_;  // by component section in expanded_
  int64_t epoch_ = 0;
};

}  // namespace maestro::runtime
