// SPDX-License-Identifier: Apache-2.0
// The runtime's models against an independent PyTorch reference: the
// harness every reference test uses (tests/runtime/models_test.cc,
// vision_towers_test.cc, mrope_test.cc).
//
// C++ builds a model from a ModelDesc, perturbs its weights (so norms and
// biases are not their trivial init), draws inputs, runs forward and
// backward of loss = sum(output * probe) (+ sum(<name> * probe/<name>) for
// each of the case's `probed` outputs, + the MoE balance term), and writes weights, inputs and
// probe to a case directory. Then `python3 tests/runtime/reference_models.py
// <case> <case>/ref` builds the same model in PyTorch from the published
// math, loads the weights, and writes its outputs and gradients. Every
// output, the input gradient and every parameter gradient must agree within
// 1e-5 relative (fp32, CPU): max|cpp - ref| <= 1e-5 * max|ref| per tensor.
//
// Tensor files: <dir>/index.json = [{"name", "dtype": "f32"|"i64", "shape",
// "offset"}] and <dir>/data.bin, raw little-endian, contiguous.
// May call: runtime/models, tests/fixtures (python3, paths), gtest, libtorch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::runtime::reference {

using TensorMap = std::map<std::string, torch::Tensor>;

void SaveTensors(const std::filesystem::path& dir, const TensorMap& tensors);
StatusOr<TensorMap> LoadTensors(const std::filesystem::path& dir);

// A fresh folder for one case under the tests' scratch folder.
std::filesystem::path ScratchDir(const std::string& name);

// Runs reference_models.py IN OUT with the first of $MAESTRO_PYTHON3,
// /usr/bin/python3, python3 that has torch (a pyenv or venv python3 first on
// PATH often lacks Debian's python3-torch). A python3 that is missing or
// cannot import torch (the script exits 3) passes to the next; no python3
// with torch at all is an error (python3-torch is a declared dependency).
Status RunReference(const std::filesystem::path& in, const std::filesystem::path& out,
                    const std::filesystem::path& log);

// The desc as reference_models.py reads it (case.json's "desc").
nlohmann::json DescJson(const plan::ModelDesc& d);

// Expects max|got - want| <= max(1e-5 * max|want|, floor) and adds the
// relative error to *worst.
void ExpectClose(const torch::Tensor& got, const torch::Tensor& want, const std::string& what, double* worst,
                 double floor = 0.0);

struct ReferenceCase {
  std::string name;
  plan::ModelDesc desc;
  uint64_t seed = 1;
  TensorMap inputs;  // exported as-is ("ids" int64 or "x" fp32, and what the model needs beside them)
  // Runs the model on inputs with `delta` (float, requires grad, the shape of
  // the float input the model sees) added where the input enters; returns
  // the named outputs ("output" first).
  std::function<TensorMap(torch::nn::Module&, const TensorMap&, const torch::Tensor& delta)> run;
  std::vector<int64_t> delta_shape;
  // Outputs besides "output" that join the loss with their own probe (written
  // as "probe/<name>"), so their gradients are compared too.
  std::vector<std::string> probed;
};

// Builds c.desc, runs c both here and in reference_models.py, and compares
// every output, the input gradient and every parameter gradient.
void CheckAgainstPyTorch(const ReferenceCase& c);

// An encoder or projector case: input "x" of `shape` (normal draws), the
// model's forward on x + delta as "output".
ReferenceCase FloatInputCase(const std::string& name, const plan::ModelDesc& desc, std::vector<int64_t> shape);

}  // namespace maestro::runtime::reference
