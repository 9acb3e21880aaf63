// SPDX-License-Identifier: Apache-2.0
// How fast a Hugging Face checkpoint loads into a section's model: the
// measurement behind `maestro-bench data`'s safetensors_load_vs_read. No torch
// types here: bench/ includes it without torch's headers (as
// runtime/section_speed.h).
//
// A section that starts from published weights builds its model from the
// plan's ModelDesc (BuildModel, parameters in the section's dtype), opens the
// checkpoint directory (hf::HfCheckpoint::Open: maps and checks every
// safetensors file) and copies every tensor into its parameter
// (LoadHfWeights: the mapped bytes converted to the parameter dtype). The
// probe builds the model once and repeats the open + copy on demand, so a
// benchmark times the load alone.
// May call: libtorch, runtime/models, runtime/hf_weights, hf, plan, base.
// Thread-safety: one probe per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::runtime {

class HfWeightLoadProbe {
 public:
  // The model of desc on the CPU with parameters in `dtype` ("fp32" or
  // "bf16"). InvalidArgument for another dtype or a desc BuildModel refuses.
  static StatusOr<std::unique_ptr<HfWeightLoadProbe>> Create(const plan::ModelDesc& desc, const std::string& dtype);
  ~HfWeightLoadProbe();
  HfWeightLoadProbe(const HfWeightLoadProbe&) = delete;
  HfWeightLoadProbe& operator=(const HfWeightLoadProbe&) = delete;

  // HfCheckpoint::Open(dir) + LoadHfWeights(model, desc, ckpt, TP rank 0 of
  // 1, dtype): every parameter overwritten from the files. The errors are
  // theirs (a missing or wrongly shaped tensor names it and the file).
  Status Load(const std::string& dir);

  int64_t parameter_count() const;
  int64_t parameter_bytes() const;  // in the probe's dtype
  // Parameter `maestro_name`'s element `index` (flat, C order) as a double:
  // lets a caller check that a load put the file's value there.
  // InvalidArgument for an unknown name or an index out of range.
  StatusOr<double> ParameterValue(const std::string& maestro_name, int64_t index) const;

 private:
  struct Model;
  explicit HfWeightLoadProbe(std::unique_ptr<Model> model);
  std::unique_ptr<Model> model_;
};

}  // namespace maestro::runtime
