// SPDX-License-Identifier: Apache-2.0
// JSONL manifests of pretokenized multimodal samples (datasets/jsonl_manifest.h):
// samples with 0, 1 and 3 images worked by hand (inputs, targets, padding,
// runs, counts), the index manifest the datalayer's SampleIndex ingests, every
// bad line Open must refuse with a message naming the file and the line, the
// kSkip policy, in-place edits after Open, and a 50k-line manifest (timed and
// measured, nothing asserted about time).
#include "datasets/jsonl_manifest.h"

#include <gtest/gtest.h>
#include <png.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "datalayer/sample_index.h"
#include "datasets/image_decode.h"
#include "tests/datasets/jsonl_test_checks.h"
#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Ids = std::vector<int64_t>;
constexpr int64_t kIg = kJsonlIgnoreTarget;

// The options of most tests: a tiny model whose image token is 99 and whose
// vision tower gives 3 embeddings per image.
constexpr int64_t kSeqLen = 16;
constexpr int64_t kVocab = 100;
constexpr int64_t kImg = 99;
constexpr int64_t kTpi = 3;
constexpr int64_t kPadId = 0;

JsonlManifestOptions TinyOptions() {
  JsonlManifestOptions o;
  o.seq_len = kSeqLen;
  o.vocab_size = kVocab;
  o.image_token_id = kImg;
  o.tokens_per_image = kTpi;
  o.pad_id = kPadId;
  return o;
}

// This file's scratch folders: <test-tmp>/maestro-jsonl-<pid>/<name> (fixtures::ScratchDir).
constexpr char kScratch[] = "maestro-jsonl-";

void Spit(const std::string& path, const std::string& bytes) {
  ASSERT_TRUE(fixtures::WriteFile(path, bytes)) << path;
}

void PngAppend(png_structp png, png_bytep data, size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}
void PngFlush(png_structp /*png*/) {}

// A 4x4 RGB PNG of one colour, written with libpng.
void WritePng(const std::string& path, uint8_t r, uint8_t g, uint8_t b) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, PngAppend, PngFlush);
  png_set_IHDR(png, info, 4, 4, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  std::vector<uint8_t> row;
  for (int x = 0; x < 4; ++x) row.insert(row.end(), {r, g, b});
  for (int y = 0; y < 4; ++y) png_write_row(png, row.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  fs::create_directories(fs::path(path).parent_path());
  Spit(path, out);
}

// A manifest directory with img/a.png (red), img/b.png (green), img/c.png (blue).
std::string DirWithImages(const std::string& name) {
  const std::string dir = fixtures::ScratchDir(kScratch, name);
  WritePng(dir + "/img/a.png", 255, 0, 0);
  WritePng(dir + "/img/b.png", 0, 255, 0);
  WritePng(dir + "/img/c.png", 0, 0, 255);
  return dir;
}

std::string Line(const json& j) {
  return j.dump() + "\n";
}

using testing::Cat;
using testing::Repeat;
// `ids` padded to kSeqLen with `fill`.
Ids Padded(Ids ids, int64_t fill) {
  ids.resize(static_cast<size_t>(kSeqLen), fill);
  return ids;
}

// ---- Good samples ----------------------------------------------------------

class GoodManifest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = DirWithImages("good");
    path_ = dir_ + "/train.jsonl";
    std::string text;
    // line 1: text only, 5 tokens.
    text += Line({{"input_ids", {1, 2, 3, 4, 5}}});
    // line 2: blank (ignored, still counted as a line).
    text += "   \n";
    // line 3: one image between text.
    text += Line({{"input_ids", Cat({{10}, Repeat(kImg, 3), {11, 12}})}, {"images", {"img/a.png"}}});
    // line 4: three images, two back to back, with labels and image_positions.
    //   idx: 0   1 2 3  4 5 6  7   8 9 10  11  12
    //        20  I I I  I I I  21  I I I   22  23
    text += Line({{"input_ids", Cat({{20}, Repeat(kImg, 6), {21}, Repeat(kImg, 3), {22, 23}})},
                  {"labels", Cat({Repeat(kIg, 7), {21}, Repeat(kIg, 3), {kIg, 23}})},
                  {"images", {"img/a.png", "./img/b.png", "img/../img/c.png"}},
                  {"image_positions", {1, 4, 8}},
                  {"id", "three-images"},
                  {"meta", {{"source", "unit test"}, {"nested", {1, {2, 3}}}}}});
    // line 5: seq_len + 1 tokens with a loss_mask (loss on the second half).
    Ids full;
    for (int64_t t = 0; t <= kSeqLen; ++t) full.push_back(30 + t);
    Ids mask(static_cast<size_t>(kSeqLen + 1), 0);
    for (int64_t t = 9; t <= kSeqLen; ++t) mask[static_cast<size_t>(t)] = 1;
    text += Line({{"input_ids", full}, {"loss_mask", mask}, {"id", 17}});
    // line 6: one token, no newline at the end, CRLF before it.
    text += "{\"input_ids\": [7], \"images\": []}\r\n";
    text += "{\"input_ids\": [8, 9]}";
    Spit(path_, text);
  }

  std::string dir_;
  std::string path_;
};

TEST_F(GoodManifest, SamplesHaveInputsTargetsRunsAndCountsWorkedByHand) {
  auto m = JsonlManifest::Open(path_, TinyOptions());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 6);
  EXPECT_EQ(m->lines(), 7);
  EXPECT_TRUE(m->skipped().empty());
  EXPECT_EQ(m->LineOf(0), 1);
  EXPECT_EQ(m->LineOf(1), 3);
  EXPECT_EQ(m->LineOf(2), 4);
  EXPECT_EQ(m->LineOf(5), 7);
  EXPECT_EQ(m->SampleOfLine(2), -1);
  EXPECT_EQ(m->SampleOfLine(4), 2);
  EXPECT_EQ(m->SampleOfLine(8), -1);

  // 0 images: inputs padded with pad_id, target = next token, -100 from the last real one on.
  auto s0 = m->Sample(0);
  ASSERT_TRUE(s0.ok()) << s0.status().ToString();
  EXPECT_EQ(s0->id, 0);
  EXPECT_EQ(s0->line, 1);
  EXPECT_EQ(s0->input_ids, Padded({1, 2, 3, 4, 5}, kPadId));
  EXPECT_EQ(s0->target_ids, Padded({2, 3, 4, 5}, kIg));
  EXPECT_TRUE(s0->image_paths.empty());
  EXPECT_TRUE(s0->image_runs.empty());
  EXPECT_EQ(s0->real_tokens, 5);
  EXPECT_EQ(s0->counts.text, 5);
  EXPECT_EQ(s0->counts.image, 0);
  EXPECT_EQ(s0->counts.images, 0);
  EXPECT_EQ(s0->counts.loss, 4);
  EXPECT_EQ(s0->user_id, "");

  // 1 image: no loss on the placeholders nor on the position before them.
  auto s1 = m->Sample(1);
  ASSERT_TRUE(s1.ok()) << s1.status().ToString();
  EXPECT_EQ(s1->input_ids, Padded({10, kImg, kImg, kImg, 11, 12}, kPadId));
  EXPECT_EQ(s1->target_ids, Padded({kIg, kIg, kIg, kIg, 12}, kIg));
  ASSERT_EQ(s1->image_runs.size(), 1u);
  EXPECT_EQ(s1->image_runs[0].start, 1);
  EXPECT_EQ(s1->image_runs[0].length, kTpi);
  ASSERT_EQ(s1->image_paths.size(), 1u);
  EXPECT_EQ(s1->image_paths[0], (fs::absolute(dir_) / "img" / "a.png").lexically_normal().string());
  EXPECT_EQ(s1->counts.text, 3);
  EXPECT_EQ(s1->counts.image, 3);
  EXPECT_EQ(s1->counts.images, 1);
  EXPECT_EQ(s1->counts.loss, 1);

  // 3 images (two back to back), labels: target[t] = labels[t+1], masked at and before placeholders.
  auto s2 = m->Sample(2);
  ASSERT_TRUE(s2.ok()) << s2.status().ToString();
  EXPECT_EQ(s2->user_id, "\"three-images\"");
  EXPECT_EQ(s2->line, 4);
  //                       t: 0    1..6              7    8..10             11   12
  EXPECT_EQ(s2->target_ids, Padded(Cat({{kIg}, Repeat(kIg, 6), {kIg}, Repeat(kIg, 3), {23}}), kIg));
  ASSERT_EQ(s2->image_runs.size(), 3u);
  EXPECT_EQ(s2->image_runs[0].start, 1);
  EXPECT_EQ(s2->image_runs[1].start, 4);
  EXPECT_EQ(s2->image_runs[2].start, 8);
  const fs::path img = (fs::absolute(dir_) / "img").lexically_normal();
  EXPECT_EQ(s2->image_paths,
            (std::vector<std::string>{(img / "a.png").string(), (img / "b.png").string(), (img / "c.png").string()}));
  EXPECT_EQ(s2->counts.text, 4);
  EXPECT_EQ(s2->counts.image, 9);
  EXPECT_EQ(s2->counts.images, 3);
  EXPECT_EQ(s2->counts.loss, 1);
  EXPECT_EQ(s2->real_tokens, 13);

  // seq_len + 1 tokens: all inputs real, the last target is token seq_len; loss_mask[t+1] gates target[t].
  auto s3 = m->Sample(3);
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_EQ(s3->user_id, "17");
  Ids in3, tg3;
  for (int64_t t = 0; t < kSeqLen; ++t) {
    in3.push_back(30 + t);
    tg3.push_back(t + 1 >= 9 ? 30 + t + 1 : kIg);
  }
  EXPECT_EQ(s3->input_ids, in3);
  EXPECT_EQ(s3->target_ids, tg3);
  EXPECT_EQ(s3->real_tokens, kSeqLen);
  EXPECT_EQ(s3->counts.text, kSeqLen);
  EXPECT_EQ(s3->counts.loss, kSeqLen + 1 - 9);

  // One token: no target at all; CRLF and a missing final newline are fine.
  auto s4 = m->Sample(4);
  ASSERT_TRUE(s4.ok()) << s4.status().ToString();
  EXPECT_EQ(s4->input_ids, Padded({7}, kPadId));
  EXPECT_EQ(s4->target_ids, Ids(kSeqLen, kIg));
  EXPECT_EQ(s4->counts.loss, 0);
  auto s5 = m->Sample(5);
  ASSERT_TRUE(s5.ok()) << s5.status().ToString();
  EXPECT_EQ(s5->input_ids, Padded({8, 9}, kPadId));
  EXPECT_EQ(s5->target_ids, Padded({9}, kIg));

  // Counts() (kept from Open) agree with the rebuilt samples.
  for (int64_t i = 0; i < m->size(); ++i) {
    auto s = m->Sample(i);
    ASSERT_TRUE(s.ok());
    const JsonlTokenCounts c = m->Counts(i);
    EXPECT_EQ(c.text, s->counts.text) << i;
    EXPECT_EQ(c.image, s->counts.image) << i;
    EXPECT_EQ(c.images, s->counts.images) << i;
    EXPECT_EQ(c.loss, s->counts.loss) << i;
  }
  EXPECT_EQ(m->TokenCounts().size(), 6u);

  auto out_of_range = m->Sample(6);
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_EQ(out_of_range.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THROW((void)m->LineOf(-1), std::out_of_range);
}

TEST_F(GoodManifest, ResolvedImagePathsLoadThroughTheImageDecoder) {
  auto m = JsonlManifest::Open(path_, TinyOptions());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto s = m->Sample(2);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ImageSpec spec;
  spec.height = 2;
  spec.width = 2;
  spec.mean = {0.f, 0.f, 0.f};
  spec.std = {1.f, 1.f, 1.f};
  // a.png is red, b.png green, c.png blue: channel k of image k is 1, the others 0.
  for (size_t k = 0; k < 3; ++k) {
    auto chw = LoadImageForModel(s->image_paths[k], spec);
    ASSERT_TRUE(chw.ok()) << chw.status().ToString();
    ASSERT_EQ(chw->size(), 12u);
    for (size_t c = 0; c < 3; ++c) EXPECT_FLOAT_EQ((*chw)[c * 4], c == k ? 1.f : 0.f) << k << " " << c;
  }
}

TEST_F(GoodManifest, IndexManifestIngestsIntoTheSampleIndex) {
  auto m = JsonlManifest::Open(path_, TinyOptions());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::string index_manifest = dir_ + "/index.jsonl";
  auto written = m->WriteIndexManifest(index_manifest);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(*written, 6);

  // Each line: id, "<abs manifest>:<line>", text = non-placeholder inputs, image only with images.
  std::istringstream lines(fixtures::ReadFile(index_manifest));
  std::string text;
  int64_t i = 0;
  const std::vector<int64_t> expected_text = {5, 3, 4, kSeqLen, 1, 2};
  const std::vector<int64_t> expected_image = {0, 3, 9, 0, 0, 0};
  while (std::getline(lines, text)) {
    const json j = json::parse(text);
    ASSERT_LT(i, 6);
    EXPECT_EQ(j.at("id").get<int64_t>(), i);
    EXPECT_EQ(j.at("location").get<std::string>(), m->absolute_path() + ":" + std::to_string(m->LineOf(i)));
    EXPECT_EQ(j.at("tokens").at("text").get<int64_t>(), expected_text[static_cast<size_t>(i)]);
    EXPECT_EQ(j.at("tokens").contains("image"), expected_image[static_cast<size_t>(i)] > 0);
    if (expected_image[static_cast<size_t>(i)] > 0) {
      EXPECT_EQ(j.at("tokens").at("image").get<int64_t>(), expected_image[static_cast<size_t>(i)]);
    }
    auto loc = ParseJsonlLocation(j.at("location").get<std::string>());
    ASSERT_TRUE(loc.ok()) << loc.status().ToString();
    EXPECT_EQ(loc->first, m->absolute_path());
    EXPECT_EQ(m->SampleOfLine(loc->second), i);
    ++i;
  }
  EXPECT_EQ(i, 6);

  auto index = datalayer::SampleIndex::Open(dir_ + "/index.sqlite");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  auto stats = (*index)->IngestManifest(index_manifest);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->samples, 6);
  auto infos = (*index)->GetSamples({0, 1, 2, 3, 4, 5});
  ASSERT_TRUE(infos.ok()) << infos.status().ToString();
  ASSERT_EQ(infos->size(), 6u);
  for (const datalayer::SampleInfo& info : *infos) {
    const JsonlTokenCounts c = m->Counts(info.sample_id);
    EXPECT_EQ(info.tokens.at("text"), c.text);
    EXPECT_EQ(info.tokens.count("image") == 1 ? info.tokens.at("image") : 0, c.image);
    EXPECT_EQ(info.location, m->Location(info.sample_id));
  }
}

TEST(JsonlLocation, SplitsAtTheLastColon) {
  auto a = ParseJsonlLocation("/data/a:b/train.jsonl:42");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "/data/a:b/train.jsonl");
  EXPECT_EQ(a->second, 42);
  for (const char* bad : {"no-colon", "x.jsonl:", "x.jsonl:0", "x.jsonl:-3", "x.jsonl:4a", ":5"}) {
    EXPECT_FALSE(ParseJsonlLocation(bad).ok()) << bad;
  }
}

// ---- Bad lines -------------------------------------------------------------

struct BadCase {
  std::string name;
  std::string line;  // without the newline
  std::string says;  // a part of the message
  StatusCode code = StatusCode::kInvalidArgument;
};

// How ctest and gtest name a case (instead of a dump of its bytes).
void PrintTo(const BadCase& c, std::ostream* os) {
  *os << c.name;
}

std::string Ints(const Ids& ids) {
  return json(ids).dump();
}

std::vector<BadCase> BadCases() {
  const std::string ph3 = Ints(Cat({{1}, Repeat(kImg, 3), {2}}));
  Ids too_long;
  for (int64_t t = 0; t < kSeqLen + 2; ++t) too_long.push_back(1 + t);
  // 17 tokens; the image's run covers 14, 15, 16: position 16 is only a target.
  const Ids across = Cat({Repeat(5, 14), Repeat(kImg, 3)});
  std::string deep = "{\"input_ids\": [1], \"meta\": ";
  for (int k = 0; k < 100; ++k) deep += "[";
  for (int k = 0; k < 100; ++k) deep += "]";
  deep += "}";
  return {
      {"NotJson", "{\"input_ids\": [1, 2", "not valid JSON"},
      {"TrailingGarbage", "{\"input_ids\": [1]} x", "not valid JSON"},
      {"NotAnObject", "[1, 2, 3]", "not a JSON object"},
      {"MissingInputIds", "{\"labels\": [1]}", "no \"input_ids\""},
      {"InputIdsNotArray", "{\"input_ids\": \"1 2 3\"}", "not an array of integers"},
      {"InputIdsFloat", "{\"input_ids\": [1, 2.5]}", "input_ids[1] is 2.5, not an integer"},
      {"InputIdsString", "{\"input_ids\": [1, \"2\"]}", "input_ids[1] is the string \"2\""},
      {"InputIdsHuge", "{\"input_ids\": [1, 99999999999999999999]}", "input_ids[1]"},
      {"InputIdsEmpty", "{\"input_ids\": []}", "\"input_ids\" is empty"},
      {"TooLong", "{\"input_ids\": " + Ints(too_long) + "}", "more than seq_len + 1 = 17"},
      {"NegativeToken", "{\"input_ids\": [1, -4]}", "input_ids[1] = -4 is outside the vocabulary [0, 100)"},
      {"TokenAtVocab", "{\"input_ids\": [100]}", "input_ids[0] = 100 is outside the vocabulary"},
      {"LabelsWrongLength", "{\"input_ids\": [1, 2, 3], \"labels\": [1, 2]}", "but input_ids has 3 tokens"},
      {"LabelsNotArray", "{\"input_ids\": [1, 2, 3], \"labels\": 3}", "\"labels\" is 3"},
      {"LabelsBadValue", "{\"input_ids\": [1, 2], \"labels\": [-100, -5]}", "labels[1] is -5, neither -100"},
      {"LabelsAtVocab", "{\"input_ids\": [1, 2], \"labels\": [-100, 100]}", "labels[1] is 100"},
      {"LossMaskWrongLength", "{\"input_ids\": [1, 2], \"loss_mask\": [1]}", "\"loss_mask\" is an array of 1"},
      {"LossMaskBadValue", "{\"input_ids\": [1, 2], \"loss_mask\": [0, 2]}", "loss_mask[1] is 2, not 0 or 1"},
      {"LossMaskBoolean", "{\"input_ids\": [1, 2], \"loss_mask\": [0, true]}", "loss_mask[1] is the boolean"},
      {"LabelsAndLossMask", "{\"input_ids\": [1, 2], \"labels\": [1, 2], \"loss_mask\": [1, 1]}",
       "both \"labels\" and \"loss_mask\""},
      {"ImagesNotArray", "{\"input_ids\": " + ph3 + ", \"images\": \"img/a.png\"}", "not an array of paths"},
      {"ImageNotString", "{\"input_ids\": " + ph3 + ", \"images\": [3]}", "images[0] is 3, not a path string"},
      {"ImageEmptyPath", "{\"input_ids\": " + ph3 + ", \"images\": [\"\"]}", "images[0] is an empty path"},
      {"AbsolutePath", "{\"input_ids\": " + ph3 + ", \"images\": [\"/etc/passwd\"]}", "is an absolute path"},
      {"LeavesFolder", "{\"input_ids\": " + ph3 + ", \"images\": [\"img/../../x.png\"]}",
       "leaves the manifest's folder"},
      {"MissingImage", "{\"input_ids\": " + ph3 + ", \"images\": [\"img/nope.png\"]}", "does not exist",
       StatusCode::kNotFound},
      {"ImageIsADirectory", "{\"input_ids\": " + ph3 + ", \"images\": [\"img\"]}", "is not a regular file"},
      {"PlaceholdersWithoutImages", "{\"input_ids\": " + ph3 + "}",
       "3 image placeholder tokens (id 99), but \"images\" lists 0 image(s) x tokens_per_image 3 = 0"},
      {"FewerPlaceholdersThanImages", "{\"input_ids\": " + ph3 + ", \"images\": [\"img/a.png\", \"img/b.png\"]}",
       "3 image placeholder tokens (id 99), but \"images\" lists 2 image(s)"},
      {"RunNotAMultiple",
       "{\"input_ids\": " + Ints(Cat({{1}, Repeat(kImg, 2), {2}, Repeat(kImg, 4)})) +
           ", \"images\": [\"img/a.png\", \"img/b.png\"]}",
       "the image placeholder run at input_ids[1] has 2 tokens, not a multiple of tokens_per_image 3"},
      {"RunAcrossSeqLen", "{\"input_ids\": " + Ints(across) + ", \"images\": [\"img/a.png\"]}",
       "the placeholder run [14, 17) reaches past the seq_len = 16 inputs"},
      {"PositionsWrong", "{\"input_ids\": " + ph3 + ", \"images\": [\"img/a.png\"], \"image_positions\": [2]}",
       "image_positions[0] = 2, but image 0 (img/a.png)'s placeholders start at input_ids[1]"},
      {"PositionsWrongLength", "{\"input_ids\": " + ph3 + ", \"images\": [\"img/a.png\"], \"image_positions\": [1, 5]}",
       "\"image_positions\" is an array of 2, but \"images\" lists 1 image(s)"},
      {"PositionsNegative", "{\"input_ids\": " + ph3 + ", \"images\": [\"img/a.png\"], \"image_positions\": [-1]}",
       "image_positions[0] is -1, not a non-negative integer"},
      {"UnknownKeyTypo", "{\"input_id\": [1, 2]}", "unknown key \"input_id\" (did you mean \"input_ids\"?)"},
      {"UnknownKeyLabels", "{\"input_ids\": [1, 2], \"lables\": [1, 2]}", "(did you mean \"labels\"?)"},
      {"UnknownKeyFar", "{\"input_ids\": [1, 2], \"caption\": \"a cat\"}",
       "unknown key \"caption\"; the known keys are input_ids, labels, loss_mask, images, image_positions, videos, "
       "video_positions, audios, audio_positions, id, meta"},
      {"IdNotScalar", "{\"input_ids\": [1, 2], \"id\": [1]}", "\"id\" is an array of 1, not a string or an integer"},
      {"TooDeep", deep, "JSON nested deeper than 64 levels"},
  };
}

class BadLine : public ::testing::TestWithParam<BadCase> {};

// Line 1 is good, line 2 is the bad one, line 3 is good: kError fails naming
// file:2 and sample 1; kSkip keeps lines 1 and 3 as samples 0 and 1.
TEST_P(BadLine, IsRefusedNamingFileAndLineOrSkipped) {
  const BadCase& c = GetParam();
  const std::string dir = DirWithImages("bad-" + c.name);
  const std::string path = dir + "/m.jsonl";
  Spit(path, "{\"input_ids\": [1, 2, 3]}\n" + c.line + "\n{\"input_ids\": [4, 5], \"id\": \"third\"}\n");

  auto s = testing::ExpectSecondLineRefused(path, TinyOptions(), c.code, c.says);
  ASSERT_TRUE(s.ok()) << c.name;
  ASSERT_EQ(s->size(), 2);
  EXPECT_EQ(s->LineOf(0), 1);
  EXPECT_EQ(s->LineOf(1), 3);
  auto third = s->Sample(1);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(third->input_ids, Padded({4, 5}, kPadId));
  EXPECT_EQ(third->user_id, "\"third\"");
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(JsonlManifest, BadLine, ::testing::ValuesIn(BadCases()),
                         [](const ::testing::TestParamInfo<BadCase>& p) { return p.param.name; });

TEST(JsonlManifestErrors, ErrorsNameTheUsersIdWhenTheLineHasOne) {
  const std::string dir = fixtures::ScratchDir(kScratch, "user-id");
  const std::string path = dir + "/m.jsonl";
  Spit(path, "{\"input_ids\": [1], \"id\": \"cat-7\", \"labels\": [500]}\n");
  auto m = JsonlManifest::Open(path, TinyOptions());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message().rfind(path + ":1 (sample 0, id \"cat-7\"): labels[0] is 500", 0), 0u)
      << m.status().message();
}

TEST(JsonlManifestErrors, ImagesForAModelWithoutAnImageToken) {
  const std::string dir = DirWithImages("no-image-token");
  const std::string path = dir + "/m.jsonl";
  Spit(path, "{\"input_ids\": [1, 2], \"images\": [\"img/a.png\"]}\n");
  JsonlManifestOptions o = TinyOptions();
  o.image_token_id = -1;
  o.tokens_per_image = 0;
  auto m = JsonlManifest::Open(path, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(
                ":1 (sample 0): the line lists 1 image(s), but the model takes none (no image_token_id)"),
            std::string::npos)
      << m.status().message();
  // 99 is an ordinary token for that model.
  Spit(path, "{\"input_ids\": [1, 99, 99]}\n");
  auto ok = JsonlManifest::Open(path, o);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto s = ok->Sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->target_ids, Padded({99, 99}, kIg));
  EXPECT_EQ(s->counts.text, 3);
}

TEST(JsonlManifestErrors, SkipLeavesOutExactlyTheBadLines) {
  const std::string dir = DirWithImages("skip");
  const std::string path = dir + "/m.jsonl";
  std::string text;
  std::vector<int64_t> bad_lines;
  std::vector<Ids> good;
  std::mt19937 rng(5);
  for (int64_t line = 1; line <= 40; ++line) {
    if (rng() % 3 == 0) {
      bad_lines.push_back(line);
      text += (line % 2 == 0) ? "{\"input_ids\": [1, 200]}\n" : "not json at all\n";
    } else {
      Ids ids;
      for (uint32_t k = 0; k < 1 + rng() % 10; ++k) ids.push_back(1 + static_cast<int64_t>(rng() % 98));
      good.push_back(ids);
      text += Line({{"input_ids", ids}});
    }
  }
  Spit(path, text);
  ASSERT_FALSE(JsonlManifest::Open(path, TinyOptions()).ok());
  JsonlManifestOptions o = TinyOptions();
  o.on_bad_sample = BadSamplePolicy::kSkip;
  auto m = JsonlManifest::Open(path, o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), static_cast<int64_t>(good.size()));
  std::vector<int64_t> skipped;
  for (const JsonlSkippedLine& s : m->skipped()) {
    skipped.push_back(s.line);
    EXPECT_NE(s.status.message().find(path + ":" + std::to_string(s.line) + " "), std::string::npos)
        << s.status.message();
  }
  EXPECT_EQ(skipped, bad_lines);
  for (int64_t i = 0; i < m->size(); ++i) {
    auto s = m->Sample(i);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->input_ids, Padded(good[static_cast<size_t>(i)], kPadId)) << i;
    EXPECT_EQ(s->id, i);
  }
}

TEST(JsonlManifestErrors, OptionsAndFiles) {
  const std::string dir = fixtures::ScratchDir(kScratch, "options");
  const std::string path = dir + "/m.jsonl";
  Spit(path, "{\"input_ids\": [1]}\n");
  const auto fails = [&](const JsonlManifestOptions& o, const std::string& says) {
    testing::ExpectOptionsRefused(path, o, says);
  };
  JsonlManifestOptions o = TinyOptions();
  o.seq_len = 0;
  fails(o, "seq_len 0");
  o = TinyOptions();
  o.vocab_size = 0;
  fails(o, "vocab_size 0");
  o = TinyOptions();
  o.pad_id = 100;
  fails(o, "pad_id 100");
  o = TinyOptions();
  o.image_token_id = 100;
  fails(o, "image_token_id 100");
  o = TinyOptions();
  o.tokens_per_image = 0;
  fails(o, "tokens_per_image 0");
  o = TinyOptions();
  o.tokens_per_image = kSeqLen + 1;
  fails(o, "tokens_per_image 17");

  auto missing = JsonlManifest::Open(dir + "/nope.jsonl", TinyOptions());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.jsonl"), std::string::npos);
  auto directory = JsonlManifest::Open(dir, TinyOptions());
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), StatusCode::kIOError);

  // An empty manifest is a manifest of no samples.
  Spit(path, "");
  auto empty = JsonlManifest::Open(path, TinyOptions());
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->size(), 0);
}

TEST(JsonlManifestPaths, AbsoluteAndOutsidePathsWhenAllowed) {
  const std::string root = DirWithImages("paths");
  const std::string sub = root + "/manifests";
  fs::create_directories(sub);
  const std::string path = sub + "/m.jsonl";
  const std::string abs_a = (fs::absolute(root) / "img" / "a.png").lexically_normal().string();
  Spit(path, Line({{"input_ids", Cat({{1}, Repeat(kImg, 3), Repeat(kImg, 3)})}, {"images", {abs_a, "../img/b.png"}}}));
  ASSERT_FALSE(JsonlManifest::Open(path, TinyOptions()).ok());
  JsonlManifestOptions o = TinyOptions();
  o.allow_absolute_paths = true;
  auto m = JsonlManifest::Open(path, o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto s = m->Sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->image_paths,
            (std::vector<std::string>{abs_a, (fs::absolute(root) / "img" / "b.png").lexically_normal().string()}));

  // check_images_exist = false accepts a missing file (the path is still resolved).
  Spit(path, Line({{"input_ids", Cat({{1}, Repeat(kImg, 3)})}, {"images", {"later.png"}}}));
  o = TinyOptions();
  o.check_images_exist = false;
  auto later = JsonlManifest::Open(path, o);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  auto sl = later->Sample(0);
  ASSERT_TRUE(sl.ok());
  EXPECT_EQ(sl->image_paths[0], (fs::absolute(sub) / "later.png").lexically_normal().string());
}

TEST(JsonlManifestFile, AnInPlaceEditIsCaughtAndARenamedReplacementIsNot) {
  const std::string dir = fixtures::ScratchDir(kScratch, "edit");
  const std::string path = dir + "/m.jsonl";
  Spit(path, "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [4, 5, 6]}\n");
  auto m = JsonlManifest::Open(path, TinyOptions());
  ASSERT_TRUE(m.ok());
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::string("{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [").size());
    f.put('7');  // [7, 5, 6]: same length, other bytes
  }
  ASSERT_TRUE(m->Sample(0).ok());
  auto changed = m->Sample(1);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), StatusCode::kCorruption);
  EXPECT_NE(changed.status().message().find(path + ":2 (sample 1): the line changed"), std::string::npos)
      << changed.status().message();

  // A new file renamed over the path: the open manifest still reads the old copy.
  auto m2 = JsonlManifest::Open(path, TinyOptions());
  ASSERT_TRUE(m2.ok());
  Spit(path + ".new", "{\"input_ids\": [9]}\n");
  fs::rename(path + ".new", path);
  auto kept = m2->Sample(1);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->input_ids, Padded({7, 5, 6}, kPadId));
}

TEST(JsonlManifestFile, OverlongLineIsRefusedAndSkippable) {
  const std::string dir = fixtures::ScratchDir(kScratch, "overlong");
  const std::string path = dir + "/m.jsonl";
  std::string text = "{\"input_ids\": [1]}\n{\"meta\": \"";
  text.append(static_cast<size_t>(kJsonlMaxLineBytes) + 10, 'x');
  text += "\"}\n{\"input_ids\": [2]}";
  Spit(path, text);
  auto m = JsonlManifest::Open(path, TinyOptions());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(path + ":2 (sample 1): the line is longer than"), std::string::npos)
      << m.status().message();
  JsonlManifestOptions o = TinyOptions();
  o.on_bad_sample = BadSamplePolicy::kSkip;
  auto s = JsonlManifest::Open(path, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 2);
  EXPECT_EQ(s->LineOf(1), 3);
  auto last = s->Sample(1);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(last->input_ids[0], 2);
  fs::remove_all(dir);
}

// ---- A large manifest ------------------------------------------------------

// Resident set size now (VmRSS of /proc/self/status), KiB; -1 when unknown.
int64_t RssKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

TEST(JsonlManifestLarge, FiftyThousandLinesOpenAndRead) {
  const std::string dir = DirWithImages("large");
  const std::string path = dir + "/big.jsonl";
  constexpr int64_t kLines = 50000;
  JsonlManifestOptions o;
  o.seq_len = 256;
  o.vocab_size = 32000;
  o.image_token_id = 31999;
  o.tokens_per_image = 16;
  o.pad_id = 0;
  std::mt19937_64 rng(42);
  std::vector<Ids> kept;  // every 997th sample, to compare
  std::vector<int64_t> text_counts;
  std::string text;
  const char* names[] = {"img/a.png", "img/b.png", "img/c.png"};
  for (int64_t line = 0; line < kLines; ++line) {
    const int64_t images = static_cast<int64_t>(rng() % 3);
    const int64_t words = 5 + static_cast<int64_t>(rng() % 60);
    Ids ids;
    json paths = json::array();
    for (int64_t w = 0; w < words; ++w) {
      if (images > 0 && w == 1) {
        for (int64_t k = 0; k < images; ++k) {
          ids.push_back(100);  // a vision_start-like token between images
          Ids run = Repeat(o.image_token_id, o.tokens_per_image);
          ids.insert(ids.end(), run.begin(), run.end());
          paths.push_back(names[k]);
        }
      }
      ids.push_back(1 + static_cast<int64_t>(rng() % 31000));
    }
    text_counts.push_back(static_cast<int64_t>(ids.size()) - images * o.tokens_per_image);
    if (line % 997 == 0) kept.push_back(ids);
    json j = {{"input_ids", ids}};
    if (images > 0) j["images"] = paths;
    text += Line(j);
  }
  Spit(path, text);
  const size_t file_bytes = text.size();
  std::string().swap(text);

  const int64_t rss_before = RssKiB();
  const auto t0 = std::chrono::steady_clock::now();
  auto m = JsonlManifest::Open(path, o);
  const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), kLines);
  const int64_t rss_after = RssKiB();
  for (int64_t i = 0; i < kLines; ++i) ASSERT_EQ(m->Counts(i).text, text_counts[static_cast<size_t>(i)]) << i;

  const auto t1 = std::chrono::steady_clock::now();
  int64_t read = 0;
  for (int64_t i = 0; i < kLines; i += 7, ++read) {
    auto s = m->Sample(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    if (i % 997 == 0) {
      Ids want = kept[static_cast<size_t>(i / 997)];
      want.resize(256, 0);
      EXPECT_EQ(s->input_ids, want) << i;
    }
  }
  const double read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  std::printf(
      "[ measured ] %lld lines, %.1f MB: Open %.3f s (%.0f lines/s, %.1f MB/s), RSS +%lld KiB after "
      "Open (%lld KiB of per-sample table); Sample() %.0f /s\n",
      static_cast<long long>(kLines), static_cast<double>(file_bytes) / 1e6, open_s,
      static_cast<double>(kLines) / open_s, static_cast<double>(file_bytes) / 1e6 / open_s,
      static_cast<long long>(rss_after - rss_before), static_cast<long long>(kLines * 40 / 1024),
      static_cast<double>(read) / read_s);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace maestro::datasets
