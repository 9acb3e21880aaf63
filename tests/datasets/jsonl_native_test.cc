// SPDX-License-Identifier: Apache-2.0
// JSONL manifests at native resolution (the Qwen2-VL family) on PNG/JPEG
// files this test writes: each image's placeholder run is as long as its own
// grid (worked by hand from smart_resize), back-to-back images are cut by
// their own lengths, videos (a frames list and a folder) take their own
// placeholder id and grid; the token counts the SampleIndex ingests; every
// refusal names manifest:line, the sample and the fix; JsonlSampleSource
// returns images and videos as native SampleImages in placeholder order,
// decodes every frame at Open and names a broken frame.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "datasets/image_decode.h"
#include "datasets/jsonl_manifest.h"
#include "datasets/jsonl_source.h"
#include "datasets/native_image.h"
#include "tests/datasets/jsonl_test_checks.h"
#include "tests/fixtures/image_files.h"
#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Ids = std::vector<int64_t>;

constexpr int64_t kImg = 150;
constexpr int64_t kVid = 151;
constexpr int64_t kAudio = 152;

// Grids (smart_resize with factor 28, 56*56 .. 28*28*16 pixels), by hand:
//   a.png 56x56   -> 56x56   -> 4x4 patches -> 4 tokens
//   b.png 56x112  -> 56x112  -> 4x8         -> 8 tokens
//   c.jpg 84x84   -> 84x84   -> 6x6         -> 9 tokens
//   d.png 30x40   -> round: 28x28 < 56*56 -> beta = sqrt(3136/1200),
//                    ceil(30*1.6166/28)*28 = 56, ceil(40*1.6166/28)*28 = 84 -> 4x6 -> 6 tokens
//   video v/f*.png 3 frames 56x84 -> 4x6, t = ceil(3/2) = 2 -> 12 tokens
//   folder clips/a: 4 frames 56x56 -> 4x4, t = 2 -> 8 tokens
constexpr int64_t kA = 4, kB = 8, kC = 9, kD = 6, kVideo = 12, kFolder = 8;

NativeVisionOptions Native() {
  NativeVisionOptions n;
  n.max_pixels = 28 * 28 * 16;
  return n;
}

JsonlManifestOptions Options() {
  JsonlManifestOptions o;
  o.seq_len = 64;
  o.vocab_size = 200;
  o.image_token_id = kImg;
  o.native_resolution = true;
  o.native = Native();
  o.video_token_id = kVid;
  return o;
}

using testing::Cat;
using testing::Repeat;

DecodedImage Pattern(int h, int w, int seed) {
  DecodedImage image;
  image.height = h;
  image.width = w;
  image.channels = 3;
  image.pixels.resize(static_cast<size_t>(h) * w * 3);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<uint8_t>((i * 7 + seed * 31) % 251);
  return image;
}

void WritePng(const std::string& path, int h, int w, int seed) {
  ASSERT_TRUE(testing::WriteBytes(path, testing::EncodePng8(Pattern(h, w, seed).pixels, h, w, 3)));
}

std::string Dir(const std::string& name) {
  const std::string dir = fixtures::ScratchDir("maestro-jsonl-native-", name);
  fs::create_directories(dir + "/img");
  fs::create_directories(dir + "/v");
  fs::create_directories(dir + "/clips/a");
  fs::create_directories(dir + "/clips/empty");
  WritePng(dir + "/img/a.png", 56, 56, 1);
  WritePng(dir + "/img/b.png", 56, 112, 2);
  EXPECT_TRUE(testing::WriteBytes(dir + "/img/c.jpg", testing::EncodeJpeg8(Pattern(84, 84, 3).pixels, 84, 84, 3)));
  WritePng(dir + "/img/d.png", 30, 40, 4);
  WritePng(dir + "/img/thin.png", 1, 250, 5);
  for (int f = 0; f < 3; ++f) WritePng(dir + "/v/f" + std::to_string(f) + ".png", 56, 84, 10 + f);
  // Sorted by name: f1, f10, f2, g3 (notes.txt is not a frame).
  for (const char* frame : {"f2.png", "f10.jpg", "f1.png", "g3.PNG"}) WritePng(dir + "/clips/a/" + frame, 56, 56, 20);
  EXPECT_TRUE(testing::WriteBytes(dir + "/clips/a/notes.txt", "not a frame"));
  EXPECT_TRUE(testing::WriteBytes(dir + "/clips/empty/notes.txt", "not a frame"));
  return dir;
}

std::string WriteManifest(const std::string& dir, const std::vector<json>& lines) {
  std::string text;
  for (const json& j : lines) text += j.dump() + "\n";
  const std::string path = dir + "/m.jsonl";
  EXPECT_TRUE(testing::WriteBytes(path, text));
  return path;
}

// Line 1: a, text, b. Line 2: b and a back to back. Line 3: a video (frames)
// then c. Line 4: a folder video, d.
std::vector<json> GoodLines() {
  return {
      {{"input_ids", Cat({{1}, Repeat(kImg, kA), {2, 3}, Repeat(kImg, kB), {4}})},
       {"images", {"img/a.png", "img/b.png"}},
       {"id", "two-sizes"}},
      {{"input_ids", Cat({{1}, Repeat(kImg, kB + kA), {5}})},
       {"images", {"img/b.png", "img/a.png"}},
       {"image_positions", {1, 1 + kB}}},
      {{"input_ids", Cat({{1}, Repeat(kVid, kVideo), {6}, Repeat(kImg, kC), {7}})},
       {"videos", {{{"frames", {"v/f0.png", "v/f1.png", "v/f2.png"}}, {"fps", 2.0}}}},
       {"images", {"img/c.jpg"}}},
      {{"input_ids", Cat({{1, 2}, Repeat(kImg, kD), Repeat(kVid, kFolder), {8}})},
       {"images", {"img/d.png"}},
       {"videos", {{{"folder", "clips/a"}, {"fps", 4.0}}}},
       {"video_positions", {2 + kD}}},
  };
}

TEST(JsonlNative, RunsAreEachImagesOwnGridAndVideosTheirs) {
  const std::string dir = Dir("good");
  auto m = JsonlManifest::Open(WriteManifest(dir, GoodLines()), Options());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 4);

  auto s0 = m->Sample(0);
  ASSERT_TRUE(s0.ok()) << s0.status().ToString();
  ASSERT_EQ(s0->image_runs.size(), 2u);
  EXPECT_EQ(s0->image_runs[0].start, 1);
  EXPECT_EQ(s0->image_runs[0].length, kA);
  EXPECT_EQ(s0->image_runs[1].start, 1 + kA + 2);
  EXPECT_EQ(s0->image_runs[1].length, kB);
  ASSERT_EQ(s0->image_grids.size(), 2u);
  EXPECT_EQ(s0->image_grids[1].h, 4);
  EXPECT_EQ(s0->image_grids[1].w, 8);
  EXPECT_EQ(s0->counts.image, kA + kB);
  EXPECT_EQ(s0->counts.images, 2);
  EXPECT_EQ(s0->counts.text, 4);
  EXPECT_TRUE(s0->videos.empty());

  auto s1 = m->Sample(1);  // back to back: one run of 12 cut 8 + 4
  ASSERT_TRUE(s1.ok());
  ASSERT_EQ(s1->image_runs.size(), 2u);
  EXPECT_EQ(s1->image_runs[0].start, 1);
  EXPECT_EQ(s1->image_runs[0].length, kB);
  EXPECT_EQ(s1->image_runs[1].start, 1 + kB);
  EXPECT_EQ(s1->image_runs[1].length, kA);

  auto s2 = m->Sample(2);
  ASSERT_TRUE(s2.ok());
  ASSERT_EQ(s2->videos.size(), 1u);
  EXPECT_EQ(s2->videos[0].frame_paths.size(), 3u);
  EXPECT_EQ(s2->videos[0].frame_paths[2], (fs::path(dir) / "v/f2.png").lexically_normal().string());
  EXPECT_DOUBLE_EQ(s2->videos[0].fps, 2.0);
  EXPECT_EQ(s2->videos[0].grid.t, 2);
  EXPECT_EQ(s2->videos[0].grid.h, 4);
  EXPECT_EQ(s2->videos[0].grid.w, 6);
  ASSERT_EQ(s2->video_runs.size(), 1u);
  EXPECT_EQ(s2->video_runs[0].start, 1);
  EXPECT_EQ(s2->video_runs[0].length, kVideo);
  EXPECT_EQ(s2->image_runs[0].start, 1 + kVideo + 1);
  EXPECT_EQ(s2->counts.image, kVideo + kC);
  EXPECT_EQ(s2->counts.images, 2);
  EXPECT_EQ(s2->counts.videos, 1);
  EXPECT_EQ(s2->counts.video_frames, 3);
  // Video placeholders take no loss, nor does predicting one.
  EXPECT_EQ(s2->target_ids[0], kJsonlIgnoreTarget);
  EXPECT_EQ(s2->target_ids[kVideo], kJsonlIgnoreTarget);

  auto s3 = m->Sample(3);
  ASSERT_TRUE(s3.ok());
  ASSERT_EQ(s3->videos.size(), 1u);
  std::vector<std::string> names;
  for (const std::string& f : s3->videos[0].frame_paths) names.push_back(fs::path(f).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"f1.png", "f10.jpg", "f2.png", "g3.PNG"}));
  EXPECT_EQ(s3->image_grids[0].h, 4);
  EXPECT_EQ(s3->image_grids[0].w, 6);
  EXPECT_EQ(s3->video_runs[0].start, 2 + kD);
  EXPECT_EQ(s3->counts.image, kD + kFolder);

  // What the SampleIndex ingests: the real visual tokens per sample.
  const std::vector<int64_t> want_image{kA + kB, kB + kA, kVideo + kC, kD + kFolder};
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(m->Counts(i).image, want_image[static_cast<size_t>(i)]) << i;
    EXPECT_EQ(m->Counts(i).images, 2) << i;
  }
  EXPECT_EQ(m->Counts(3).videos, 1);
  EXPECT_EQ(m->Counts(3).video_frames, 4);
}

// `path` cut right after what ReadImageSize reads (a PNG's chunks up to the
// first IDAT's header, a JPEG's markers through its SOS segment): its size
// still reads, its pixels no longer decode.
void KeepOnlyTheHeader(const fs::path& path) {
  const std::string bytes = fixtures::ReadFile(path.string());
  size_t keep = bytes.size();
  const size_t idat = bytes.find("IDAT");
  const size_t sos = bytes.find("\xFF\xDA");
  if (idat != std::string::npos) {
    keep = idat + 4;
  } else if (sos != std::string::npos && sos + 3 < bytes.size()) {
    keep = sos + 2 + ((static_cast<uint8_t>(bytes[sos + 2]) << 8) | static_cast<uint8_t>(bytes[sos + 3]));
  }
  ASSERT_LT(keep, bytes.size()) << path;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(keep));
}

// What an LLM section reads (SampleSource::LoadParts without pixels): every
// field Load sets but the pixels, from the images' headers alone (what the
// manifest read when it opened): with every image cut after its header, it
// still loads, while Load, which decodes, fails.
TEST(JsonlNative, WithoutPixelsEveryFieldButThePixelsFromTheHeadersAlone) {
  const std::string dir = Dir("layout");
  JsonlSourceOptions o;
  o.manifest = Options();
  o.max_images_per_sample = 2;
  auto source = JsonlSampleSource::Open(WriteManifest(dir, GoodLines()), o);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  MediaParts layout;
  layout.pixels = false;
  std::vector<SampleRecord> full;
  for (int64_t id = 0; id < 4; ++id) {
    auto r = (*source)->Load(Split::kTrain, id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    full.push_back(*std::move(r));
  }
  int cut = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {  // every image and frame
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".png" && ext != ".PNG" && ext != ".jpg")) continue;
    KeepOnlyTheHeader(entry.path());
    ++cut;
  }
  ASSERT_GE(cut, 8);
  for (int64_t id = 0; id < 4; ++id) {
    auto r = (*source)->LoadParts(Split::kTrain, id, layout);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const SampleRecord& want = full[static_cast<size_t>(id)];
    EXPECT_EQ(r->input_ids, want.input_ids);
    EXPECT_EQ(r->target_ids, want.target_ids);
    ASSERT_EQ(r->images.size(), want.images.size()) << id;
    for (size_t k = 0; k < want.images.size(); ++k) {
      const SampleImage& a = r->images[k];
      const SampleImage& b = want.images[k];
      EXPECT_TRUE(a.pixels.empty());
      EXPECT_EQ(std::make_tuple(a.channels, a.height, a.width, a.grid_t, a.grid_h, a.grid_w, a.patch_dim, a.video),
                std::make_tuple(b.channels, b.height, b.width, b.grid_t, b.grid_h, b.grid_w, b.patch_dim, b.video))
          << "sample " << id << " item " << k;
      EXPECT_DOUBLE_EQ(a.seconds_per_grid_t, b.seconds_per_grid_t);
    }
  }
  for (int64_t id = 0; id < 4; ++id) EXPECT_FALSE((*source)->Load(Split::kTrain, id).ok()) << "Load decodes " << id;
}

TEST(JsonlNative, SourceLoadsImagesAndVideosInPlaceholderOrder) {
  const std::string dir = Dir("source");
  JsonlSourceOptions o;
  o.manifest = Options();
  o.max_images_per_sample = 2;
  auto source = JsonlSampleSource::Open(WriteManifest(dir, GoodLines()), o);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const SampleSource& s = **source;
  ASSERT_EQ(s.NumSamples(Split::kTrain), 4);

  const auto image_of = [&](const std::string& rel) {
    auto decoded = DecodeImageFile(dir + "/" + rel);
    EXPECT_TRUE(decoded.ok());
    auto pre = PreprocessNativeImage(*decoded, Native());
    EXPECT_TRUE(pre.ok());
    return *pre;
  };
  auto r1 = s.Load(Split::kTrain, 1);  // b then a
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  ASSERT_EQ(r1->images.size(), 2u);
  EXPECT_EQ(r1->images[0].pixels, image_of("img/b.png").pixels);
  EXPECT_EQ(r1->images[1].pixels, image_of("img/a.png").pixels);
  EXPECT_EQ(r1->images[0].grid_w, 8);

  auto r2 = s.Load(Split::kTrain, 2);  // the video, then c
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  ASSERT_EQ(r2->images.size(), 2u);
  const SampleImage& video = r2->images[0];
  EXPECT_TRUE(video.video);
  EXPECT_EQ(video.grid_t, 2);
  EXPECT_EQ(video.grid_h, 4);
  EXPECT_EQ(video.grid_w, 6);
  EXPECT_DOUBLE_EQ(video.seconds_per_grid_t, 1.0);  // temporal 2 / fps 2
  std::vector<DecodedImage> frames;
  for (int f = 0; f < 3; ++f) frames.push_back(*DecodeImageFile(dir + "/v/f" + std::to_string(f) + ".png"));
  EXPECT_EQ(video.pixels, PreprocessNativeVideo(frames, 2.0, Native())->pixels);
  EXPECT_FALSE(r2->images[1].video);
  EXPECT_EQ(r2->images[1].grid_h, 6);
  EXPECT_EQ(r2->images[1].pixels, image_of("img/c.jpg").pixels);

  auto r3 = s.Load(Split::kTrain, 3);  // d, then the folder video
  ASSERT_TRUE(r3.ok());
  ASSERT_EQ(r3->images.size(), 2u);
  EXPECT_FALSE(r3->images[0].video);
  EXPECT_TRUE(r3->images[1].video);
  EXPECT_DOUBLE_EQ(r3->images[1].seconds_per_grid_t, 0.5);  // temporal 2 / fps 4

  const SampleTokens t = s.TokensOf(2);
  ASSERT_EQ(t.tokens.size(), 2u);
  EXPECT_EQ(t.tokens[1], std::make_pair(std::string("image"), kVideo + kC));

  // A video counts against max_images_per_sample.
  o.max_images_per_sample = 1;
  auto k1 = JsonlSampleSource::Open(dir + "/m.jsonl", o);
  ASSERT_FALSE(k1.ok());
  EXPECT_NE(k1.status().message().find("m.jsonl:1 (sample 0, id \"two-sizes\"): the line lists 2 images, more than"),
            std::string::npos)
      << k1.status().ToString();
  o.manifest.on_bad_sample = BadSamplePolicy::kSkip;
  auto skipped = JsonlSampleSource::Open(dir + "/m.jsonl", o);
  ASSERT_FALSE(skipped.ok());  // every line has 2 visual items
  EXPECT_NE(skipped.status().message().find("no sample to train on"), std::string::npos);
}

TEST(JsonlNative, ABrokenFrameIsNamedAtOpen) {
  const std::string dir = Dir("broken");
  ASSERT_TRUE(testing::WriteBytes(dir + "/v/f1.png", "GIF89a not a png"));
  JsonlSourceOptions o;
  o.manifest = Options();
  o.max_images_per_sample = 2;
  const std::string path = WriteManifest(dir, GoodLines());
  auto source = JsonlSampleSource::Open(path, o);
  ASSERT_FALSE(source.ok());
  const std::string msg = source.status().message();
  EXPECT_EQ(msg.rfind(path + ":3 (sample 2): videos[0] frame 1 (" + dir + "/v/f1.png): ", 0), 0u) << msg;
  EXPECT_NE(msg.find("a GIF image"), std::string::npos) << msg;
  o.manifest.on_bad_sample = BadSamplePolicy::kSkip;
  auto skip = JsonlSampleSource::Open(path, o);
  ASSERT_TRUE(skip.ok()) << skip.status().ToString();
  EXPECT_EQ((*skip)->NumSamples(Split::kTrain), 3);
  EXPECT_EQ((*skip)->SkippedSamples(), 1);
}

struct Refusal {
  std::string name;
  json line;
  std::string says;
  StatusCode code = StatusCode::kInvalidArgument;
};

std::vector<Refusal> Refusals() {
  const json one_frame = {{"frames", {"v/f0.png"}}, {"fps", 2.0}};  // 1 frame 56x84: t = 1, 6 tokens
  return {
      {"ImageRunTooShort",
       {{"input_ids", Cat({{1}, Repeat(kImg, kA + 1)})}, {"images", {"img/a.png"}}},
       "input_ids holds 5 image placeholder tokens (id 150), but the 1 image(s) of \"images\" need 4 (images[0] "
       "\"img/a.png\" needs 4)"},
      {"BackToBackCutWrong",
       {{"input_ids", Cat({{1}, Repeat(kImg, 6), {2}, Repeat(kImg, 6)})}, {"images", {"img/a.png", "img/b.png"}}},
       "images[1] \"img/b.png\" needs 8 placeholders in a row, but the run at input_ids[5] has 2 left of its 6"},
      {"ImagePositionsWrong",
       {{"input_ids", Cat({{1}, Repeat(kImg, kA)})}, {"images", {"img/a.png"}}, {"image_positions", {0}}},
       "image_positions[0] = 0, but image 0 (img/a.png)'s placeholders start at input_ids[1]"},
      {"ImageMissing",
       {{"input_ids", Cat({{1}, Repeat(kImg, kA)})}, {"images", {"img/none.png"}}},
       "images[0] \"img/none.png\" (",
       StatusCode::kNotFound},
      {"ImageAspectOver200",
       {{"input_ids", Cat({{1}, Repeat(kImg, kA)})}, {"images", {"img/thin.png"}}},
       "images[0] \"img/thin.png\" (1x250): absolute aspect ratio must be smaller than 200, got 250"},
      {"RunPastSeqLen",
       {{"input_ids", Cat({Repeat(1, 61), Repeat(kImg, kA)})}, {"images", {"img/a.png"}}},
       "the placeholder run [61, 65) of images[0] \"img/a.png\" reaches past the seq_len = 64 inputs"},
      {"VideoRunWrong",
       {{"input_ids", Cat({{1}, Repeat(kVid, 7)})}, {"videos", {one_frame}}},
       "input_ids holds 7 video placeholder tokens (id 151), but the 1 video(s) of \"videos\" need 6"},
      {"VideoPositionsWrong",
       {{"input_ids", Cat({{1}, Repeat(kVid, 6)})}, {"videos", {one_frame}}, {"video_positions", {3}}},
       "video_positions[0] = 3, but video 0 (videos[0])'s placeholders start at input_ids[1]"},
      {"VideosNotArray", {{"input_ids", {1}}, {"videos", "v"}}, "\"videos\" is the string \"v\", not an array"},
      {"VideoNotObject", {{"input_ids", {1}}, {"videos", {"v/f0.png"}}}, "videos[0] is the string"},
      {"VideoBoth",
       {{"input_ids", {1}}, {"videos", {{{"frames", {"v/f0.png"}}, {"folder", "v"}, {"fps", 2}}}}},
       "videos[0] has both of \"frames\" and \"folder\""},
      {"VideoNeither", {{"input_ids", {1}}, {"videos", {{{"fps", 2}}}}}, "videos[0] has neither of"},
      {"VideoUnknownKey",
       {{"input_ids", {1}}, {"videos", {{{"frames", {"v/f0.png"}}, {"fps", 2}, {"rate", 2}}}}},
       "videos[0] has the unknown key \"rate\""},
      {"VideoNoFps", {{"input_ids", {1}}, {"videos", {{{"frames", {"v/f0.png"}}}}}}, "videos[0].fps is missing"},
      {"VideoZeroFps",
       {{"input_ids", {1}}, {"videos", {{{"frames", {"v/f0.png"}}, {"fps", 0}}}}},
       "videos[0].fps is 0, not a number > 0"},
      {"VideoNoFrames",
       {{"input_ids", {1}}, {"videos", {{{"frames", json::array()}, {"fps", 2}}}}},
       "videos[0].frames is an array of 0, not a non-empty array of paths"},
      {"VideoFrameNotString",
       {{"input_ids", {1}}, {"videos", {{{"frames", {3}}, {"fps", 2}}}}},
       "videos[0].frames[0] is 3, not a path string"},
      {"VideoFrameMissing",
       {{"input_ids", {1}}, {"videos", {{{"frames", {"v/f0.png", "v/nope.png"}}, {"fps", 2}}}}},
       "videos[0].frames[1] \"v/nope.png\"",
       StatusCode::kNotFound},
      {"VideoFrameOutside",
       {{"input_ids", {1}}, {"videos", {{{"frames", {"../x.png"}}, {"fps", 2}}}}},
       "videos[0].frames[0] \"../x.png\" leaves the manifest's folder"},
      {"VideoFolderEmpty",
       {{"input_ids", {1}}, {"videos", {{{"folder", "clips/empty"}, {"fps", 2}}}}},
       "videos[0].folder \"clips/empty\" ("},
      {"VideoFolderMissing",
       {{"input_ids", {1}}, {"videos", {{{"folder", "clips/none"}, {"fps", 2}}}}},
       "is not a folder",
       StatusCode::kNotFound},
  };
}

TEST(JsonlNative, EveryRefusalNamesTheLineAndTheFix) {
  const std::string dir = Dir("refusals");
  for (const Refusal& r : Refusals()) {
    SCOPED_TRACE(r.name);
    const std::string path = WriteManifest(dir, {{{"input_ids", {1, 2}}}, r.line});
    auto s = testing::ExpectSecondLineRefused(path, Options(), r.code, r.says);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->size(), 1);
  }
  // The empty folder's message says what a frame is.
  const std::string path =
      WriteManifest(dir, {{{"input_ids", {1}}, {"videos", {{{"folder", "clips/empty"}, {"fps", 2}}}}}});
  auto m = JsonlManifest::Open(path, Options());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("holds no .jpg, .jpeg or .png frame"), std::string::npos);
}

TEST(JsonlNative, NativeReadsImageSizesEvenWithoutTheExistenceCheck) {
  const std::string dir = Dir("nocheck");
  JsonlManifestOptions o = Options();
  o.check_images_exist = false;
  const std::string path =
      WriteManifest(dir, {{{"input_ids", Cat({{1}, Repeat(kImg, kA)})}, {"images", {"img/gone.png"}}}});
  auto m = JsonlManifest::Open(path, o);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
}

TEST(JsonlNative, VideosNeedAVideoTokenAndNativeResolution) {
  const std::string dir = Dir("novideo");
  const json video_line = {{"input_ids", Cat({{1}, Repeat(kVid, 6)})},
                           {"videos", {{{"frames", {"v/f0.png"}}, {"fps", 2.0}}}}};
  const std::string path = WriteManifest(dir, {video_line});
  JsonlManifestOptions o = Options();
  o.video_token_id = -1;
  auto m = JsonlManifest::Open(path, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("the line lists 1 video(s), but the model takes none (no video_token_id); set "
                                      "[data] native_resolution and video_token_id"),
            std::string::npos)
      << m.status().ToString();
  // A fixed-grid manifest refuses videos the same way.
  JsonlManifestOptions fixed;
  fixed.seq_len = 64;
  fixed.vocab_size = 200;
  fixed.image_token_id = kImg;
  fixed.tokens_per_image = 4;
  auto f = JsonlManifest::Open(path, fixed);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("no video_token_id"), std::string::npos) << f.status().ToString();
}

TEST(JsonlNative, OptionsAreChecked) {
  const std::string dir = Dir("options");
  const std::string path = WriteManifest(dir, {{{"input_ids", {1}}}});
  const auto fails = [&](const JsonlManifestOptions& o, const std::string& says) {
    testing::ExpectOptionsRefused(path, o, says);
  };
  JsonlManifestOptions o = Options();
  o.tokens_per_image = 4;
  fails(o, "tokens_per_image = 4 is unused with native_resolution");
  o = Options();
  o.native_resolution = false;
  o.tokens_per_image = 4;
  fails(o, "video_token_id = 151 needs native_resolution");
  o = Options();
  o.video_token_id = kImg;
  fails(o, "video_token_id 150 is also the image placeholder id");
  o = Options();
  o.audio_token_id = kAudio;
  o.tokens_per_audio = 2;
  o.video_token_id = kAudio;
  fails(o, "video_token_id 152 is also the audio placeholder id");
  o = Options();
  o.video_token_id = 200;
  fails(o, "video_token_id 200 is outside the vocabulary");
  o = Options();
  o.native.merge = 0;
  fails(o, "merge = 0 must be in [1, 64]");
  o = Options();
  o.native.min_pixels = 10;
  o.native.max_pixels = 5;
  fails(o, "min_pixels = 10 and max_pixels = 5");
  o = Options();
  o.image_token_id = -1;  // a video-only model
  EXPECT_TRUE(JsonlManifest::Open(path, o).ok());
}

}  // namespace
}  // namespace maestro::datasets
