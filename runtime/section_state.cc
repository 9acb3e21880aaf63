// SPDX-License-Identifier: Apache-2.0
// A ModelRunner's checkpoint state (runtime/model_runner.h): its model and
// optimizer as torch archives. SaveModel gathers a sharded model into the
// whole (collective over the TP, PP and EP groups), LoadModel takes the
// whole and keeps this rank's part; archives are device-independent (saved
// from CPU tensors, loaded onto the runner's device in its dtypes).
#include <fmt/format.h>

#include <sstream>

#include "base/checks.h"
#include "runtime/model_runner.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "runtime/parallel/expert_parallel.h"
#include "runtime/parallel/pipeline_parallel.h"
#include "runtime/parallel/tensor_parallel.h"
#include "runtime/torch_call.h"
#include "runtime/torch_compat.h"

namespace maestro::runtime {

namespace {

// The unsharded twin of a TP-sharded decoder: same desc, for moving full
// weights in and out.
StatusOr<std::shared_ptr<torch::nn::Module>> UnshardedTwin(const plan::SectionPlan& s) {
  ModelBuildOptions build;
  build.seed = 0;
  return BuildModel(s.model, build);
}

}  // namespace

Status LoadModuleBytes(torch::nn::Module& module, const std::string& bytes, const std::string& what) {
  const auto params = module.parameters();
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  const torch::Dtype dtype = params.empty() ? torch::kFloat32 : params.front().scalar_type();
  return TorchCall(what, [&] {
    torch::serialize::InputArchive archive;
    std::istringstream in(bytes);
    archive.load_from(in, device);
    module.load(archive);
    module.to(device, dtype);      // an archive of another dtype replaced the tensors: back to the module's
    compat::ClearAutocastCache();  // casts of the old weights
  });
}

StatusOr<std::string> SaveModuleBytes(torch::nn::Module& module) {
  std::string bytes;
  MAESTRO_RETURN_IF_ERROR(TorchCall("saving the model", [&] {
    torch::serialize::OutputArchive archive;
    module.save(archive);
    std::ostringstream os;
    archive.save_to(os);
    bytes = os.str();
  }));
  return bytes;
}

StatusOr<std::string> ModelRunner::SaveModel() {
  std::shared_ptr<torch::nn::Module> full = module_;
  if (Sharded() || Staged() || ExpertSharded()) {
    // Gather: each rank writes its shard into a zero full tensor; the TP sum
    // is its stage's whole, the sum over the stages (each parameter held by
    // one stage; a tied embedding counted on the first) the model's. A routed
    // expert is held by one EP rank: summed over the EP group too.
    auto* tp = Sharded() ? options().tensor_parallel : nullptr;
    auto* pp = Staged() ? options().pipeline : nullptr;
    auto* ep = ExpertSharded() ? options().expert_parallel : nullptr;
    MAESTRO_ASSIGN_OR_RETURN(full, UnshardedTwin(section_plan()));
    auto mine = module_->named_parameters();
    MAESTRO_RETURN_IF_ERROR(TorchCall("gathering the model", [&] {
      torch::NoGradGuard guard;
      for (auto& item : full->named_parameters()) {
        const auto& shard = mine[item.key()];
        const bool held = shard.numel() > 0 && !IsTiedCopy(item.key());
        const TensorParallelSplit split = tp != nullptr ? TensorParallelSplitOf(item.key()) : TensorParallelSplit{};
        auto whole = torch::zeros_like(item.value());
        if (held && !split.sharded()) {
          whole.copy_(shard.to(whole.device(), whole.scalar_type()));
        } else if (held) {
          PlaceTensorParallelShard(whole, shard, split, tp->rank());
          tp->AllReduceSum(whole);
        }
        if (ep != nullptr && IsRoutedExpertParameter(item.key())) ep->AllReduceSum(whole);
        if (pp != nullptr) pp->SumOverStages(whole);
        item.value().copy_(whole);
      }
    }));
  } else if (!options().device.is_cpu()) {
    // Checkpoints hold CPU tensors, whatever the device (and load anywhere).
    MAESTRO_ASSIGN_OR_RETURN(full, UnshardedTwin(section_plan()));
    auto mine = module_->named_parameters();
    torch::NoGradGuard guard;
    for (auto& item : full->named_parameters()) item.value().copy_(mine[item.key()]);
  }
  return SaveModuleBytes(*full);
}

StatusOr<std::string> ModelRunner::SaveOptimizer() {
  if (!optimizer_) return std::string();
  std::string bytes;
  MAESTRO_RETURN_IF_ERROR(TorchCall("saving the optimizer", [&] {
    torch::serialize::OutputArchive archive;
    optimizer_->save(archive);
    std::ostringstream os;
    archive.save_to(os);
    bytes = os.str();
  }));
  return bytes;
}

Status ModelRunner::LoadModel(const std::string& bytes) {
  const std::string what = fmt::format("section '{}': loading the model", section_plan().name);
  if (!Sharded() && !Staged() && !ExpertSharded()) return LoadModuleBytes(*module_, bytes, what);
  // Full weights in, this rank's shard (of its stage's parameters) kept.
  auto* tp = options().tensor_parallel;
  MAESTRO_ASSIGN_OR_RETURN(auto full, UnshardedTwin(section_plan()));
  MAESTRO_RETURN_IF_ERROR(LoadModuleBytes(*full, bytes, what));
  auto mine = module_->named_parameters();
  return TorchCall(what, [&] {
    torch::NoGradGuard guard;
    for (const auto& item : full->named_parameters()) {
      auto& shard = mine[item.key()];
      if (shard.numel() == 0) continue;  // another stage's, or another EP rank's expert
      const TensorParallelSplit split = Sharded() ? TensorParallelSplitOf(item.key()) : TensorParallelSplit{};
      shard.copy_(split.sharded() ? TensorParallelShardOf(item.value(), split, tp->rank(), tp->size()) : item.value());
    }
    compat::ClearAutocastCache();
  });
}

std::vector<SectionRunner::ParameterPlacement> ModelRunner::ParameterPlacements() {
  std::vector<ParameterPlacement> out;
  for (const auto& item : module_->named_parameters()) {
    ParameterPlacement p;
    p.name = item.key();
    p.local = item.value();
    if (Sharded()) {
      const TensorParallelSplit split = TensorParallelSplitOf(item.key());
      p.split_dim = split.dim;
      p.split_parts = split.parts;
      p.tp_rank = options().tensor_parallel->rank();
      p.tp_size = options().tensor_parallel->size();
    }
    p.tied_copy = IsTiedCopy(item.key());
    p.routed_expert = ExpertSharded() && IsRoutedExpertParameter(item.key());
    p.trainable = item.value().requires_grad();
    out.push_back(std::move(p));
  }
  return out;
}

Status ModelRunner::LoadOptimizer(const std::string& bytes) {
  if (!optimizer_ || bytes.empty()) return Status::Ok();
  return TorchCall(fmt::format("section '{}': loading the optimizer", section_plan().name), [&] {
    torch::serialize::InputArchive archive;
    std::istringstream in(bytes);
    archive.load_from(in, options().device);  // moments saved from any device, onto this one
    optimizer_->load(archive);
  });
}

}  // namespace maestro::runtime
