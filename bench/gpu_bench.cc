// SPDX-License-Identifier: Apache-2.0
// maestro-bench gpu: the model FLOP utilization (MFU) of one decoder section
// of about 1B parameters (Llama-3.2-1B's shape: hidden 2048, 16 layers, 32
// heads, 8 kv heads, SwiGLU 8192, vocab 128256, tied embeddings) training in
// bf16 on CUDA device 0: forward + backward + AdamW per micro-batch of 4 x
// 2048 tokens (runtime/decoder_speed.h).
//   mfu                 model FLOPs/s / peak; model FLOPs = 3 x the compiler's
//                       forward FLOPs per token (compiler/model.h, attention
//                       included) x tokens; peak = --peak-tflops (default
//                       989.4: H100/H200 SXM dense bf16). Goal >= 0.45.
//   tokens_per_second, seconds_per_step, params
// Without a usable CUDA device it says why (`cuda_available` false, `mfu`
// null) and runs the same measurement on the CPU in fp32 with a small
// decoder (`cpu_smoke_*`), so the code path is exercised everywhere.
//   maestro-bench gpu --json [-- --peak-tflops 989.4 --micro-batch 4 --seq-len 2048]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/registry.h"
#include "compiler/model.h"
#include "plan/plan.h"
#include "runtime/decoder_speed.h"
#include "tests/fixtures/models.h"

namespace {

maestro::plan::ModelDesc Llama1B() {
  maestro::plan::ModelDesc d = maestro::fixtures::DecoderModel({2048, 16, 32, 8, 8192, 128256});
  d.tie_embeddings = true;
  return d;
}

}  // namespace

MAESTRO_BENCHMARK(gpu, "MFU of a ~1B decoder section training in bf16 on CUDA (says why when there is no GPU)") {
  nlohmann::json out;
  std::string why;
  const bool cuda = maestro::runtime::CudaUsable(&why);
  out["cuda_available"] = cuda;
  maestro::runtime::DecoderSpeedOptions o;
  double peak_tflops = 989.4;
  CLI::App cli{"maestro-bench gpu -- [options]"};
  cli.add_option("--micro-batch", o.micro_batch, "samples per micro-batch")->check(CLI::PositiveNumber);
  cli.add_option("--seq-len", o.seq_len, "tokens per sample")->check(CLI::Range(2, 1 << 20));
  cli.add_option("--peak-tflops", peak_tflops, "the device's dense bf16 peak")->check(CLI::PositiveNumber);
  std::vector<std::string> args(options.args.rbegin(), options.args.rend());  // CLI11 takes them reversed
  cli.parse(args);  // a CLI::ParseError names the bad argument
  maestro::plan::ModelDesc desc = Llama1B();
  if (!cuda) {
    out["reason"] = why;
    out["mfu"] = nullptr;
    // The same measurement on the CPU, small enough for a 2-core machine.
    desc.hidden = 128;
    desc.layers = 2;
    desc.heads = 4;
    desc.kv_heads = 2;
    desc.ffn_hidden = 384;
    desc.vocab = 512;
    o.device = "cpu";
    o.bf16 = false;
    o.micro_batch = 4;
    o.seq_len = 64;
    o.warmup = 1;
    o.steps = options.quick ? 2 : 5;
  } else {
    o.steps = options.quick ? 3 : 10;
  }
  auto speed = maestro::runtime::MeasureDecoderTraining(desc, o);
  if (!speed.ok()) throw std::runtime_error(speed.status().ToString());
  const auto facts = maestro::compiler::ComputeModelFacts(desc, o.seq_len);
  const double model_flops_per_s = 3.0 * facts.flops_per_token * speed->tokens_per_second;
  const std::string prefix = cuda ? "" : "cpu_smoke_";
  out[prefix + "params"] = speed->params;
  out[prefix + "seconds_per_step"] = speed->seconds_per_step;
  out[prefix + "tokens_per_second"] = speed->tokens_per_second;
  out[prefix + "model_tflops"] = model_flops_per_s / 1e12;
  out[prefix + "device"] = speed->device;
  out[prefix + "dtype"] = speed->dtype;
  if (cuda) {
    out["peak_tflops"] = peak_tflops;
    out["mfu"] = model_flops_per_s / (peak_tflops * 1e12);
    out["micro_batch"] = o.micro_batch;
    out["seq_len"] = o.seq_len;
  }
  return out;
}
