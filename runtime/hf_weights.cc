// SPDX-License-Identifier: Apache-2.0
// Hugging Face weights in and out of a runtime model (see hf_weights.h).
#include "runtime/hf_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (fmt 11+ keeps it here; libtorch 2.11 carries fmt 12)

#include <cstdint>
#include <cstring>
#include <map>

#include "base/checks.h"
#include "runtime/parallel/tensor_parallel.h"

namespace maestro::runtime {
namespace {

std::string ShapeText(at::IntArrayRef shape) {
  return fmt::format("[{}]", fmt::join(shape.begin(), shape.end(), ", "));
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

// The stored bytes of `located` as a tensor of its stored dtype and shape:
// a view over the mapping (read-only: only ever read from), or a copy when
// the tensor is not aligned to its element size (so kernels may load whole
// elements). Valid while `ckpt` lives.
StatusOr<torch::Tensor> StoredTensor(const hf::HfCheckpoint& ckpt, const hf::HfCheckpoint::Located& located) {
  const hf::TensorInfo& info = *located.info;
  auto stored = TorchDtypeOf(info.dtype);
  if (!stored.ok()) {
    return Status::InvalidArgument(
        fmt::format("tensor '{}' in {}: {}", info.name, located.file->path(), stored.status().message()));
  }
  const hf::TensorView view = ckpt.View(located);
  const auto element = static_cast<uintptr_t>(hf::TensorDTypeSize(info.dtype));
  if (reinterpret_cast<uintptr_t>(view.data) % element == 0) {
    return torch::from_blob(const_cast<std::byte*>(view.data), info.shape, torch::TensorOptions().dtype(*stored));
  }
  auto copy = torch::empty(info.shape, torch::TensorOptions().dtype(*stored));
  std::memcpy(copy.data_ptr(), view.data, view.bytes);
  return copy;
}

}  // namespace

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

Status LoadHfWeights(torch::nn::Module& model, const plan::ModelDesc& desc, const hf::HfCheckpoint& ckpt, int tp_rank,
                     int tp_size, torch::Dtype dtype) {
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size) {
    return Status::InvalidArgument(fmt::format("LoadHfWeights: TP rank {} of {} is not a rank", tp_rank, tp_size));
  }
  MAESTRO_ASSIGN_OR_RETURN(hf::WeightNames names, hf::ExpandWeightNames(desc));
  MAESTRO_ASSIGN_OR_RETURN(auto params, ParametersMatching(model, names));

  MAESTRO_RETURN_IF_ERROR(hf::CheckCheckpointMatches(ckpt, names, desc.source));

  torch::NoGradGuard no_grad;
  for (const auto& w : names.weights) {
    MAESTRO_ASSIGN_OR_RETURN(auto located, ckpt.Find(w.hf_name));
    const std::string& file = located.file->path();
    MAESTRO_ASSIGN_OR_RETURN(torch::Tensor full, StoredTensor(ckpt, located));
    torch::Tensor slice = full;
    if (tp_size > 1 && w.tp_dim >= 0) {
      const int64_t n = w.shape[static_cast<size_t>(w.tp_dim)];
      if (n % (tp_size * w.tp_parts) != 0) {
        return Status::InvalidArgument(fmt::format(
            "tensor '{}' ({}) cannot be split {} ways along dim {}{}", w.hf_name, ShapeText(w.shape), tp_size, w.tp_dim,
            w.tp_parts > 1 ? fmt::format(" in each of its {} parts", w.tp_parts) : std::string()));
      }
      slice = TensorParallelShardOf(full, {w.tp_dim, w.tp_parts}, tp_rank, tp_size);
    }
    torch::Tensor& param = params.at(w.maestro_name);
    if (param.sizes() != slice.sizes()) {
      return Status::InvalidArgument(fmt::format(
          "parameter '{}' ('{}' in {}) has shape {}, but TP rank {} of {} takes {} of the file's {}{}", w.maestro_name,
          w.hf_name, file, ShapeText(param.sizes()), tp_rank, tp_size, ShapeText(slice.sizes()), ShapeText(w.shape),
          tp_size > 1 ? " (shard the model with ShardModelForTensorParallel before loading)" : ""));
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

StatusOr<torch::Tensor> LoadHfTensor(const hf::HfCheckpoint& ckpt, const std::string& hf_name,
                                     const std::vector<int64_t>& shape, torch::Dtype dtype) {
  MAESTRO_ASSIGN_OR_RETURN(auto located, ckpt.Find(hf_name));
  if (located.info->shape != shape) {
    return Status::InvalidArgument(fmt::format("tensor '{}' in {} has shape {}, but {} is needed", hf_name,
                                               located.file->path(), located.info->ShapeText(), ShapeText(shape)));
  }
  MAESTRO_ASSIGN_OR_RETURN(torch::Tensor stored, StoredTensor(ckpt, located));
  return stored.to(dtype, /*non_blocking=*/false, /*copy=*/true);
}

StatusOr<std::vector<HfTensor>> ExportHfTensors(torch::nn::Module& model, const plan::ModelDesc& desc,
                                                torch::Dtype dtype_out,
                                                const std::map<std::string, torch::Dtype>& dtype_by_hf_name) {
  MAESTRO_RETURN_IF_ERROR(HfDtypeOf(dtype_out).status());
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
    auto it = dtype_by_hf_name.find(w.hf_name);
    const torch::Dtype dtype = it == dtype_by_hf_name.end() ? dtype_out : it->second;
    MAESTRO_ASSIGN_OR_RETURN(hf::TensorDType hf_dtype, HfDtypeOf(dtype));
    auto t = param.detach().to(torch::kCPU).to(dtype).contiguous();
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
