// SPDX-License-Identifier: Apache-2.0
#include "tests/runtime/reference_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "runtime/models/encoders.h"
#include "tests/fixtures/python3.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::runtime::reference {

namespace fs = std::filesystem;
using plan::ModelDesc;

// ---- tensor files ------------------------------------------------------------

void SaveTensors(const fs::path& dir, const TensorMap& tensors) {
  fs::create_directories(dir);
  std::ofstream data(dir / "data.bin", std::ios::binary);
  nlohmann::json index = nlohmann::json::array();
  int64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    auto t = tensor.detach().cpu().contiguous();
    const bool is_long = t.scalar_type() == torch::kLong;
    if (!is_long) t = t.to(torch::kFloat32);
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    data.write(static_cast<const char*>(t.data_ptr()), bytes);
    index.push_back(
        {{"name", name}, {"dtype", is_long ? "i64" : "f32"}, {"shape", t.sizes().vec()}, {"offset", offset}});
    offset += bytes;
  }
  std::ofstream(dir / "index.json") << index.dump(1);
}

StatusOr<TensorMap> LoadTensors(const fs::path& dir) {
  std::ifstream index_file(dir / "index.json");
  std::ifstream data(dir / "data.bin", std::ios::binary);
  if (!index_file || !data) return Status::NotFound("no index.json / data.bin in " + dir.string());
  TensorMap out;
  for (const auto& entry : nlohmann::json::parse(index_file)) {
    const auto shape = entry.at("shape").get<std::vector<int64_t>>();
    const bool is_long = entry.at("dtype").get<std::string>() == "i64";
    auto t = torch::empty(shape, is_long ? torch::kLong : torch::kFloat32);
    data.seekg(entry.at("offset").get<int64_t>());
    data.read(static_cast<char*>(t.data_ptr()), t.numel() * static_cast<int64_t>(t.element_size()));
    if (!data) return Status::Corruption("short data.bin in " + dir.string());
    out[entry.at("name").get<std::string>()] = t;
  }
  return out;
}

// ---- python3 ------------------------------------------------------------------

fs::path ScratchDir(const std::string& name) {
  fs::path dir = fs::path(MAESTRO_TEST_TMP) / "runtime_models" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Runs reference_models.py IN OUT with the first of $MAESTRO_PYTHON3,
// /usr/bin/python3, python3 that has torch (a pyenv or venv python3 first on
// PATH often lacks Debian's python3-torch). A python3 that is missing or
// cannot import torch (the script exits 3) passes to the next; no python3
// with torch at all is an error (python3-torch is a declared dependency).
Status RunReference(const fs::path& in, const fs::path& out, const fs::path& log) {
  return fixtures::RunPython3WithTorch(std::string(MAESTRO_SOURCE_DIR) + "/tests/runtime/reference_models.py",
                                       {in.string(), out.string()}, log);
}

// ---- reference comparison --------------------------------------------------------

nlohmann::json DescJson(const ModelDesc& d) {
  return {{"kind", plan::ModelKindName(d.kind)},
          {"hidden", d.hidden},
          {"layers", d.layers},
          {"heads", d.heads},
          {"kv_heads", d.kv_heads},
          {"head_dim", d.head_dim},
          {"ffn_hidden", d.ffn_hidden},
          {"vocab", d.vocab},
          {"tie_embeddings", d.tie_embeddings},
          {"experts", d.experts},
          {"experts_per_token", d.experts_per_token},
          {"moe_ffn_hidden", d.moe_ffn_hidden},
          {"image_size", d.image_size},
          {"patch_size", d.patch_size},
          {"channels", d.channels},
          {"mel_bins", d.mel_bins},
          {"audio_frames", d.audio_frames},
          {"in_dim", d.in_dim},
          {"out_dim", d.out_dim},
          {"extra", d.extra}};
}

// What one side computed: named outputs (always "output", the decoder also
// "hidden"), "input_grad", and "grad/<parameter name>".
// Adds the relative error max|got - want| / max|want| to *worst. `floor`: an
// absolute error always accepted (see the parameter gradients below).
void ExpectClose(const torch::Tensor& got, const torch::Tensor& want, const std::string& what, double* worst,
                 double floor) {
  ASSERT_TRUE(got.defined()) << what << " missing on the C++ side";
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = want.abs().max().item<double>();
  const double err = (got.to(torch::kFloat32) - want).abs().max().item<double>();
  EXPECT_LE(err, std::max(1e-5 * scale, floor))
      << what << ": max |C++ - PyTorch| = " << err << ", max |PyTorch| = " << scale;
  if (scale > floor) *worst = std::max(*worst, err / scale);
}

void CheckAgainstPyTorch(const ReferenceCase& c) {
  const fs::path dir = ScratchDir(c.name);

  ModelBuildOptions options;
  options.seed = c.seed;
  auto built = BuildModel(c.desc, options);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  torch::nn::Module& model = **built;

  // Move every parameter off its trivial init (ones, zeros) so a swapped
  // norm weight or a missing bias would show.
  auto gen = at::detail::createCPUGenerator(c.seed + 1000);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model.parameters()) p.add_(torch::empty(p.sizes()).normal_(0.0, 0.05, gen));
  }

  auto delta = torch::zeros(c.delta_shape, torch::kFloat32).requires_grad_(true);
  TensorMap outputs = c.run(model, c.inputs, delta);
  const auto& output = outputs.at("output");
  auto probe = torch::empty(output.sizes()).normal_(0.0, 1.0, gen);  // d loss / d output
  auto loss = (output * probe).sum();
  TensorMap to_python = c.inputs;
  for (const std::string& name : c.probed) {
    auto extra_probe = torch::empty(outputs.at(name).sizes()).normal_(0.0, 1.0, gen);
    loss = loss + (outputs.at(name) * extra_probe).sum();
    to_python["probe/" + name] = extra_probe;
  }
  // MoE: the load-balancing term joins the loss, so its gradient is compared too.
  if (outputs.count("router_balance")) loss = loss + outputs.at("router_balance").sum();
  loss.backward();

  to_python["probe"] = probe;
  for (const auto& item : model.named_parameters()) to_python["param/" + item.key()] = item.value();
  SaveTensors(dir / "in", to_python);
  std::ofstream(dir / "in" / "case.json") << nlohmann::json{{"desc", DescJson(c.desc)}}.dump(1);

  const Status ran = RunReference(dir / "in", dir / "ref", dir / "python.log");
  ASSERT_TRUE(ran.ok()) << ran.ToString();
  auto ref = LoadTensors(dir / "ref");
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();

  double worst = 0.0;  // largest relative error over every compared tensor
  for (const auto& [name, value] : outputs) {
    ASSERT_TRUE(ref->count(name)) << "PyTorch reference wrote no " << name;
    EXPECT_GT(value.abs().max().item<double>(), 0.0) << name << " is all zeros: the comparison would prove nothing";
    ExpectClose(value, ref->at(name), name, &worst);
  }
  ASSERT_TRUE(ref->count("input_grad"));
  EXPECT_GT(delta.grad().abs().max().item<double>(), 0.0);
  ExpectClose(delta.grad(), ref->at("input_grad"), "input_grad", &worst);

  // Some gradients are exactly zero in exact arithmetic: CLIP's k_proj bias
  // shifts every logit of a query by the same q.b, which softmax ignores.
  // fp32 leaves rounding noise there (~1e-8), so a parameter's gradient may
  // also be off by 1e-6 of the largest parameter gradient of the model.
  double largest_grad = 0.0;
  for (const auto& item : model.named_parameters()) {
    const std::string key = "grad/" + item.key();
    if (ref->count(key)) largest_grad = std::max(largest_grad, ref->at(key).abs().max().item<double>());
  }
  int checked = 0;
  for (const auto& item : model.named_parameters()) {
    const std::string key = "grad/" + item.key();
    ASSERT_TRUE(ref->count(key)) << "PyTorch reference has no gradient for " << item.key();
    auto grad = item.value().grad();
    // An MoE expert no token picked has no gradient on either side.
    ExpectClose(grad.defined() ? grad : torch::zeros_like(item.value()), ref->at(key), key, &worst,
                1e-6 * largest_grad);
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(model.parameters().size()));
  EXPECT_GT(checked, 0);
  std::cout << c.name << ": " << checked << " parameter gradients, outputs and input gradient within " << worst
            << " relative of PyTorch (fp64)\n";
}

ReferenceCase FloatInputCase(const std::string& name, const ModelDesc& desc, std::vector<int64_t> shape) {
  ReferenceCase c;
  c.name = name;
  c.desc = desc;
  auto gen = at::detail::createCPUGenerator(7);
  c.inputs["x"] = torch::empty(shape).normal_(0.0, 1.0, gen);
  c.delta_shape = shape;
  c.run = [](torch::nn::Module& m, const TensorMap& in, const torch::Tensor& delta) {
    auto x = in.at("x") + delta;
    torch::Tensor out;
    if (auto* vit = m.as<VitEncoderImpl>()) out = vit->forward(x);
    if (auto* audio = m.as<AudioEncoderImpl>()) out = audio->forward(x);
    if (auto* projector = m.as<MlpProjectorImpl>()) out = projector->forward(x);
    return TensorMap{{"output", out}};
  };
  return c;
}

}  // namespace maestro::runtime::reference
