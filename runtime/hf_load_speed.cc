// SPDX-License-Identifier: Apache-2.0
// The load half of `maestro-bench data`'s safetensors_load_vs_read (see
// hf_load_speed.h).
#include "runtime/hf_load_speed.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include "base/checks.h"
#include "hf/checkpoint.h"
#include "runtime/hf_weights.h"
#include "runtime/models/encoders.h"

namespace maestro::runtime {

struct HfWeightLoadProbe::Model {
  plan::ModelDesc desc;
  torch::Dtype dtype = torch::kFloat32;
  std::shared_ptr<torch::nn::Module> module;
};

HfWeightLoadProbe::HfWeightLoadProbe(std::unique_ptr<Model> model) : model_(std::move(model)) {}
HfWeightLoadProbe::~HfWeightLoadProbe() = default;

StatusOr<std::unique_ptr<HfWeightLoadProbe>> HfWeightLoadProbe::Create(const plan::ModelDesc& desc,
                                                                       const std::string& dtype) {
  auto model = std::make_unique<Model>();
  model->desc = desc;
  if (dtype == "fp32") {
    model->dtype = torch::kFloat32;
  } else if (dtype == "bf16") {
    model->dtype = torch::kBFloat16;
  } else {
    return Status::InvalidArgument(
        fmt::format("HfWeightLoadProbe: parameter dtype '{}' is not one a section trains in; use fp32 or bf16", dtype));
  }
  ModelBuildOptions build;
  build.seed = 1;
  build.dtype = model->dtype;
  MAESTRO_ASSIGN_OR_RETURN(model->module, BuildModel(desc, build));
  return std::unique_ptr<HfWeightLoadProbe>(new HfWeightLoadProbe(std::move(model)));
}

Status HfWeightLoadProbe::Load(const std::string& dir) {
  MAESTRO_ASSIGN_OR_RETURN(auto ckpt, hf::HfCheckpoint::Open(dir));
  return LoadHfWeights(*model_->module, model_->desc, *ckpt, /*tp_rank=*/0, /*tp_size=*/1, model_->dtype);
}

int64_t HfWeightLoadProbe::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : model_->module->parameters()) n += p.numel();
  return n;
}

int64_t HfWeightLoadProbe::parameter_bytes() const {
  int64_t n = 0;
  for (const auto& p : model_->module->parameters()) n += p.numel() * static_cast<int64_t>(p.element_size());
  return n;
}

StatusOr<double> HfWeightLoadProbe::ParameterValue(const std::string& maestro_name, int64_t index) const {
  for (const auto& item : model_->module->named_parameters(/*recurse=*/true)) {
    if (item.key() != maestro_name) continue;
    const torch::Tensor flat = item.value().detach().reshape({-1});
    if (index < 0 || index >= flat.numel()) {
      return Status::InvalidArgument(fmt::format("HfWeightLoadProbe: parameter '{}' has {} elements; {} is outside",
                                                 maestro_name, flat.numel(), index));
    }
    return flat[index].item<double>();
  }
  return Status::InvalidArgument(fmt::format("HfWeightLoadProbe: the model has no parameter '{}'", maestro_name));
}

}  // namespace maestro::runtime
