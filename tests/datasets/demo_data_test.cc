// SPDX-License-Identifier: Apache-2.0
// Tests of the demo data sets on the real Debian files (dataset-fashion-mnist,
// fortunes-min); each test skips, naming the package, when its files are absent
// (Fashion-MNIST: tests/fixtures/demo_images.h, the product's own lookup).
#include "datasets/demo_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/idx_file.h"
#include "tests/fixtures/demo_images.h"
#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

namespace fs = std::filesystem;

const std::string kLiterature = "/usr/share/games/fortunes/literature";

// This file's scratch folders: <test-tmp>/maestro-datasets-<pid>/<name> (fixtures::ScratchDir).
constexpr char kScratch[] = "maestro-datasets-";

std::unique_ptr<DemoDataset> OpenOrDie(const DemoOptions& options) {
  auto ds = DemoDataset::Open(options);
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? std::move(ds).value() : nullptr;
}

DemoOptions Captions(int64_t seq_len, double fraction = 0.5, uint64_t seed = 0) {
  DemoOptions o;
  o.kind = DemoKind::kFashionMnistCaptions;
  o.seq_len = seq_len;
  o.image_fraction = fraction;
  o.seed = seed;
  return o;
}

DemoOptions Text(int64_t seq_len) {
  DemoOptions o;
  o.kind = DemoKind::kText;
  o.seq_len = seq_len;
  return o;
}

IdxArray ReadIdx(const std::string& name, int rank) {
  auto bytes = ReadMaybeGzipFile(DefaultFashionMnistDir() + "/" + name, "dataset-fashion-mnist");
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto arr = ParseIdx(*bytes, rank, name);
  EXPECT_TRUE(arr.ok()) << arr.status().ToString();
  return arr.ok() ? std::move(arr).value() : IdxArray{};
}

int64_t TextTokens(const DemoSample& s) {
  int64_t n = 0;
  for (int64_t id : s.input_ids) n += (id != kPad && id != kImage) ? 1 : 0;
  return n;
}

// ---- idx files ----------------------------------------------------------------

TEST(IdxFile, ParsesRealFashionMnistWithBalancedClassesAndKnownMean) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  const IdxArray images = ReadIdx("train-images-idx3-ubyte.gz", 3);
  const IdxArray labels = ReadIdx("train-labels-idx1-ubyte.gz", 1);
  ASSERT_EQ(images.dims, (std::vector<int64_t>{60000, 28, 28}));
  ASSERT_EQ(labels.dims, (std::vector<int64_t>{60000}));
  std::map<int, int> counts;
  for (uint8_t l : labels.data) ++counts[l];
  ASSERT_EQ(counts.size(), 10u);
  for (const auto& [label, n] : counts) EXPECT_EQ(n, 6000) << "class " << label;
  double sum = 0;
  for (uint8_t p : images.data) sum += p;
  // The published normalization constant: mean of x/255 over the train split.
  EXPECT_NEAR(sum / static_cast<double>(images.data.size()) / 255.0, kPixelMean, 5e-4);

  const IdxArray test_labels = ReadIdx("t10k-labels-idx1-ubyte.gz", 1);
  ASSERT_EQ(test_labels.dims, (std::vector<int64_t>{10000}));
}

TEST(IdxFile, RejectsBadMagicWrongRankAndTruncation) {
  std::string bytes("\x00\x00\x08\x01\x00\x00\x00\x03\x01\x02\x03", 11);
  auto ok = ParseIdx(bytes, 1, "x");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->data, (std::vector<uint8_t>{1, 2, 3}));

  auto rank = ParseIdx(bytes, 3, "labels.idx");
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.status().code(), StatusCode::kCorruption);
  EXPECT_NE(rank.status().message().find("labels.idx"), std::string::npos);

  auto truncated = ParseIdx(bytes.substr(0, 10), 1, "x");
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);

  std::string magic = bytes;
  magic[2] = 0x0d;  // float data
  auto bad = ParseIdx(magic, 1, "x");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("magic"), std::string::npos);
  EXPECT_FALSE(ParseIdx("", 1, "x").ok());
}

TEST(IdxFile, MissingFileNamesThePackage) {
  auto r = ReadMaybeGzipFile("/nonexistent/dir/train-images-idx3-ubyte.gz", "install dataset-fashion-mnist");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/dir/train-images-idx3-ubyte.gz"), std::string::npos);
  EXPECT_NE(r.status().message().find("dataset-fashion-mnist"), std::string::npos);
}

// ---- captions -------------------------------------------------------------------

void ExpectCaptionLayout(const DemoSample& s, int64_t seq_len) {
  ASSERT_TRUE(s.has_image);
  ASSERT_EQ(static_cast<int64_t>(s.input_ids.size()), seq_len);
  ASSERT_EQ(static_cast<int64_t>(s.target_ids.size()), seq_len);
  ASSERT_EQ(s.image.size(), static_cast<size_t>(kImagePixels));
  ASSERT_GE(s.label, 0);
  ASSERT_LT(s.label, kNumClasses);
  EXPECT_EQ(s.input_ids[0], kBos);
  for (int i = 1; i <= kImageTokens; ++i) EXPECT_EQ(s.input_ids[static_cast<size_t>(i)], kImage) << i;
  const int64_t t = s.answer_position;
  ASSERT_GT(t, kImageTokens);
  ASSERT_LT(t + 2, seq_len + 1);
  EXPECT_EQ(s.input_ids[static_cast<size_t>(t + 1)], ClassToken(s.label));
  EXPECT_EQ(s.target_ids[static_cast<size_t>(t)], ClassToken(s.label));
  EXPECT_EQ(s.input_ids[static_cast<size_t>(t)], ' ');  // the prefix ends with a space
  EXPECT_EQ(s.input_ids[static_cast<size_t>(t + 2)], kEos);
  // The class token is the only class token, and it appears once.
  int class_tokens = 0;
  for (int64_t id : s.input_ids) class_tokens += LabelOfToken(id) >= 0 ? 1 : 0;
  EXPECT_EQ(class_tokens, 1);
  for (int64_t p = 0; p < seq_len; ++p) {
    const auto i = static_cast<size_t>(p);
    if (p > t + 2) {
      EXPECT_EQ(s.input_ids[i], kPad) << p;
    }
    if (p >= kImageTokens + 1 && p <= t) {
      EXPECT_LT(s.input_ids[i], 256) << "prefix byte at " << p;
    }
    // Loss on the response only (the class token and <eos>): not on <bos>,
    // the image positions, the prompt prefix, <eos> itself or pads.
    const bool loss = p == t || p == t + 1;
    if (loss) {
      EXPECT_EQ(s.target_ids[i], s.input_ids[i + 1]) << p;
    } else {
      EXPECT_EQ(s.target_ids[i], kIgnoreTarget) << p;
    }
  }
  float lo = 1e9f, hi = -1e9f;
  for (float v : s.image) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -kPixelMean / kPixelStd - 1e-5f);
  EXPECT_LE(hi, (1.0f - kPixelMean) / kPixelStd + 1e-5f);
}

TEST(DemoCaptions, LayoutAnswerPositionAndTargetsAtSeqLen64And32) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  for (int64_t seq_len : {int64_t{64}, int64_t{32}}) {
    auto ds = OpenOrDie(Captions(seq_len, 1.0));
    ASSERT_TRUE(ds);
    ASSERT_EQ(ds->NumTrain(), 60000);
    std::set<int64_t> answer_positions;
    for (int64_t id : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{17}, int64_t{12345}, int64_t{59999}}) {
      auto s = ds->LoadTrain(id);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_EQ(s->id, id);
      ExpectCaptionLayout(*s, seq_len);
      answer_positions.insert(s->answer_position);
    }
    for (int64_t i = 0; i < 50; ++i) answer_positions.insert(ds->LoadTest(i)->answer_position);
    EXPECT_GT(answer_positions.size(), 1u) << "the caption templates vary by id";
    auto test = ds->LoadTest(9999);
    ASSERT_TRUE(test.ok()) << test.status().ToString();
    ExpectCaptionLayout(*test, seq_len);
  }
  EXPECT_EQ(MinCaptionSeqLen(), 32);
}

TEST(DemoCaptions, ImagesAndLabelsAgreeWithTheIdxFiles) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  auto ds = OpenOrDie(Captions(64, 1.0));
  ASSERT_TRUE(ds);
  const IdxArray images = ReadIdx("train-images-idx3-ubyte.gz", 3);
  const IdxArray labels = ReadIdx("train-labels-idx1-ubyte.gz", 1);
  std::map<int, int> counts;
  double sum = 0, sum_sq = 0;
  for (int64_t id = 0; id < ds->NumTrain(); ++id) {
    auto s = ds->LoadTrain(id);
    ASSERT_TRUE(s.ok());
    ++counts[s->label];
    ASSERT_EQ(s->label, labels.data[static_cast<size_t>(id)]) << id;
    for (float v : s->image) {
      sum += v;
      sum_sq += static_cast<double>(v) * v;
    }
    if (id % 997 == 0) {  // exact pixels on a sample of ids
      for (int p = 0; p < kImagePixels; ++p) {
        const float raw = (s->image[static_cast<size_t>(p)] * kPixelStd + kPixelMean) * 255.0f;
        ASSERT_NEAR(raw, images.data[static_cast<size_t>(id * kImagePixels + p)], 1e-3) << id << ":" << p;
      }
    }
  }
  for (int c = 0; c < kNumClasses; ++c) EXPECT_EQ(counts[c], 6000) << DemoDataset::ClassName(c);
  const double n = 60000.0 * kImagePixels;
  EXPECT_NEAR(sum / n, 0.0, 2e-3) << "normalized train images have mean ~0";
  EXPECT_NEAR(std::sqrt(sum_sq / n - (sum / n) * (sum / n)), 1.0, 2e-3) << "... and std ~1";

  ASSERT_EQ(ds->NumTest(), 10000);
  const IdxArray test_labels = ReadIdx("t10k-labels-idx1-ubyte.gz", 1);
  std::map<int, int> test_counts;
  for (int64_t i = 0; i < ds->NumTest(); ++i) {
    auto s = ds->LoadTest(i);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->has_image);
    ASSERT_EQ(s->label, test_labels.data[static_cast<size_t>(i)]);
    ++test_counts[s->label];
  }
  for (int c = 0; c < kNumClasses; ++c) EXPECT_EQ(test_counts[c], 1000);
}

TEST(DemoCaptions, ManifestRoundTripsThroughNlohmann) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  auto ds = OpenOrDie(Captions(64, 0.5, 7));
  ASSERT_TRUE(ds);
  auto text_ds = OpenOrDie(Text(64));  // chunk c of the text set is text chunk c
  ASSERT_TRUE(text_ds);
  ASSERT_EQ(text_ds->NumTrain(), ds->NumTrainTextChunks());
  const IdxArray images = ReadIdx("train-images-idx3-ubyte.gz", 3);
  const std::string path = fixtures::ScratchDir(kScratch, "manifest") + "/captions.jsonl";
  auto written = ds->WriteManifest(path);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(*written, ds->NumTrain());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  std::ifstream in(path);
  std::string line;
  int64_t expected_id = 0;
  std::set<int64_t> images_seen;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const int64_t id = j.at("id").get<int64_t>();
    ASSERT_EQ(id, expected_id++) << "ids are 0..n-1 in order, hence unique";
    const std::string location = j.at("location").get<std::string>();
    const auto& tokens = j.at("tokens");
    auto s = ds->LoadTrain(id);
    ASSERT_TRUE(s.ok());
    ASSERT_EQ(tokens.at("text").get<int64_t>(), TextTokens(*s)) << line;
    ASSERT_EQ(tokens.contains("image"), s->has_image) << line;
    if (s->has_image) {
      ASSERT_EQ(tokens.at("image").get<int64_t>(), kImageTokens);
      ASSERT_EQ(location.rfind("fmnist:train:", 0), 0u) << line;
      const int64_t k = std::stoll(location.substr(13));
      ASSERT_TRUE(images_seen.insert(k).second) << "image " << k << " used twice";
      if (id % 101 == 0) {
        for (int p = 0; p < kImagePixels; p += 7) {
          const float raw = (s->image[static_cast<size_t>(p)] * kPixelStd + kPixelMean) * 255.0f;
          ASSERT_NEAR(raw, images.data[static_cast<size_t>(k * kImagePixels + p)], 1e-3);
        }
      }
    } else {
      ASSERT_EQ(location.rfind("text:", 0), 0u) << line;
      const int64_t c = std::stoll(location.substr(5));
      if (id % 101 == 0 || id < 300) {
        auto chunk = text_ds->LoadTrain(c);
        ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
        ASSERT_EQ(chunk->input_ids, s->input_ids) << line;
      }
    }
  }
  EXPECT_EQ(expected_id, ds->NumTrain());
  EXPECT_EQ(static_cast<int64_t>(images_seen.size()), 60000) << "every train image appears once";
}

TEST(DemoCaptions, ImageFractionIsRespectedAndTextChunksCycleEvenly) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  for (double fraction : {0.25, 0.5, 0.9, 1.0}) {
    auto ds = OpenOrDie(Captions(48, fraction));
    ASSERT_TRUE(ds);
    int64_t with_image = 0;
    int64_t longest_text_run = 0, run = 0;
    for (int64_t id = 0; id < ds->NumTrain(); ++id) {
      auto s = ds->LoadTrain(id);
      ASSERT_TRUE(s.ok());
      if (s->has_image) {
        ++with_image;
        run = 0;
      } else {
        EXPECT_EQ(s->label, -1);
        EXPECT_EQ(s->answer_position, -1);
        EXPECT_TRUE(s->image.empty());
        longest_text_run = std::max(longest_text_run, ++run);
      }
    }
    EXPECT_EQ(with_image, 60000);
    EXPECT_NEAR(static_cast<double>(with_image) / static_cast<double>(ds->NumTrain()), fraction, 1e-4) << fraction;
    // Interleaved, not blocked: text runs are as short as the fraction allows.
    EXPECT_LE(longest_text_run, static_cast<int64_t>(std::ceil((1 - fraction) / fraction)) + 1) << fraction;
    // Text chunk uses, by the manifest's locations (two chunks may hold the same bytes).
    const std::string path = fixtures::ScratchDir(kScratch, "fraction") + "/m.jsonl";
    ASSERT_TRUE(ds->WriteManifest(path).ok());
    std::map<int64_t, int64_t> chunk_uses;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const std::string location = nlohmann::json::parse(line).at("location").get<std::string>();
      if (location.rfind("text:", 0) == 0) ++chunk_uses[std::stoll(location.substr(5))];
    }
    if (fraction < 1.0) {
      int64_t lo = INT64_MAX, hi = 0;
      for (const auto& [chunk, uses] : chunk_uses) {
        lo = std::min(lo, uses);
        hi = std::max(hi, uses);
      }
      EXPECT_EQ(static_cast<int64_t>(chunk_uses.size()), std::min(ds->NumTrain() - 60000, ds->NumTrainTextChunks()));
      EXPECT_LE(hi - lo, 1) << "chunks repeat cyclically";
    }
  }
}

TEST(DemoCaptions, SameOptionsGiveTheSameManifestAndSamples) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  auto a = OpenOrDie(Captions(40, 0.6, 3));
  auto b = OpenOrDie(Captions(40, 0.6, 3));
  auto c = OpenOrDie(Captions(40, 0.6, 4));
  ASSERT_TRUE(a && b && c);
  const std::string dir = fixtures::ScratchDir(kScratch, "determinism");
  ASSERT_TRUE(a->WriteManifest(dir + "/a.jsonl").ok());
  ASSERT_TRUE(b->WriteManifest(dir + "/b.jsonl").ok());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  EXPECT_EQ(slurp(dir + "/a.jsonl"), slurp(dir + "/b.jsonl"));
  int template_differences = 0;
  for (int64_t id = 0; id < a->NumTrain(); id += 37) {
    auto sa = a->LoadTrain(id), sa2 = a->LoadTrain(id), sb = b->LoadTrain(id), sc = c->LoadTrain(id);
    ASSERT_TRUE(sa.ok() && sa2.ok() && sb.ok() && sc.ok());
    for (const DemoSample* other : {&*sa2, &*sb}) {
      EXPECT_EQ(sa->input_ids, other->input_ids);
      EXPECT_EQ(sa->target_ids, other->target_ids);
      EXPECT_EQ(sa->image, other->image);
      EXPECT_EQ(sa->answer_position, other->answer_position);
    }
    // The seed picks templates only: which image/chunk an id holds does not change.
    EXPECT_EQ(sa->has_image, sc->has_image);
    EXPECT_EQ(sa->label, sc->label);
    EXPECT_EQ(sa->image, sc->image);
    template_differences += sa->input_ids != sc->input_ids ? 1 : 0;
  }
  EXPECT_GT(template_differences, 0);
}

TEST(DemoCaptions, DecodeRendersACaption) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  auto ds = OpenOrDie(Captions(40, 1.0));
  ASSERT_TRUE(ds);
  auto s = ds->LoadTrain(1);  // the train split's second image
  ASSERT_TRUE(s.ok());
  const std::string text = ds->Decode(s->input_ids);
  EXPECT_EQ(text.rfind("<bos><image>x16", 0), 0u) << text;
  const std::string cls = "<class:" + DemoDataset::ClassName(s->label) + "><eos><pad>x";
  EXPECT_NE(text.find(cls), std::string::npos) << text;
  EXPECT_EQ(ds->Decode({'a', '\n', 0x01, kBos, 999}), "a\\n\\x01<bos><id:999>");
}

// ---- text -----------------------------------------------------------------------

TEST(DemoText, ChunksHeldOutSplitAndTargets) {
  auto ds = OpenOrDie(Text(64));
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->NumTrain() + ds->NumTest(), ds->NumTextChunks());
  EXPECT_EQ(ds->NumTrain(), ds->NumTrainTextChunks());
  EXPECT_GE(ds->NumTest(), 1);
  EXPECT_NEAR(static_cast<double>(ds->NumTest()) / static_cast<double>(ds->NumTextChunks()), 0.05, 0.01);
  std::string train_text, test_text;
  for (int64_t id = 0; id < ds->NumTrain(); ++id) {
    auto s = ds->LoadTrain(id);
    ASSERT_TRUE(s.ok());
    ASSERT_EQ(s->input_ids.size(), 64u);
    ASSERT_EQ(s->input_ids[0], kBos);
    EXPECT_FALSE(s->has_image);
    EXPECT_EQ(s->label, -1);
    EXPECT_EQ(s->answer_position, -1);
    for (size_t t = 0; t + 1 < 64; ++t) ASSERT_EQ(s->target_ids[t], s->input_ids[t + 1]);
    ASSERT_EQ(s->target_ids[63], kIgnoreTarget);
    for (size_t t = 1; t < 64; ++t) train_text += static_cast<char>(s->input_ids[t]);
  }
  for (int64_t i = 0; i < ds->NumTest(); ++i) {
    auto s = ds->LoadTest(i);
    ASSERT_TRUE(s.ok());
    for (size_t t = 1; t < 64; ++t) test_text += static_cast<char>(s->input_ids[t]);
  }
  // Consecutive chunks tile the text: train then test, no overlap.
  EXPECT_EQ(static_cast<int64_t>(train_text.size() + test_text.size()), ds->NumTextChunks() * 63);
  if (fs::exists(kLiterature)) {
    EXPECT_EQ(ds->text_source().rfind("fortunes-min", 0), 0u) << ds->text_source();
    std::ifstream f(kLiterature);
    std::string first_line;
    std::getline(f, first_line);
    EXPECT_EQ(train_text.rfind(first_line, 0), 0u) << "the text starts with fortunes-min's literature file";
    EXPECT_EQ(train_text.find("\n%\n"), std::string::npos) << "cookie separators are stripped";
  }
}

// DemoTrainSamples (what the compiler prices a job over) is what the opened
// set holds: the text at several seq_lens and a custom text; the captions
// set at image fractions 1, 0.5 and 0.3 (60,000 images spread; the opened
// set's count when the Fashion-MNIST files are here).
TEST(DemoData, TrainSamplesWithoutOpeningEqualTheOpenedSet) {
  for (int64_t seq_len : {16, 64, 257}) {
    auto ds = OpenOrDie(Text(seq_len));
    ASSERT_TRUE(ds);
    auto n = DemoTrainSamples(Text(seq_len));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, ds->NumTrain()) << "seq_len " << seq_len;
  }
  const std::string dir = fixtures::ScratchDir(kScratch, "train_samples");
  {
    std::ofstream f(dir + "/tiny.txt");
    f << "0123456789abcdefghij";  // 20 bytes: two chunks of 7 at seq_len 8, one held out
  }
  DemoOptions custom = Text(8);
  custom.text_path = dir + "/tiny.txt";
  auto one = DemoTrainSamples(custom);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(*one, 1);
  custom.seq_len = 12;
  EXPECT_EQ(DemoTrainSamples(custom).status().code(), StatusCode::kInvalidArgument);

  DemoOptions captions;
  captions.kind = DemoKind::kFashionMnistCaptions;
  const bool have_images = FindFashionMnist(captions.fashion_dir).ok();
  for (double fraction : {1.0, 0.5, 0.3}) {
    captions.image_fraction = fraction;
    auto n = DemoTrainSamples(captions);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, static_cast<int64_t>(std::llround(60000 / fraction))) << fraction;
    if (have_images) {
      auto ds = DemoDataset::Open(captions);
      ASSERT_TRUE(ds.ok()) << ds.status().ToString();
      EXPECT_EQ(*n, (*ds)->NumTrain()) << fraction;
    }
  }
}

TEST(DemoText, CustomTextPathAndItsErrors) {
  const std::string dir = fixtures::ScratchDir(kScratch, "text");
  {
    std::ofstream f(dir + "/tiny.txt");
    f << "0123456789abcdefghij";  // 20 bytes
  }
  DemoOptions o = Text(8);  // 7-byte chunks: 2 chunks
  o.text_path = dir + "/tiny.txt";
  auto ds = OpenOrDie(o);
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->NumTextChunks(), 2);
  EXPECT_EQ(ds->NumTrain(), 1);
  EXPECT_EQ(ds->NumTest(), 1);
  EXPECT_EQ(ds->Decode(ds->LoadTest(0)->input_ids), "<bos>789abcd");

  o.seq_len = 12;  // 11-byte chunks: only one
  auto too_short = DemoDataset::Open(o);
  ASSERT_FALSE(too_short.ok());
  EXPECT_EQ(too_short.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_short.status().message().find("tiny.txt"), std::string::npos) << too_short.status().ToString();

  o.text_path = dir + "/missing.txt";
  auto missing = DemoDataset::Open(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("missing.txt"), std::string::npos);
}

// ---- bad inputs -------------------------------------------------------------------

TEST(DemoErrors, BadOptionsGiveClearStatuses) {
  EXPECT_EQ(*DemoKindFromName("text"), DemoKind::kText);
  EXPECT_EQ(*DemoKindFromName("fashion_mnist_captions"), DemoKind::kFashionMnistCaptions);
  auto kind = DemoKindFromName("mnist");
  ASSERT_FALSE(kind.ok());
  EXPECT_NE(kind.status().message().find("fashion_mnist_captions"), std::string::npos);

  auto tiny = DemoDataset::Open(Captions(31));
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tiny.status().message().find("at least 32"), std::string::npos) << tiny.status().ToString();
  EXPECT_FALSE(DemoDataset::Open(Text(1)).ok());
  EXPECT_FALSE(DemoDataset::Open(Text(-5)).ok());
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    auto r = DemoDataset::Open(Captions(64, bad));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("image_fraction"), std::string::npos);
  }

  DemoOptions missing = Captions(64);
  missing.fashion_dir = "/nonexistent/fmnist";
  auto r = DemoDataset::Open(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/fmnist/train-images-idx3-ubyte.gz"), std::string::npos);
  EXPECT_NE(r.status().message().find("dataset-fashion-mnist"), std::string::npos);
}

// An uncompressed copy of the files (as torchvision's raw/ folder holds,
// and as the tests' build-time copy does) is read instead of the .gz beside
// it, and yields the same samples as the Debian package's .gz files alone.
TEST(DemoData, AnUncompressedCopyIsReadInsteadOfTheGzipAndYieldsTheSameSamples) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  const std::string dir = fixtures::ScratchDir(kScratch, "uncompressed");
  for (const char* name :
       {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    auto bytes = ReadMaybeGzipFile(DefaultFashionMnistDir() + "/" + name + ".gz", "dataset-fashion-mnist");
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    std::ofstream(dir + "/" + name, std::ios::binary) << *bytes;
  }
  DemoOptions gz = Captions(64), raw = Captions(64);
  gz.fashion_dir = kDebianFashionMnistDir;
  raw.fashion_dir = dir;
  const auto from_gz = OpenOrDie(gz), from_raw = OpenOrDie(raw);
  ASSERT_TRUE(from_gz && from_raw);
  ASSERT_EQ(from_raw->NumTrain(), from_gz->NumTrain());
  ASSERT_EQ(from_raw->NumTest(), from_gz->NumTest());
  for (int64_t id : {int64_t{0}, int64_t{1}, from_gz->NumTrain() / 2, from_gz->NumTrain() - 1}) {
    const DemoSample a = from_gz->LoadTrain(id).ValueOrDie(), b = from_raw->LoadTrain(id).ValueOrDie();
    EXPECT_EQ(a.input_ids, b.input_ids) << id;
    EXPECT_EQ(a.image, b.image) << id;
  }
  EXPECT_EQ(from_gz->LoadTest(7).ValueOrDie().image, from_raw->LoadTest(7).ValueOrDie().image);
  // The uncompressed file is the one read: cut short, it is refused by name.
  fs::resize_file(dir + "/train-images-idx3-ubyte", 100);
  auto cut = DemoDataset::Open(raw);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("train-images-idx3-ubyte"), std::string::npos) << cut.status().ToString();
  EXPECT_EQ(cut.status().message().find("ubyte.gz"), std::string::npos) << cut.status().ToString();
}

TEST(DemoErrors, CorruptIdxFileIsCorruptionNamingTheFile) {
  const std::string dir = fixtures::ScratchDir(kScratch, "corrupt");
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz"}) {
    std::ofstream f(dir + "/" + name);
    f << "this is not an idx file";  // a plain file: zlib reads it through
  }
  DemoOptions o = Captions(64);
  o.fashion_dir = dir;
  auto r = DemoDataset::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("train-images-idx3-ubyte.gz"), std::string::npos) << r.status().ToString();
}

// Where Fashion-MNIST is looked up: $MAESTRO_FASHION_MNIST_DIR, else the
// Debian folder. Open, FindFashionMnist and the tests' skip helper all follow
// it, so pointing it at an empty folder hides the data from all three.
class FashionMnistDirEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv(kFashionMnistDirEnv);
    had_ = old != nullptr;
    if (had_) old_ = old;
  }
  void TearDown() override {
    if (had_) {
      ::setenv(kFashionMnistDirEnv, old_.c_str(), 1);
    } else {
      ::unsetenv(kFashionMnistDirEnv);
    }
  }
  bool had_ = false;
  std::string old_;
};

TEST_F(FashionMnistDirEnv, UnsetOrEmptyMeansTheDebianFolder) {
  ::unsetenv(kFashionMnistDirEnv);
  EXPECT_EQ(DefaultFashionMnistDir(), "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(DemoOptions().fashion_dir, "/usr/share/datasets/fashion-mnist");
  ::setenv(kFashionMnistDirEnv, "", 1);
  EXPECT_EQ(DefaultFashionMnistDir(), "/usr/share/datasets/fashion-mnist");
}

TEST_F(FashionMnistDirEnv, AnEmptyFolderIsNotFoundEverywhereNamingTheFileAndTheFix) {
  const std::string empty = fixtures::ScratchDir(kScratch, "fashion_empty");
  ::setenv(kFashionMnistDirEnv, empty.c_str(), 1);
  EXPECT_EQ(DemoOptions().fashion_dir, empty);

  const Status found = FindFashionMnist(DefaultFashionMnistDir());
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.code(), StatusCode::kNotFound);
  EXPECT_NE(found.message().find(empty + "/train-images-idx3-ubyte.gz"), std::string::npos) << found.ToString();
  EXPECT_NE(found.message().find("dataset-fashion-mnist"), std::string::npos) << found.ToString();
  EXPECT_NE(found.message().find(std::string(kFashionMnistDirEnv) + " is '" + empty + "'"), std::string::npos)
      << found.ToString();

  auto opened = DemoDataset::Open(Captions(64));
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kNotFound);
  EXPECT_NE(opened.status().message().find(empty + "/train-images-idx3-ubyte.gz"), std::string::npos)
      << opened.status().ToString();

  std::string why;
  EXPECT_FALSE(fixtures::DemoImagesAvailable(&why));
  EXPECT_NE(why.find(empty + "/train-images-idx3-ubyte.gz"), std::string::npos) << why;
  EXPECT_NE(why.find("dataset-fashion-mnist"), std::string::npos) << why;
}

TEST_F(FashionMnistDirEnv, EachOfTheFourFilesIsLookedForAndOpenReadsTheFolderItNames) {
  const std::string dir = fixtures::ScratchDir(kScratch, "fashion_partial");
  ::setenv(kFashionMnistDirEnv, dir.c_str(), 1);
  const std::vector<std::string> names = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                          "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
  for (const std::string& name : names) {
    const Status found = FindFashionMnist(dir);
    ASSERT_FALSE(found.ok()) << "before " << name;
    EXPECT_NE(found.message().find(dir + "/" + name), std::string::npos) << found.ToString();
    std::ofstream(dir + "/" + name) << "not an idx file";
  }
  EXPECT_TRUE(FindFashionMnist(dir).ok()) << "presence only: the contents are Open's to check";
  EXPECT_TRUE(fixtures::DemoImagesAvailable(nullptr));
  // Open reads the folder the variable names: the made-up files are Corruption there.
  auto opened = DemoDataset::Open(Captions(64));
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kCorruption);
  EXPECT_NE(opened.status().message().find(dir + "/train-images-idx3-ubyte.gz"), std::string::npos)
      << opened.status().ToString();
}

TEST(DemoErrors, OutOfRangeIdsAreInvalidArgument) {
  auto ds = OpenOrDie(Text(64));
  ASSERT_TRUE(ds);
  for (int64_t id : {int64_t{-1}, ds->NumTrain()}) {
    auto s = ds->LoadTrain(id);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("out of range"), std::string::npos);
  }
  EXPECT_FALSE(ds->LoadTest(ds->NumTest()).ok());
  EXPECT_EQ(DemoDataset::ClassName(9), "ankle boot");
  EXPECT_EQ(DemoDataset::ClassName(0), "t-shirt/top");
  EXPECT_EQ(DemoDataset::ClassName(10), "<class 10?>");
  auto unwritable = ds->WriteManifest("/nonexistent/dir/m.jsonl");
  ASSERT_FALSE(unwritable.ok());
  EXPECT_EQ(unwritable.status().code(), StatusCode::kIOError);
  EXPECT_NE(unwritable.status().message().find("/nonexistent/dir/m.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace maestro::datasets
