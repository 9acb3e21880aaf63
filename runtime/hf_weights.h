// SPDX-License-Identifier: Apache-2.0
// Published Hugging Face weights into a runtime model, and back out.
//
// Owns: LoadHfWeights (a checkpoint directory's tensors -> the parameters of
// a model built from a ModelDesc, this TP rank's slice only, read straight
// from the memory-mapped safetensors files) and ExportHfTensors (the model's
// parameters -> the tensors a Hugging Face checkpoint holds, under HF names,
// in the dtype asked for). Which tensor is which comes from hf/name_map.h
// (one table per layout; docs/weights.md lists them).
// Runtime-internal: includes torch; only runtime/*.cc and tests include it.
// May call: libtorch, hf (checkpoint, name_map), plan, base.
// Thread-safety: one model per call; the checkpoint is only read.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "hf/checkpoint.h"
#include "hf/name_map.h"
#include "plan/plan.h"

namespace maestro::runtime {

// The torch dtype of a stored floating-point tensor (BF16, F16, F32, F64),
// and back: InvalidArgument for any other (the one mapping for HF weights,
// the export and the sharded checkpoints' pieces).
StatusOr<torch::Dtype> TorchDtypeOf(hf::TensorDType dtype);
StatusOr<hf::TensorDType> HfDtypeOf(torch::Dtype dtype);

// Copies every parameter of `model` from `ckpt`. `model` was built from
// `desc` (BuildModel) and, when tp_size > 1, already sharded for rank
// `tp_rank` (ShardModelForTensorParallel): each parameter then receives the
// slice [r*n/size, (r+1)*n/size) of its tensor along the table's tp_dim
// (of each of its tp_parts blocks: a fused qkv's q, k and v rows).
// For every parameter: the HF tensor is found across the shards, its shape
// checked against the full shape desc implies, viewed in place over the
// mapped bytes (torch::from_blob: the file is never copied whole), narrowed
// to this rank's slice, converted from the stored dtype (BF16, F16, F32,
// F64) to `dtype` and copied into the parameter (on its device).
// Errors, each naming the tensor, the file (or the directory) and the shapes:
//   NotFound         a tensor the model needs is missing;
//   InvalidArgument  a tensor under the model's prefixes that the table does
//                    not know (a different architecture or desc), a tensor of
//                    the wrong shape or an unsupported dtype, a model whose
//                    parameters are not what desc describes.
// Tensors of other towers in the same file (a Qwen2-VL file's LLM when
// loading its vision tower, a CLIP file's text model) are passed over.
Status LoadHfWeights(torch::nn::Module& model, const plan::ModelDesc& desc, const hf::HfCheckpoint& ckpt, int tp_rank,
                     int tp_size, torch::Dtype dtype);

// One tensor as a Hugging Face checkpoint stores it.
struct HfTensor {
  std::string name;  // the HF name
  hf::TensorDType dtype = hf::TensorDType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;  // little-endian, C order
};

// One tensor `hf_name` of `ckpt`, checked to have `shape`, converted to
// `dtype` (a copy, on the CPU): e.g. a KD teacher's output head, without
// loading the teacher. NotFound / InvalidArgument name the tensor and file.
StatusOr<torch::Tensor> LoadHfTensor(const hf::HfCheckpoint& ckpt, const std::string& hf_name,
                                     const std::vector<int64_t>& shape, torch::Dtype dtype);

// Every parameter of `model` (built from desc, full: the caller gathers TP
// shards first) under its HF name, converted to dtype_out (kBFloat16, kHalf,
// kFloat32 or kFloat64) or to dtype_by_hf_name[its HF name] when listed
// there, in the table's order. A tied LM head is left out (HF files do not
// carry it). FailedPrecondition for a sharded parameter, InvalidArgument for
// a desc with no published layout or an unsupported dtype.
StatusOr<std::vector<HfTensor>> ExportHfTensors(torch::nn::Module& model, const plan::ModelDesc& desc,
                                                torch::Dtype dtype_out,
                                                const std::map<std::string, torch::Dtype>& dtype_by_hf_name = {});

// Views of `tensors` for hf::WriteHfCheckpoint / hf::WriteSafetensors
// (valid while `tensors` lives).
std::vector<hf::TensorToWrite> TensorsToWrite(const std::vector<HfTensor>& tensors);

}  // namespace maestro::runtime
