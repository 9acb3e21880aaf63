// SPDX-License-Identifier: Apache-2.0
// maestro-bench gpu: sections training on CUDA device 0, measured
// (runtime/section_speed.h) against what the compiler predicts for them.
// Cases:
//   decoder        Llama-3.2-1B's shape (hidden 2048, 16 layers, 32 heads, 8
//                  kv heads, SwiGLU 8192, vocab 128256, tied), micro-batch
//                  4 x 2048, in the runtime's precision ("mixed": fp32
//                  masters, autocast to bf16, fused AdamW) and in pure bf16
//                  (the configuration of the first hand-built figure, 0.343);
//   vit_b16        ViT-B/16 (768 wide, 12 layers, 12 heads, MLP 3072) on 32
//                  images of 224^2, mixed;
//   qwen2vl_tower  Qwen2-VL's 675M vision tower (1280 wide, 32 layers, 16
//                  heads, MLP 5120, quick GELU, 2-D RoPE, 14 px patches over 2
//                  frames, the 2x2 merger to 3584) on 4 images of 448^2, mixed.
// Each case reports the step's seconds, its phases apart (forward with the
// loss, backward, optimizer), the optimizer step alone fused and as the
// loop, the device's peak allocated bytes, and per device profile (the
// built-in h100_sxm, and `--profile FILE`, e.g. the one `maestro profile
// --kernels` just wrote) the step model's seconds (compiler/step_model.h)
// with the memory model's bytes (compiler/memory_model.h, the reserve left
// out: what the allocator hands out).
//   mfu        the decoder's model FLOPs/s in the runtime's precision / peak;
//              model FLOPs = 3 x the compiler's forward FLOPs per token
//              (compiler/model.h, attention included) x tokens; peak =
//              --peak-tflops (default 989.4: H100/H200 SXM dense bf16).
//              Goal >= 0.45.
//   mfu_bf16   the same in pure bf16.
// Without a usable CUDA device it says why (`cuda_available` false, `mfu`
// null) and runs each case on the CPU at a small shape (`cpu_smoke`), so the
// code path is exercised everywhere.
// issue_probes: the ViT and decoder of plan/issue_probe.h, each one step's
// forward + backward over the step model's count of its tracked kernels
// (us_per_tracked_kernel: on a GPU the CPU's cost of issuing one, which a
// device profile's training_issue_us prices), the ops the runtime really
// dispatched in that step (aten_ops, autograd_nodes; us_per_aten_op), and
// decoder_over_vit. Every measured case also reports its aten_ops and, per
// profile, aten_ops_per_tracked_kernel.
// --predict-only prints the models' figures for the full-size cases and
// measures nothing (any machine).
//   maestro-bench gpu --json [-- --peak-tflops 989.4 --micro-batch 4
//       --seq-len 2048 --profile h200.json --cases decoder,vit_b16]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/registry.h"
#include "compiler/device_profile.h"
#include "compiler/memory_model.h"
#include "compiler/model.h"
#include "compiler/step_model.h"
#include "plan/issue_probe.h"
#include "plan/plan.h"
#include "runtime/section_speed.h"
#include "tests/fixtures/models.h"

namespace {

using maestro::plan::ModelDesc;
using maestro::plan::ModelKind;
namespace compiler = maestro::compiler;
namespace runtime = maestro::runtime;

ModelDesc Llama1B() {
  ModelDesc d = maestro::fixtures::DecoderModel({2048, 16, 32, 8, 8192, 128256});
  d.tie_embeddings = true;
  return d;
}

ModelDesc VitB16() {
  return maestro::fixtures::VitModel({768, 12, 12, 3072, 224, 16, 3});
}

struct Case {
  std::string name;
  ModelDesc desc;
  runtime::SectionSpeedOptions options;
};

// Rows per sample and the attention's context, as the compiler's workload
// builder gives them: a decoder's sequence; a ViT's patches per image.
int64_t TokensPerSample(const Case& c) {
  if (c.desc.kind == ModelKind::kDecoder) return c.options.seq_len;
  const int64_t side = c.desc.image_size / c.desc.patch_size;
  return side * side;
}

// The step model's seconds and the memory model's bytes for `c` on `profile`.
nlohmann::json Predict(const Case& c, const compiler::DeviceProfile& profile) {
  const bool decoder = c.desc.kind == ModelKind::kDecoder;
  const bool mixed = c.options.precision == "mixed";
  const int64_t tokens = TokensPerSample(c);
  const compiler::PassShape shape =
      compiler::SectionSpeedShape(c.desc, c.options.micro_batch, c.options.seq_len, c.options.precision);
  auto pass = compiler::PredictSectionPass(c.desc, shape, profile);
  if (!pass.ok()) throw std::runtime_error(c.name + ": " + pass.status().ToString());
  nlohmann::json out;
  out["seconds_per_step"] = pass->forward_seconds + pass->backward_seconds + pass->optimizer_seconds;
  out["forward_seconds"] = pass->forward_seconds;
  out["backward_seconds"] = pass->backward_seconds;
  out["optimizer_seconds"] = pass->optimizer_seconds;
  out["gemm_seconds"] = pass->detail.gemm_seconds;
  out["attention_seconds"] = pass->detail.attention_seconds;
  out["memory_seconds"] = pass->detail.memory_seconds;
  out["issue_seconds"] = pass->detail.issue_seconds;      // the CPU's issuing beyond the device's time
  out["tracked_kernels"] = pass->detail.tracked_kernels;  // autograd-tracked kernels (their count)
  double kernels = 0;
  for (const auto& term : pass->detail.terms) {
    kernels += term.kernels;
    out["terms"][term.name] = {{"seconds", term.seconds}, {"kernels", term.kernels}};
  }
  out["kernels"] = kernels;
  compiler::SectionWork s;
  s.name = c.name;
  s.model = c.desc;
  s.tokens = tokens;
  s.attention_context = decoder ? 0 : tokens;
  s.facts = compiler::ComputeModelFacts(c.desc, tokens);
  s.lm_loss = decoder;
  s.sink = decoder;
  compiler::DeviceType device;
  device.name = profile.name;
  device.precision = c.options.precision == "fp32" ? compiler::ParamPrecision::kFp32
                     : mixed                       ? compiler::ParamPrecision::kMixedBf16
                                                   : compiler::ParamPrecision::kPureBf16;
  device.memory_bytes = 141e9;
  maestro::plan::ParallelConfig config;
  config.micro_batch = c.options.micro_batch;
  const auto memory = compiler::EstimateSectionMemory(s, config, 1, c.options.micro_batch, device);
  out["memory_bytes_without_reserve"] = memory.total() - memory.reserved;
  out["memory"] = {{"weights", memory.weights},
                   {"gradients", memory.gradients},
                   {"optimizer", memory.optimizer},
                   {"activations", memory.activations}};
  return out;
}

nlohmann::json Measure(const Case& c, const std::vector<compiler::DeviceProfile>& profiles) {
  auto speed = runtime::MeasureSectionTraining(c.desc, c.options);
  if (!speed.ok()) throw std::runtime_error(c.name + ": " + speed.status().ToString());
  nlohmann::json out;
  out["precision"] = speed->precision;
  out["micro_batch"] = c.options.micro_batch;
  if (c.desc.kind == ModelKind::kDecoder) out["seq_len"] = c.options.seq_len;
  out["tokens_per_step"] = speed->tokens_per_step;
  out["params"] = speed->params;
  // -1: not measured (see runtime/section_speed.h).
  const std::pair<const char*, double> figures[] = {
      {"seconds_per_step", speed->seconds_per_step},
      {"tokens_per_second", speed->tokens_per_second},
      {"samples_per_second", speed->samples_per_second},
      {"forward_seconds", speed->forward_seconds},
      {"backward_seconds", speed->backward_seconds},
      {"optimizer_seconds", speed->optimizer_seconds},
      {"optimizer_fused_seconds", speed->optimizer_fused_seconds},
      {"optimizer_loop_seconds", speed->optimizer_loop_seconds},
      {"peak_allocated_bytes", static_cast<double>(speed->peak_allocated_bytes)}};
  for (const auto& [key, value] : figures) out[key] = value;
  out["aten_ops"] = speed->aten_ops;  // one step's forward and backward
  out["autograd_nodes"] = speed->autograd_nodes;
  out["device"] = speed->device;
  const auto facts = compiler::ComputeModelFacts(c.desc, TokensPerSample(c));
  out["model_tflops"] = 3.0 * facts.flops_per_token * speed->tokens_per_second / 1e12;
  for (const auto& profile : profiles) {
    nlohmann::json p = Predict(c, profile);
    p["measured_over_predicted"] = speed->seconds_per_step / p["seconds_per_step"].get<double>();
    p["aten_ops_per_tracked_kernel"] = static_cast<double>(speed->aten_ops) / p["tracked_kernels"].get<double>();
    if (speed->peak_allocated_bytes > 0) {
      p["measured_memory_over_model"] =
          static_cast<double>(speed->peak_allocated_bytes) / p["memory_bytes_without_reserve"].get<double>();
    }
    out["predicted"][profile.name] = p;
  }
  return out;
}

// The issue probes (plan/issue_probe.h), a ViT and a decoder of the same
// depth and width, one step each at micro-batch 1 in the runtime's
// precision: forward + backward seconds over the step model's count of the
// step's tracked kernels. On a GPU both are issue-bound, so each is the
// CPU's cost of issuing one tracked kernel of that kind of section, and
// their ratio says how far one profile constant serves both (the H200's
// is fitted on a ViT). On the CPU the same figures are its per-kernel cost.
nlohmann::json MeasureIssueProbes(bool cuda, int steps) {
  nlohmann::json out;
  auto h100 = compiler::BuiltinDeviceProfile(compiler::kDefaultDeviceProfile);
  if (!h100.ok()) throw std::runtime_error(h100.status().ToString());
  const std::pair<const char*, ModelDesc> probes[] = {{"vit", maestro::plan::IssueProbeVit()},
                                                      {"decoder", maestro::plan::IssueProbeDecoder()}};
  for (const auto& [name, desc] : probes) {
    const runtime::SectionSpeedOptions o = runtime::IssueProbeOptions(desc, cuda, steps);
    auto speed = runtime::MeasureSectionTraining(desc, o);
    if (!speed.ok()) throw std::runtime_error(std::string("issue probe ") + name + ": " + speed.status().ToString());
    auto pass = compiler::PredictSectionPass(
        desc, compiler::SectionSpeedShape(desc, o.micro_batch, o.seq_len, o.precision), *h100);
    if (!pass.ok()) throw std::runtime_error(pass.status().ToString());
    const double seconds = speed->forward_seconds + speed->backward_seconds;
    out[name] = {{"forward_seconds", speed->forward_seconds},
                 {"backward_seconds", speed->backward_seconds},
                 {"tracked_kernels", pass->detail.tracked_kernels},
                 {"us_per_tracked_kernel", seconds / pass->detail.tracked_kernels * 1e6},
                 {"aten_ops", speed->aten_ops},
                 {"autograd_nodes", speed->autograd_nodes},
                 {"us_per_aten_op", seconds / static_cast<double>(speed->aten_ops) * 1e6},
                 {"precision", o.precision}};
  }
  out["decoder_over_vit"] =
      out["decoder"]["us_per_tracked_kernel"].get<double>() / out["vit"]["us_per_tracked_kernel"].get<double>();
  return out;
}

}  // namespace

MAESTRO_BENCHMARK(gpu, "sections on CUDA against the step and memory models: a ~1B decoder's MFU, two ViTs") {
  nlohmann::json out;
  std::string why;
  const bool cuda = runtime::CudaUsable(&why);
  out["cuda_available"] = cuda;
  double peak_tflops = 989.4;
  int micro_batch = 4, seq_len = 2048;
  std::string profile_file;
  std::vector<std::string> wanted = {"decoder", "vit_b16", "qwen2vl_tower"};
  bool predict_only = false;
  CLI::App cli{"maestro-bench gpu -- [options]"};
  cli.add_option("--micro-batch", micro_batch, "the decoder's samples per micro-batch")->check(CLI::PositiveNumber);
  cli.add_option("--seq-len", seq_len, "the decoder's tokens per sample")->check(CLI::Range(2, 1 << 20));
  cli.add_option("--peak-tflops", peak_tflops, "the device's dense bf16 peak")->check(CLI::PositiveNumber);
  cli.add_option("--profile", profile_file, "a device profile to predict with too (maestro profile --kernels)")
      ->check(CLI::ExistingFile);
  cli.add_flag("--predict-only", predict_only, "print the models' figures for the full-size cases; measure nothing");
  cli.add_option("--cases", wanted, "decoder, vit_b16, qwen2vl_tower (default: all)")->delimiter(',');
  std::vector<std::string> args(options.args.rbegin(), options.args.rend());  // CLI11 takes them reversed
  cli.parse(args);  // a CLI::ParseError names the bad argument
  std::vector<compiler::DeviceProfile> profiles;
  auto h100 = compiler::BuiltinDeviceProfile(compiler::kDefaultDeviceProfile);
  if (!h100.ok()) throw std::runtime_error(h100.status().ToString());
  profiles.push_back(*h100);
  if (!profile_file.empty()) {
    auto given = compiler::LoadDeviceProfileFile(profile_file);
    if (!given.ok()) throw std::runtime_error(given.status().ToString());
    profiles.push_back(*given);
  }
  runtime::SectionSpeedOptions base;
  base.phases = true;
  base.steps = options.quick ? 3 : 10;
  std::vector<Case> cases;
  for (const auto& name : wanted) {
    Case c{name, {}, base};
    if (name == "decoder") {
      c.desc = Llama1B();
      c.options.micro_batch = micro_batch;
      c.options.seq_len = seq_len;
    } else if (name == "vit_b16") {
      c.desc = VitB16();
      c.options.micro_batch = 32;
    } else if (name == "qwen2vl_tower") {
      c.desc = maestro::fixtures::Qwen2VlTowerModel();
      c.options.micro_batch = 4;
    } else {
      throw std::runtime_error("maestro-bench gpu: unknown case '" + name + "' (decoder, vit_b16, qwen2vl_tower)");
    }
    if (!cuda && !predict_only) {
      // The same measurements on the CPU, small enough for a 2-core machine.
      c.options.device = "cpu";
      c.options.warmup = 1;
      c.options.steps = 2;
      c.options.micro_batch = 2;
      c.options.seq_len = 64;
      c.desc.hidden = 128;
      c.desc.layers = 2;
      c.desc.heads = 4;
      c.desc.ffn_hidden = 384;
      if (c.desc.kind == ModelKind::kDecoder) {
        c.desc.kv_heads = 2;
        c.desc.vocab = 512;
      } else {
        c.desc.image_size = 8 * c.desc.patch_size;  // 64 patches (the merger takes 2x2 of them)
        if (c.desc.out_dim > 0) {
          c.desc.out_dim = 128;
          c.desc.extra["merger_hidden"] = 4 * 128;  // spatial_merge^2 x hidden, as Qwen2-VL's
        }
      }
    }
    cases.push_back(c);
  }
  if (!cuda) out["reason"] = why;
  out["mfu"] = nullptr;
  if (predict_only) {
    for (Case& c : cases) {
      for (const char* precision : {"mixed", "bf16"}) {
        if (c.desc.kind != ModelKind::kDecoder && std::string(precision) == "bf16") continue;
        c.options.precision = precision;
        const std::string key = c.name + (c.options.precision == "bf16" ? "_bf16" : "");
        for (const auto& profile : profiles) out["predicted"][key][profile.name] = Predict(c, profile);
      }
    }
    return out;
  }
  nlohmann::json results;
  for (const Case& c : cases) {
    std::vector<runtime::SectionSpeedOptions> runs{c.options};
    runs.back().precision = cuda ? "mixed" : "fp32";
    if (c.desc.kind == ModelKind::kDecoder && cuda) {
      runs.push_back(c.options);
      runs.back().precision = "bf16";
    }
    for (const auto& run : runs) {
      Case one = c;
      one.options = run;
      const std::string key = c.name + (run.precision == "bf16" ? "_bf16" : "");
      results[key] = Measure(one, profiles);
      if (cuda && c.desc.kind == ModelKind::kDecoder) {
        const double mfu = results[key]["model_tflops"].get<double>() / peak_tflops;
        out[run.precision == "bf16" ? "mfu_bf16" : "mfu"] = mfu;
      }
    }
  }
  out[cuda ? "cases" : "cpu_smoke"] = results;
  out["issue_probes"] = MeasureIssueProbes(cuda, cuda ? 20 : (options.quick ? 3 : 5));
  out["peak_tflops"] = peak_tflops;
  return out;
}
