// SPDX-License-Identifier: Apache-2.0
// `maestro export`: a trained section of a run, out as a Hugging Face
// checkpoint folder that other tools load (config.json + safetensors, sharded
// with model.safetensors.index.json when large).
//
// Owns: finding the run's plan and checkpoint (the last committed one, a
// committed step, or the initial weights of a `--steps 0` run), the
// config.json of the export (the section's own HF config when it has one,
// else one written from its ModelDesc), the dtype of each exported tensor,
// and writing the folder atomically (hf::WriteHfCheckpoint).
// A sharded checkpoint (format 2) is streamed: each global tensor is read
// from the slices the ranks wrote (any layout), converted and appended to
// its shard (hf::HfCheckpointWriter), one tensor in memory at a time. A
// format-1 `.mckpt` holds each section's whole model: it is loaded whole.
// Torch-free header; the .cc builds the model on libtorch.
// May call: runtime/section_runner, runtime/hf_weights, runtime/checkpointing,
// runtime/models, hf, datalayer, plan, base, nlohmann-json.
// Thread safety: one call at a time per destination.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::runtime {

struct ExportOptions {
  // A `maestro run -o` folder (plan.json and run/), or a run directory
  // (index.sqlite, checkpoints/) with plan.json beside it or in its parent.
  std::string run;
  std::string plan_path;  // "" = found from `run` as above
  std::string section;    // a training section of the plan
  std::string out_dir;    // the HF folder to write; must not exist
  // The committed checkpoint of this step; -1 = the last committed one, or
  // the initial weights (`maestro run --steps 0`) when none is committed.
  int64_t step = -1;
  // "auto": each tensor in the dtype the section's `weights` stored it in
  // (bit-for-bit round trips), F32 for a section without weights;
  // "bf16" | "fp16" | "fp32": every tensor in that dtype.
  std::string dtype = "auto";
  uint64_t max_shard_bytes = uint64_t{5} << 30;
};

struct ExportSummary {
  std::string plan_path, run_dir;
  std::string checkpoint;  // the file read
  int64_t step = -1;       // its last step (-1: the initial weights)
  std::string layout;      // hf::WeightLayoutName
  int64_t tensors = 0;
  uint64_t bytes = 0;  // tensor bytes written
  std::vector<std::string> files;
};

// Writes the export. Errors name what to fix: an unknown or forward-only
// section, a step with no committed checkpoint (listing the ones kept), a
// run with no checkpoint at all, an existing out_dir, a model with no
// published layout (Maestro's built-in ViT).
StatusOr<ExportSummary> ExportSectionToHf(const ExportOptions& options);

// The config.json of a decoder built from `desc` (Llama's, or Qwen2's when
// it has q/k/v biases): what an export writes for a section without an HF
// config of its own. `max_positions`: max_position_embeddings.
StatusOr<std::string> DecoderConfigJson(const plan::ModelDesc& desc, int64_t max_positions,
                                        const std::string& torch_dtype);

}  // namespace maestro::runtime
