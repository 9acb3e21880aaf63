// SPDX-License-Identifier: Apache-2.0
// Hugging Face weights in and out of a runtime model (see hf_weights.h).
#include "runtime/hf_weights.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <map>

#include "base/checks.h"

namespace maestro::runtime {
namespace {

std::string ShapeText(at::IntArrayRef shape) {
  return fmt::format("[{}]", fmt::join(shape.begin(), shape.end(), ", "));
}

StatusOr<torch::Dtype> TorchDtypeOf(hf::TensorDType dtype) {
  switch (dtype) {
    case hf::TensorDType::kBF16: return torch::kBFloat16;
    case hf::TensorDType::kF16: return torch::kHalf;
    case hf::TensorDType::kF32: return torch::kFloat32;
    case hf::TensorDType::kF64: return torch::kFloat64;
    default: break;
  }
  return Status::InvalidArgument(
      fmt::format("dtype {} is not a floating-point weight dtype (BF16, F16, F32, F64)", hf::TensorDTypeName(dtype)));
}

StatusOr<hf::TensorDType> HfDtypeOf(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kBFloat16: return hf::TensorDType::kBF16;
    case torch::kHalf: return hf::TensorDType::kF16;
    case torch::kFloat32: return hf::TensorDType::kF32;
    case torch::kFloat64: return hf::TensorDType::kF64;
    default: break;
  }
  return Status::InvalidArgument(fmt::format("cannot write weights as {}; use bf16, f16, f32 or f64",
                                             c10::toString(static_cast<c10::ScalarType>(dtype))));
}

// The model's parameters by name; InvalidArgument when they are not the
// ones the table expects (the model was not built from this desc).
StatusOr<std::map<std::string, torch::Tensor>> ParametersMatching(torch::nn::Module& model,
                                                                  const hf::WeightNames& names) {
  std::map<std::string, torch::Tensor> params;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) params[item.key()] = item.value();
  std::vector<std::string> problems;
  for (const auto& w : names.weights) {
    if (!params.count(w.maestro_name)) problems.push_back("no parameter '" + w.maestro_name + "'");
  }
  for (const auto& [name, p] : params) {
    if (names.ByMaestroName(name) == nullptr) problems.push_back("parameter '" + name + "' is in no table row");
  }
  if (!problems.empty()) {
    return Status::InvalidArgument(fmt::format(
        "the model's parameters are not those of the {} layout its desc implies ({}); was it built from this desc?",
        hf::WeightLayoutName(names.layout), fmt::join(problems, "; ")));
  }
  return params;
}

std::string Join(const std::vector<std::string>& problems) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) out += "\n  " + problems[i];
  if (problems.size() > kShown) out += fmt::format("\n  ... and {} more", problems.size() - kShown);
  return out;
}

}  // namespace

Status LoadHfWeights(torch::nn::Module& model, const plan::ModelDesc& desc, const hf::HfCheckpoint& ckpt, int tp_rank,
                     int tp_size, torch::Dtype dtype) {
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size) {
    return Status::InvalidArgument(fmt::format("LoadHfWeights: TP rank {} of {} is not a rank", tp_rank, tp_size));
  }
  MAESTRO_ASSIGN_OR_RETURN(hf::WeightNames names, hf::ExpandWeightNames(desc));
  MAESTRO_ASSIGN_OR_RETURN(auto params, ParametersMatching(model, names));

  // Every tensor the file holds under this model's prefixes must be one of its weights.
  std::vector<std::string> unexpected;
  for (const auto& name : ckpt.TensorNames()) {
    if (!names.Owns(name) || names.PassedOver(name) || names.ByHfName(name) != nullptr) continue;
    MAESTRO_ASSIGN_OR_RETURN(auto located, ckpt.Find(name));
    unexpected.push_back(fmt::format("'{}' {} in {}", name, located.info->ShapeText(), located.file->path()));
  }
  if (!unexpected.empty()) {
    return Status::InvalidArgument(
        fmt::format("{}: {} tensor(s) that the {} model described by '{}' does not have (a different architecture, "
                    "or a desc that does not match the checkpoint's config.json; docs/weights.md lists the names):{}",
                    ckpt.dir(), unexpected.size(), hf::WeightLayoutName(names.layout), desc.source, Join(unexpected)));
  }

  std::vector<std::string> missing;
  for (const auto& w : names.weights) {
    if (!ckpt.Find(w.hf_name).ok()) missing.push_back(fmt::format("'{}' {}", w.hf_name, ShapeText(w.shape)));
  }
  if (!missing.empty()) {
    return Status::NotFound(fmt::format("{}: {} tensor(s) the {} model needs are missing (name, expected shape):{}",
                                        ckpt.dir(), missing.size(), hf::WeightLayoutName(names.layout), Join(missing)));
  }

  torch::NoGradGuard no_grad;
  for (const auto& w : names.weights) {
    MAESTRO_ASSIGN_OR_RETURN(auto located, ckpt.Find(w.hf_name));
    const hf::TensorInfo& info = *located.info;
    const std::string& file = located.file->path();
    if (info.shape != w.shape) {
      return Status::InvalidArgument(
          fmt::format("tensor '{}' in {} has shape {}, but the model needs {} (is the desc "
                      "the one of this checkpoint's config.json?)",
                      w.hf_name, file, info.ShapeText(), ShapeText(w.shape)));
    }
    auto stored = TorchDtypeOf(info.dtype);
    if (!stored.ok()) {
      return Status::InvalidArgument(fmt::format("tensor '{}' in {}: {}", w.hf_name, file, stored.status().message()));
    }
    const hf::TensorView view = ckpt.View(located);
    const auto element = static_cast<uintptr_t>(hf::TensorDTypeSize(info.dtype));
    torch::Tensor full;
    if (reinterpret_cast<uintptr_t>(view.data) % element == 0) {
      // The mapped bytes themselves (read-only: only ever read from).
      full = torch::from_blob(const_cast<std::byte*>(view.data), w.shape, torch::TensorOptions().dtype(*stored));
    } else {  // an unaligned tensor: copied once so the kernels may load whole elements
      full = torch::empty(w.shape, torch::TensorOptions().dtype(*stored));
      std::memcpy(full.data_ptr(), view.data, view.bytes);
    }
    torch::Tensor slice = full;
    if (tp_size > 1 && w.tp_dim >= 0) {
      const int64_t n = w.shape[static_cast<size_t>(w.tp_dim)];
      if (n % tp_size != 0) {
        return Status::InvalidArgument(fmt::format("tensor '{}' ({}) cannot be split {} ways along dim {}", w.hf_name,
                                                   ShapeText(w.shape), tp_size, w.tp_dim));
      }
      slice = full.narrow(w.tp_dim, tp_rank * (n / tp_size), n / tp_size);
    }
    torch::Tensor& param = params.at(w.maestro_name);
    if (param.sizes() != slice.sizes()) {
      return Status::InvalidArgument(fmt::format(
          "parameter '{}' ('{}' in {}) has shape {}, but TP rank {} of {} takes {} of the file's {}{}", w.maestro_name,
          w.hf_name, file, ShapeText(param.sizes()), tp_rank, tp_size, ShapeText(slice.sizes()), ShapeText(w.shape),
          tp_size > 1 ? " (shard the model with ShardDecoderForTensorParallel before loading)" : ""));
    }
    // One pass from the mapped bytes into the parameter: copy_ converts as
    // .to(dtype) does, without a full-size temporary (which cost a fresh
    // allocation and a second pass: half the speed of a bf16 -> fp32 load).
    if (param.scalar_type() == dtype) {
      param.copy_(slice);
    } else {
      param.copy_(slice.to(dtype));
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<HfTensor>> ExportHfTensors(torch::nn::Module& model, const plan::ModelDesc& desc,
                                                torch::Dtype dtype_out) {
  MAESTRO_ASSIGN_OR_RETURN(hf::TensorDType hf_dtype, HfDtypeOf(dtype_out));
  MAESTRO_ASSIGN_OR_RETURN(hf::WeightNames names, hf::ExpandWeightNames(desc));
  MAESTRO_ASSIGN_OR_RETURN(auto params, ParametersMatching(model, names));
  std::vector<HfTensor> out;
  out.reserve(names.weights.size());
  for (const auto& w : names.weights) {
    const torch::Tensor& param = params.at(w.maestro_name);
    if (param.sizes() != at::IntArrayRef(w.shape)) {
      return Status::FailedPrecondition(
          fmt::format("parameter '{}' has shape {}, but '{}' is {}: gather the tensor-parallel shards before exporting",
                      w.maestro_name, ShapeText(param.sizes()), w.hf_name, ShapeText(w.shape)));
    }
    auto t = param.detach().to(torch::kCPU).to(dtype_out).contiguous();
    HfTensor tensor;
    tensor.name = w.hf_name;
    tensor.dtype = hf_dtype;
    tensor.shape = w.shape;
    tensor.bytes.assign(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
    out.push_back(std::move(tensor));
  }
  return out;
}

std::vector<hf::TensorToWrite> TensorsToWrite(const std::vector<HfTensor>& tensors) {
  std::vector<hf::TensorToWrite> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back({t.name, t.dtype, t.shape, t.bytes});
  return out;
}

}  // namespace maestro::runtime
