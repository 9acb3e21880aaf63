// SPDX-License-Identifier: Apache-2.0
// Native-resolution images and a video through a Qwen2-VL-shaped workload
// (issue #42 item 1): a tiny Qwen2-VL tower (patch 4, 2x2 merge, temporal
// patch 2, 2-D RoPE) feeding an M-RoPE decoder, on a JSONL manifest whose
// PNG images keep their own sizes (6 sizes) and whose video (3 frames, padded to 2 temporal patches) sits
// at its own placeholder. The sectioned run (the ViT and the LLM on their
// own ranks, each sample's rows padded to seq_len on the edge) equals the
// one-process reference at every step within 1e-5 and its loss falls; every
// step line reports the ViT's real patch count (the sum of its samples'
// grids: no padding to a common size) and the LLM's real tokens.
// Two runs of 8 steps on 3 CPU ranks and one process (~4 s).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "datalayer/sample_index.h"
#include "plan/model_desc.h"
#include "plan/mrope.h"
#include "plan/native_vision.h"
#include "plan/plan.h"
#include "tests/fixtures/image_files.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kImageToken = 300, kVideoToken = 301;  // below the tiny decoder's vocabulary of 512
constexpr int64_t kPatch = 4, kMerge = 2, kFactor = kPatch * kMerge;
constexpr int64_t kSeqLen = 48;
constexpr int kSteps = 8;

// An image or a video of the manifest: its size in pixels (multiples of the
// 8-pixel merge window, inside the pixel bounds, so smart_resize keeps it)
// and, for a video, its frames.
struct Visual {
  int height = 0, width = 0, frames = 0;  // frames 0: an image
  int64_t tokens() const {
    const int64_t t = frames == 0 ? 1 : (frames + 1) / 2;
    return t * (height / kFactor) * (width / kFactor);
  }
  int64_t patches() const { return tokens() * kMerge * kMerge; }
};

// Six image sizes and one 3-frame video; samples cycle through
//   0: text, image A, text, image B, text
//   1: image C, image D (adjacent), text
//   2: text only
//   3: image E, the video, text
//   4: image F, text
// so a micro-batch of four samples holds several sizes, and a video, at once
// (runtime_vision_towers_test checks five sizes in one packed call).
const std::vector<Visual> kImages = {{16, 24}, {24, 40}, {32, 32}, {8, 56}, {40, 16}, {16, 16}};
const Visual kVideo{16, 24, 3};

// RGB pixels that differ by image and position.
std::vector<uint8_t> Pixels(int height, int width, int seed) {
  std::vector<uint8_t> rgb(static_cast<size_t>(height * width * 3));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        rgb[static_cast<size_t>((y * width + x) * 3 + c)] =
            static_cast<uint8_t>((x * (seed + 3) * 7 + y * 13 + c * 50 + seed * 31) % 256);
      }
    }
  }
  return rgb;
}

// What one manifest line carries (for the step lines' expected work).
struct LineWork {
  int64_t patches = 0, tokens = 0;
};

// <dir>/img/*.png, <dir>/video/*.png and <dir>/train.jsonl with `samples`
// lines as above; *work gets each line's real patches and tokens.
std::string WriteNativeManifest(const std::string& dir, int samples, std::vector<LineWork>* work) {
  fs::create_directories(dir + "/img");
  fs::create_directories(dir + "/video");
  for (size_t k = 0; k < kImages.size(); ++k) {
    const Visual& v = kImages[k];
    EXPECT_TRUE(
        testing::WriteBytes(dir + "/img/" + std::to_string(k) + ".png",
                            testing::EncodePng8(Pixels(v.height, v.width, static_cast<int>(k)), v.height, v.width, 3)));
  }
  for (int f = 0; f < kVideo.frames; ++f) {
    EXPECT_TRUE(testing::WriteBytes(
        dir + "/video/frame" + std::to_string(f) + ".png",
        testing::EncodePng8(Pixels(kVideo.height, kVideo.width, 20 + f), kVideo.height, kVideo.width, 3)));
  }
  std::ostringstream lines;
  for (int i = 0; i < samples; ++i) {
    std::vector<int64_t> ids{257};
    nlohmann::json images = nlohmann::json::array(), videos = nlohmann::json::array();
    LineWork w;
    auto image = [&](size_t k) {
      ids.insert(ids.end(), static_cast<size_t>(kImages[k].tokens()), kImageToken);
      images.push_back("img/" + std::to_string(k) + ".png");
      w.patches += kImages[k].patches();
    };
    auto text = [&](int n) {
      for (int t = 0; t < n; ++t) ids.push_back(10 + t);  // the same count in every line: learnable in a few steps
    };
    switch (i % 5) {
      case 0: text(2), image(0), text(3), image(1), text(2); break;
      case 1: image(2), image(3), text(5); break;
      case 2: text(20); break;
      case 3:
        image(4);
        ids.insert(ids.end(), static_cast<size_t>(kVideo.tokens()), kVideoToken);
        videos.push_back({{"folder", "video"}, {"fps", 2.0}});
        w.patches += kVideo.patches();
        text(4);
        break;
      default: image(5), text(6); break;
    }
    w.tokens = std::min<int64_t>(static_cast<int64_t>(ids.size()), kSeqLen);
    work->push_back(w);
    nlohmann::json line{{"input_ids", ids}};
    if (!images.empty()) line["images"] = images;
    if (!videos.empty()) line["videos"] = videos;
    lines << line.dump() << "\n";
  }
  const std::string path = dir + "/train.jsonl";
  EXPECT_TRUE(testing::WriteBytes(path, lines.str()));
  return path;
}

// specs/tiny_vlm.toml with its ViT made a tiny Qwen2-VL tower and its LLM an
// M-RoPE decoder, reading `manifest` at native resolution: the ViT on one
// rank (micro-batch 4), the LLM on two (DP 2, micro-batch 2).
plan::Plan NativePlan(const std::string& manifest) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_vlm.toml", compiler::Grouping::kSectioned);
  for (auto& s : p.sections) {
    s.init_from.clear();
    s.run_ahead = 0;
    if (s.model.kind == plan::ModelKind::kVit) {
      plan::ModelDesc& v = s.model;
      v.hidden = 32;
      v.heads = 2;
      v.kv_heads = 2;
      v.ffn_hidden = 64;
      v.patch_size = kPatch;
      v.image_size = 16;
      v.channels = 3;
      v.extra = {{plan::kVitLayoutKey, plan::kVitLayoutQwen2Vl},
                 {"spatial_merge", kMerge},
                 {"temporal_patch", 2},
                 {"merger_hidden", 4 * 32},
                 {"quick_gelu", 1},
                 {"layer_norm_eps", 1e-6},
                 {"cls_token", 0},
                 {"pos_embed", 0},
                 {"patch_bias", 0},
                 {"final_norm", 0}};
      runtime_testing::SetDegrees(s, {1, 1, 1, 1, 4});
    } else {
      // head_dim 32: 16 frequencies split 4 (time), 6 (height), 6 (width).
      s.model.extra[plan::kMropeSectionTKey] = 4;
      s.model.extra[plan::kMropeSectionHKey] = 6;
      s.model.extra[plan::kMropeSectionWKey] = 6;
      runtime_testing::SetDegrees(s, {1, 1, 1, 2, 2});
    }
  }
  runtime_testing::UseImageManifest(p, manifest, kImageToken, kSeqLen, 8);
  // K = 5 (a line holds at most 2 items): seq_len 48 is no multiple of it.
  // A native ViT's edge carries seq_len rows a sample, not K items' rows (the
  // decoder refused such rows before maestro-bench mix met it with K = 3).
  p.data.max_images_per_sample = 5;
  p.data.image_resolution = plan::kImageResolutionNative;
  p.data.image_min_pixels = 64;
  p.data.image_max_pixels = 64 * 64;
  p.data.video_token_id = kVideoToken;
  runtime_testing::PlaceOnThisMachine(p, kSteps);
  return p;
}

const runtime_testing::FreshDirs Fresh{"native_vision_run"};

TEST(NativeVisionRun, SectionedEqualsTheReferenceAndReportsRealPatches) {
  const std::string data = Fresh("data");
  std::vector<LineWork> work;
  const plan::Plan p = NativePlan(WriteNativeManifest(data, 40, &work));
  const std::string dir = Fresh("run");
  runtime_testing::ExpectRunEqualsReference("native", p, dir);
  // Each step line's ViT patches and LLM tokens: the sums over the step's
  // samples (sample i is manifest line i: no line is skipped).
  const std::string run_dir = dir + "/run";
  auto index = datalayer::SampleIndex::Open(run_dir + "/index.sqlite");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  int checked = 0;
  std::istringstream metrics(runtime_testing::ReadText(run_dir + "/metrics.jsonl"));
  for (std::string text; std::getline(metrics, text);) {
    const auto line = nlohmann::json::parse(text);
    if (!line.contains("step") || !line.contains("sections")) continue;
    auto record = (*index)->CommittedStep(line.at("step").get<int64_t>());
    ASSERT_TRUE(record.ok() && record->has_value()) << text;
    int64_t patches = 0, tokens = 0;
    for (int64_t id : (*record)->sample_ids) {
      patches += work.at(static_cast<size_t>(id)).patches;
      tokens += work.at(static_cast<size_t>(id)).tokens;
    }
    ASSERT_GT(patches, 0) << text;
    EXPECT_EQ(line.at("sections").at("vit").at("tokens").get<double>(), static_cast<double>(patches)) << text;
    EXPECT_EQ(line.at("sections").at("llm").at("tokens").get<double>(), static_cast<double>(tokens)) << text;
    ++checked;
  }
  EXPECT_EQ(checked, kSteps);
}

}  // namespace
}  // namespace maestro
