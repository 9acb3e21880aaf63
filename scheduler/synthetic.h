// SPDX-License-Identifier: Apache-2.0
// Synthetic scheduling problems for tests and benchmarks: multimodal-LLM
// shaped section graphs (vision encoder -> projector -> LLM, audio encoder ->
// audio projector -> LLM, a frozen teacher -> LLM) with DP degrees sized by
// expected load under the fan-out rule, a LinearCostModel, and random global
// batches with a given image ratio. Deterministic in the seeds.
//
// May call: scheduler/problem.h. Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "scheduler/problem.h"

namespace maestro::scheduler {

struct SyntheticPlanOptions {
  int sections = 2;           // 2..6
  int max_fanout = 2;         // 1..4: the largest DP ratio on an edge
  bool random_modes = false;  // encoders/projectors train or are frozen at random
  uint64_t seed = 1;
};

struct SyntheticBatchOptions {
  int samples = 256;
  double image_ratio = 0.5;   // share of samples with an image
  double audio_ratio = 0.25;  // share with audio (plans with an audio branch)
  // 1: modalities drawn per sample (i.i.d. data order). R > 1: drawn per run
  // of R consecutive samples, as when a batch is read from shards of one
  // source each (images come in bursts).
  int run_length = 1;
  // Images per image-bearing sample: 1 with probability 1/2, 2 with 1/4, ...
  // truncated at max_images (the last count takes the remaining mass); each
  // image's tokens drawn independently. 1 = one image per sample.
  int max_images = 1;
  // Every sample's text, image and audio token counts set to the means of
  // the realistic distributions (844, 625 per image, 500): the same samples
  // and modalities, no length heterogeneity. For comparison only.
  bool uniform_lengths = false;
  uint64_t seed = 1;
};

// The plan part of a problem (modality names, sections, edges, costs); no samples.
Problem MakeSyntheticPlan(const SyntheticPlanOptions& options);
// A random global batch for `plan` (ids unique within the batch).
std::vector<Sample> MakeSyntheticBatch(const Problem& plan, const SyntheticBatchOptions& options);

}  // namespace maestro::scheduler
