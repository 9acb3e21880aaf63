// SPDX-License-Identifier: Apache-2.0
// Multimodal RoPE (M-RoPE): the one home of the Qwen2-VL family's 3-D
// rotary positions.
//
// Owns: the decoder's M-RoPE keys (ModelDesc::extra), MropeOf (the section
// split of a head's frequencies between time, height and width, chunked as
// Qwen2-VL and Qwen2.5-VL or interleaved as Qwen3-VL), MropeFrequencyAxes
// (which of the three position rows each frequency reads), the LLM-side grid
// of a vision section's image (MropeImageGrid) and MropePositions, the
// position ids of one sample: transformers' Qwen2VLModel.get_rope_index
// (modeling_qwen2_vl.py). Text (and every other placeholder, such as audio)
// takes one position per token on all three rows; the tokens of an image
// of LLM grid (t, h, w) (after the tower's spatial merge) take
// (s + i_t, s + i_h, s + i_w) in row-major (t, h, w) order, s one past the
// largest position before it; the text after it continues from one past the
// image's largest position. A text-only sequence's positions are 0..T-1 on
// every row, so M-RoPE then equals 1-D RoPE.
// The rotary angle of frequency j at a token is position[axis(j)] *
// inv_freq[j]; the tables are cat(angles, angles) as for 1-D RoPE
// (runtime/models/decoder.h MakeMropeTables).
// docs/weights.md "### M-RoPE".
// May call: base, plan (model_desc). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::plan {

// Decoder keys: the config's rope_scaling.mrope_section [t, h, w] (counts of
// frequencies, summing to head_dim / 2) and, for Qwen3-VL,
// rope_scaling.mrope_interleaved. Absent (or all 0): plain 1-D RoPE.
inline constexpr const char* kMropeSectionTKey = "mrope_section_t";
inline constexpr const char* kMropeSectionHKey = "mrope_section_h";
inline constexpr const char* kMropeSectionWKey = "mrope_section_w";
inline constexpr const char* kMropeInterleavedKey = "mrope_interleaved";  // 0: chunked (Qwen2-VL), 1: Qwen3-VL
// Qwen2.5-VL's vision_config.tokens_per_second: a video's time row advances
// by seconds per temporal patch x this (0 or absent: by 1, Qwen2-VL).
inline constexpr const char* kMropeTokensPerSecondKey = "mrope_tokens_per_second";

struct Mrope {
  int64_t section[3] = {0, 0, 0};  // frequencies of time, height, width
  bool interleaved = false;
  int64_t tokens_per_second = 0;  // 0: a video's time row is its temporal patch index
};

// The decoder's M-RoPE, or nullopt for 1-D RoPE (no key, or every section 0).
std::optional<Mrope> MropeOf(const ModelDesc& desc);

// OK when desc has no M-RoPE, or its sections are >= 0 and sum to
// HeadDim(desc) / 2 (interleaved: each of h, w at most t, as Qwen3-VL's
// layout needs); otherwise InvalidArgument naming the keys. Called beside
// ValidateModelDesc where a decoder is imported (compiler/model.cc), checked
// for a plan (plan::CheckModelRuns) and built (runtime BuildDecoder).
Status CheckMrope(const ModelDesc& desc, const std::string& where);

// For each of the head's half_dim frequencies, the position row it reads
// (0 time, 1 height, 2 width). Chunked: the first section[0] frequencies
// read time, the next section[1] height, the last section[2] width
// (Qwen2-VL's split of cos/sin into mrope_section * 2 chunks, chunk i from
// row i % 3). Interleaved (Qwen3-VL's apply_interleaved_mrope): frequency j
// reads height when j % 3 == 1 and j < 3 * section[1], width when
// j % 3 == 2 and j < 3 * section[2], time otherwise.
// REQUIRES: the sections sum to half_dim.
std::vector<int> MropeFrequencyAxes(const Mrope& mrope, int64_t half_dim);

// An image's (or a video's) grid as the LLM sees it: t temporal patches, h x
// w merged patches; it holds t * h * w placeholder tokens.
struct LlmGrid {
  int64_t t = 1, h = 0, w = 0;
  bool video = false;        // a video's placeholders are the video token's
  double seconds_per_t = 0;  // a video's seconds per temporal patch (Qwen2.5-VL's time rows)
  int64_t tokens() const { return t * h * w; }
};

// The LLM grid of one still image from vision section `vit` (a ViT at its
// fixed image_size): (1, side / m, side / m), side = image_size /
// patch_size, m its spatial merge (1 without a merger); a still image is one
// temporal patch. InvalidArgument for a tower whose rows are no grid (CLIP's
// class token first).
StatusOr<LlmGrid> MropeImageGrid(const ModelDesc& vit);

// The vision section whose images reach decoder section `decoder` (through
// projectors), or nullptr when none does.
const SectionPlan* MropeVisionSection(const Plan& plan, const SectionPlan& decoder);

// Position ids of one sample of `length` tokens, row-major (3, length):
// out[r * length + i] is row r's position of token i. The sample's images,
// in order, have grids `images`; the k-th takes the images[k].tokens()
// tokens from the first `image_token_id` at or after the end of the previous
// one (as get_rope_index's input_tokens.index(image_token_id, st)).
// InvalidArgument when an image's tokens are not all placeholders or run
// past the end.
Status MropePositions(const int64_t* ids, int64_t length, int64_t image_token_id, const std::vector<LlmGrid>& images,
                      int64_t* out);

// The same with videos (get_rope_index's video branch): `items` are the
// sample's images and videos in placeholder order; an item with video set
// takes its tokens from the first `video_token_id` at or after the end of
// the previous item. A video's time row: i_t with tokens_per_second 0
// (Qwen2-VL); else i_t * trunc(seconds_per_t) * tokens_per_second, as
// transformers' Qwen2.5-VL computes it (its second_per_grid_t is cast to the
// index's int64 before the product, so 0.5 s per temporal patch reads 0).
// The text after an item continues one past its largest position on any row.
Status MropePositions(const int64_t* ids, int64_t length, int64_t image_token_id, int64_t video_token_id,
                      const std::vector<LlmGrid>& items, int64_t tokens_per_second, int64_t* out);

}  // namespace maestro::plan
