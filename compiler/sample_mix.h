// SPDX-License-Identifier: Apache-2.0
// What the samples that carry a modality hold, as a spec describes them
// ([[data.modality.mix]]), and what each costs its encoder: the one home of
// the per-sample encoder work the planner prices and the step simulation
// draws (issue #42 item 6).
//
// A mix lists kinds of sample, each drawn with its weight: `count` items
// (images, videos, audio clips) of `height` x `width` pixels (native
// resolution: each image at its smart_resize size), videos of `frames`
// frames. Each kind costs the encoder its own patches and its own attention:
// one sequence per image (per temporal patch of a video, as HF's cu_seqlens;
// window attention where the tower has it, plan::SequenceForwardFlops).
// The planner prices the MEAN sample (its patches, and the attention context
// that gives the mean's attention FLOPs), so every analytic price is the
// expectation; the simulation draws each sample's kind and charges its
// work relative to that mean; memory is priced at the PEAK kind (a
// micro-batch of the largest samples must fit).
//
// Owns: MixWork and MixWorkOf (a mix -> the shapes, the mean, the peak, the
// draw's cumulative shares), ShapeOfMixEntry, DrawMixEntry (a sample's kind:
// a pure function of the seed, the sample id and the modality, so the
// simulation's samples and its costs agree without carrying it).
// May call: base, plan (model_desc, model_flops, native_vision, smart_resize),
// compiler/spec_types.h (MixEntry). Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/spec_types.h"
#include "plan/model_desc.h"

namespace maestro::compiler {

// The encoder this mix feeds and how its items are read.
struct MixEncoder {
  plan::ModelDesc desc;    // a ViT or an audio encoder
  bool native = false;     // native-resolution images ([data] image_resolution)
  int64_t min_pixels = 0;  // smart_resize's bounds (native)
  int64_t max_pixels = 0;
  int64_t max_items = 1;  // K: max_images_per_sample / max_audios_per_sample (fixed-size items)
  int64_t seq_len = 0;    // the LLM's sequence: a sample's placeholders fit in it
};

// What one kind of sample costs its encoder and brings its LLM.
struct SampleShape {
  int64_t encoder_tokens = 0;    // patches (audio frames) the encoder reads
  int64_t llm_tokens = 0;        // rows handed on (placeholders in the LLM's sequence)
  int64_t longest_sequence = 0;  // its longest attention sequence
  double forward_flops = 0;      // the encoder's forward FLOPs on it
};

// One entry's shape. InvalidArgument (naming the entry's line) when the
// entry does not fit the encoder: sizes or frames on a fixed-size encoder,
// videos on an audio encoder, more fixed-size items than K, placeholders
// past seq_len, a size smart_resize refuses.
StatusOr<SampleShape> ShapeOfMixEntry(const MixEntry& entry, const MixEncoder& encoder, const std::string& path);

struct MixWork {
  std::vector<double> cdf;            // cumulative share of each entry (the last is 1)
  std::vector<SampleShape> shapes;    // per entry
  std::vector<double> relative_work;  // per entry: forward FLOPs / the mean sample's
  double mean_encoder_tokens = 0;     // E[patches]
  double mean_llm_tokens = 0;         // E[placeholders]
  double mean_forward_flops = 0;      // E[forward FLOPs]
  int64_t attention_context = 0;      // the context at which mean tokens give the mean FLOPs
  int64_t peak_encoder_tokens = 0;    // the largest entry's (memory)
  int64_t peak_sequence = 0;          // the longest attention sequence of any entry
  bool empty() const { return shapes.empty(); }
};

// The mix's work on `encoder`; an empty mix gives an empty MixWork.
StatusOr<MixWork> MixWorkOf(const std::vector<MixEntry>& mix, const MixEncoder& encoder, const std::string& path);

// The mix of modality `name` as `spec`'s encoder of it reads it: an empty
// MixWork when the modality has no mix; InvalidArgument when it has one but
// no ViT or audio-encoder section activates on it, or an entry does not fit.
StatusOr<MixWork> ModalityMixWork(const Spec& spec, const std::string& name);

// After the spec is read and its graph checked: each mixed modality's
// `tokens` becomes its mix's mean placeholders (rounded), what plan.json and
// the LLM's pricing read; errors name the entry.
Status ResolveModalityMixes(Spec& spec);

// What the simulation draws for one mixed modality: each entry's share and
// its placeholders.
struct ModalityDraws {
  std::string modality;
  std::vector<double> cdf;
  std::vector<int64_t> llm_tokens;
};
std::vector<ModalityDraws> DrawsOf(const Spec& spec);

// The entry sample `sample_id` of modality bit `modality` draws under
// `seed` (an index into cdf; 0 for an empty cdf).
int DrawMixEntry(const std::vector<double>& cdf, uint64_t seed, uint64_t sample_id, int modality);

}  // namespace maestro::compiler
