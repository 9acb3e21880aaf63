// SPDX-License-Identifier: Apache-2.0
// datasets::JsonlSampleSource on manifests and PNG/JPEG files this test writes
// itself (libpng / libjpeg encoders): records with 0, 1 and 2 images
// (decoded, resized, normalised), token counts per modality ingested by the
// real SampleIndex; every bad input (a missing image, one that does not
// decode, more images than max_images_per_sample, a line with a bad shape, a
// token id at or above the vocabulary) is an error naming the manifest, the
// line and the sample, or under kSkip a skipped and counted line; an image
// broken after Open is an error of Load naming the file and the sample.
#include "datasets/jsonl_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datalayer/sample_index.h"
#include "tests/fixtures/image_files.h"
#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::EncodeJpeg8;
using testing::EncodePng8;
using testing::SolidPixels;
using testing::WriteBytes;

constexpr int64_t kImageToken = 63;
constexpr int64_t kTokensPerImage = 2;

// <test-tmp>/maestro-jsonl-source-<pid>/<name>, emptied, with an empty img/ in it.
std::string ScratchDir(const std::string& name) {
  const std::string dir = fixtures::ScratchDir("maestro-jsonl-source-", name);
  fs::create_directories(dir + "/img");
  return dir;
}

JsonlSourceOptions TinyOptions() {
  JsonlSourceOptions o;
  o.manifest.seq_len = 12;
  o.manifest.vocab_size = 64;
  o.manifest.image_token_id = kImageToken;
  o.manifest.tokens_per_image = kTokensPerImage;
  o.image.channels = 3;
  o.image.height = o.image.width = 4;
  o.image.mean = {0.0f, 0.0f, 0.0f};  // pixels come out as x / 255
  o.image.std = {1.0f, 1.0f, 1.0f};
  o.max_images_per_sample = 2;
  return o;
}

// A red PNG (8x8, resized to 4x4), a green JPEG and a gray PNG.
void WriteImages(const std::string& dir) {
  ASSERT_TRUE(WriteBytes(dir + "/img/red.png", EncodePng8(SolidPixels(8, 8, 3, 255, 0, 0), 8, 8, 3)));
  ASSERT_TRUE(WriteBytes(dir + "/img/green.jpg", EncodeJpeg8(SolidPixels(8, 8, 3, 0, 200, 0), 8, 8, 3)));
  ASSERT_TRUE(WriteBytes(dir + "/img/gray.png", EncodePng8(SolidPixels(4, 4, 1, 51), 4, 4, 1)));
}

std::string Line(std::vector<int64_t> ids, std::vector<std::string> images, const std::string& user_id = "") {
  json j{{"input_ids", ids}};
  if (!images.empty()) j["images"] = images;
  if (!user_id.empty()) j["id"] = user_id;
  return j.dump() + "\n";
}

std::string WriteManifest(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/train.jsonl";
  EXPECT_TRUE(WriteBytes(path, text));
  return path;
}

const std::string kNoImage = Line({1, 2, 3, 4, 5}, {}, "text-only");
const std::string kOneImage = Line({1, kImageToken, kImageToken, 6, 7, 8}, {"img/red.png"}, "one");
const std::string kTwoImages =
    Line({1, kImageToken, kImageToken, 9, kImageToken, kImageToken, 10, 11}, {"img/green.jpg", "img/gray.png"}, "two");

float Pixel(const SampleImage& image, int c, int y, int x) {
  return image.pixels[static_cast<size_t>((c * image.height + y) * image.width + x)];
}

TEST(JsonlSource, RecordsCarryTokensTargetsAndDecodedImagesPerSample) {
  const std::string dir = ScratchDir("good");
  WriteImages(dir);
  const std::string path = WriteManifest(dir, kNoImage + kOneImage + kTwoImages);
  auto source = JsonlSampleSource::Open(path, TinyOptions());
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const SampleSource& s = **source;
  ASSERT_EQ(s.NumSamples(Split::kTrain), 3);
  EXPECT_EQ(s.NumSamples(Split::kTest), 0);
  EXPECT_EQ(s.SkippedSamples(), 0);

  const std::vector<int64_t> want_images{0, 1, 2};
  for (int64_t id = 0; id < 3; ++id) {
    auto r = s.Load(Split::kTrain, id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->id, id);
    ASSERT_EQ(r->input_ids.size(), 12u);
    ASSERT_EQ(r->target_ids.size(), 12u);
    ASSERT_EQ(static_cast<int64_t>(r->images.size()), want_images[static_cast<size_t>(id)]) << id;
    EXPECT_EQ((*source)->ImagesOf(id), want_images[static_cast<size_t>(id)]);
    for (const auto& image : r->images) {
      EXPECT_EQ(image.channels, 3);
      EXPECT_EQ(image.height, 4);
      EXPECT_EQ(image.width, 4);
      EXPECT_EQ(image.pixels.size(), 3u * 4 * 4);
    }
    // The manifest's inputs and targets, untouched.
    auto m = (*source)->manifest().Sample(id);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(r->input_ids, m->input_ids);
    EXPECT_EQ(r->target_ids, m->target_ids);
  }
  // Sample 1: red (PNG is exact); sample 2: green JPEG (within the codec's
  // tolerance), then gray replicated to R = G = B, in placeholder order.
  auto one = s.Load(Split::kTrain, 1);
  auto two = s.Load(Split::kTrain, 2);
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_FLOAT_EQ(Pixel(one->images[0], 0, 2, 3), 1.0f);
  EXPECT_FLOAT_EQ(Pixel(one->images[0], 1, 2, 3), 0.0f);
  EXPECT_NEAR(Pixel(two->images[0], 1, 1, 1), 200.0f / 255.0f, 3.0f / 255.0f);
  EXPECT_NEAR(Pixel(two->images[0], 0, 1, 1), 0.0f, 3.0f / 255.0f);
  for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(Pixel(two->images[1], c, 0, 0), 51.0f / 255.0f);
  // Image positions take no loss, nor does predicting one.
  EXPECT_EQ(one->target_ids[0], -100);  // predicts a placeholder
  EXPECT_EQ(one->target_ids[1], -100);
  EXPECT_EQ(one->target_ids[2], -100);
  EXPECT_EQ(one->target_ids[3], 7);

  // Token counts per modality: text = non-placeholder inputs, image = placeholders.
  const std::vector<std::pair<int64_t, int64_t>> want{{5, 0}, {4, 2}, {4, 4}};
  for (int64_t id = 0; id < 3; ++id) {
    const SampleTokens t = s.TokensOf(id);
    EXPECT_EQ(t.location, (*source)->manifest().Location(id));
    ASSERT_FALSE(t.tokens.empty());
    EXPECT_EQ(t.tokens[0], (std::pair<std::string, int64_t>{"text", want[static_cast<size_t>(id)].first}));
    if (want[static_cast<size_t>(id)].second == 0) {
      EXPECT_EQ(t.tokens.size(), 1u) << "no image token count for a text-only sample";
    } else {
      ASSERT_EQ(t.tokens.size(), 2u);
      EXPECT_EQ(t.tokens[1], (std::pair<std::string, int64_t>{"image", want[static_cast<size_t>(id)].second}));
    }
  }
  // What the SampleIndex ingests: the same counts per sample.
  const std::string index_manifest = dir + "/index.jsonl";
  ASSERT_TRUE(datasets::WriteManifest(s, index_manifest).ok());
  auto index = datalayer::SampleIndex::Open(dir + "/index.sqlite");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_TRUE((*index)->IngestManifest(index_manifest).ok());
  auto infos = (*index)->GetSamples({0, 1, 2});
  ASSERT_TRUE(infos.ok()) << infos.status().ToString();
  for (int64_t id = 0; id < 3; ++id) {
    const auto& tokens = (*infos)[static_cast<size_t>(id)].tokens;
    EXPECT_EQ(tokens.at("text"), want[static_cast<size_t>(id)].first);
    const auto image = tokens.find("image");
    EXPECT_EQ(image == tokens.end() ? 0 : image->second, want[static_cast<size_t>(id)].second) << id;
  }
}

struct BadCase {
  std::string what;
  std::string line;                // the bad line, written as line 2 after kOneImage
  std::vector<std::string> words;  // in the message besides "train.jsonl:2 (sample 1"
};

std::vector<BadCase> BadCases(const std::string& dir) {
  EXPECT_TRUE(WriteBytes(dir + "/img/not_an_image.png", "hello, I am text"));
  const std::string png = EncodePng8(SolidPixels(8, 8, 3, 1, 2, 3), 8, 8, 3);
  EXPECT_TRUE(WriteBytes(dir + "/img/truncated.png", png.substr(0, png.size() / 2)));
  return {
      {"missing image",
       Line({1, kImageToken, kImageToken, 2}, {"img/missing.png"}, "m"),
       {"img/missing.png", "does not exist", "id \"m\""}},
      {"not an image",
       Line({1, kImageToken, kImageToken, 2}, {"img/not_an_image.png"}),
       {"images[0]", "not_an_image.png", "on_bad_sample"}},
      {"truncated PNG", Line({1, kImageToken, kImageToken, 2}, {"img/truncated.png"}), {"images[0]", "truncated.png"}},
      {"too many images",
       Line({kImageToken, kImageToken, kImageToken, kImageToken, kImageToken, kImageToken, 5},
            {"img/red.png", "img/red.png", "img/red.png"}),
       {"3 images", "max_images_per_sample = 2"}},
      {"labels of another length",
       json{{"input_ids", {1, 2, 3}}, {"labels", {1, 2}}}.dump() + "\n",
       {"\"labels\"", "3 tokens"}},
      {"placeholders without an image", Line({1, kImageToken, kImageToken, 2}, {}), {"placeholder"}},
      {"token at the vocabulary", Line({1, 64, 2}, {}), {"input_ids[1] = 64", "vocabulary"}},
  };
}

TEST(JsonlSource, EveryBadSampleIsAnErrorNamingTheFileTheLineAndTheSample) {
  const std::string dir = ScratchDir("bad");
  WriteImages(dir);
  for (const BadCase& c : BadCases(dir)) {
    const std::string path = WriteManifest(dir, kOneImage + c.line + kTwoImages);
    auto source = JsonlSampleSource::Open(path, TinyOptions());
    ASSERT_FALSE(source.ok()) << c.what;
    const std::string m = source.status().message();
    EXPECT_NE(m.find(path + ":2 (sample 1"), std::string::npos) << c.what << ": " << m;
    for (const auto& w : c.words) EXPECT_NE(m.find(w), std::string::npos) << c.what << ": " << m;
  }
}

TEST(JsonlSource, SkipModeLeavesBadSamplesOutCountsThemAndKeepsIdsDense) {
  const std::string dir = ScratchDir("skip");
  WriteImages(dir);
  const auto cases = BadCases(dir);
  std::string text = kNoImage;                             // line 1
  for (const auto& c : cases) text += c.line + kOneImage;  // bad lines 2, 4, ...; good 3, 5, ...
  text += kTwoImages;
  const std::string path = WriteManifest(dir, text);
  JsonlSourceOptions o = TinyOptions();
  o.manifest.on_bad_sample = BadSamplePolicy::kSkip;
  auto source = JsonlSampleSource::Open(path, o);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const int64_t bad = static_cast<int64_t>(cases.size());
  EXPECT_EQ((*source)->SkippedSamples(), bad);
  ASSERT_EQ((*source)->NumSamples(Split::kTrain), bad + 2);
  std::vector<int64_t> skipped_lines;
  for (const auto& s : (*source)->skipped()) {
    skipped_lines.push_back(s.line);
    EXPECT_NE(s.status.message().find(path + ":" + std::to_string(s.line)), std::string::npos) << s.status.message();
  }
  std::sort(skipped_lines.begin(), skipped_lines.end());
  for (int64_t k = 0; k < bad; ++k) EXPECT_EQ(skipped_lines[static_cast<size_t>(k)], 2 + 2 * k);
  // Ids are dense over the kept lines, in file order: 1, 3, 5, ..., last.
  for (int64_t id = 0; id < (*source)->NumSamples(Split::kTrain); ++id) {
    const int64_t line = id == 0 ? 1 : (id <= bad ? 1 + 2 * id : 2 * bad + 2);
    EXPECT_EQ((*source)->TokensOf(id).location, (*source)->manifest().absolute_path() + ":" + std::to_string(line));
    auto r = (*source)->Load(Split::kTrain, id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(static_cast<int64_t>(r->images.size()), id == 0 ? 0 : (id == bad + 1 ? 2 : 1)) << id;
  }
}

TEST(JsonlSource, AnImageBrokenAfterOpenIsALoadErrorNamingTheFileAndTheSample) {
  const std::string dir = ScratchDir("broken_later");
  WriteImages(dir);
  const std::string path = WriteManifest(dir, kNoImage + kTwoImages);
  auto source = JsonlSampleSource::Open(path, TinyOptions());
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ASSERT_TRUE(WriteBytes(dir + "/img/gray.png", "\x89PNG\r\n\x1a\n garbage"));
  auto r = (*source)->Load(Split::kTrain, 1);
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find(path + ":2 (sample 1, id \"two\")"), std::string::npos) << m;
  EXPECT_NE(m.find("images[1]"), std::string::npos) << m;
  EXPECT_NE(m.find("gray.png"), std::string::npos) << m;
  fs::remove(dir + "/img/green.jpg");
  auto gone = (*source)->Load(Split::kTrain, 1);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("green.jpg"), std::string::npos) << gone.status().message();
  EXPECT_TRUE((*source)->Load(Split::kTrain, 0).ok()) << "a sample without images still loads";
  EXPECT_FALSE((*source)->Load(Split::kTrain, 2).ok());
  EXPECT_FALSE((*source)->Load(Split::kTest, 0).ok());
}

TEST(JsonlSource, AManifestWithNothingLeftOrBadOptionsIsRefused) {
  const std::string dir = ScratchDir("empty");
  WriteImages(dir);
  JsonlSourceOptions o = TinyOptions();
  o.manifest.on_bad_sample = BadSamplePolicy::kSkip;
  const std::string path = WriteManifest(dir, Line({1, 99}, {}));
  auto none = JsonlSampleSource::Open(path, o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no sample to train on"), std::string::npos) << none.status().message();
  o = TinyOptions();
  o.max_images_per_sample = 0;
  auto zero = JsonlSampleSource::Open(WriteManifest(dir, kOneImage), o);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("max_images_per_sample"), std::string::npos);
  o = TinyOptions();
  o.image.std = {1.0f, 0.0f, 1.0f};
  auto bad_std = JsonlSampleSource::Open(WriteManifest(dir, kOneImage), o);
  ASSERT_FALSE(bad_std.ok());
  EXPECT_NE(bad_std.status().message().find("std"), std::string::npos) << bad_std.status().message();
}

}  // namespace
}  // namespace maestro::datasets
