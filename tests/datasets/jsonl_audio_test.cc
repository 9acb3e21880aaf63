// SPDX-License-Identifier: Apache-2.0
// Audio clips in a JSONL manifest (datasets/jsonl_manifest.h "audios",
// "audio_positions"; datasets/jsonl_source.h): a sample's clips (WAV and
// FLAC at 8, 16 and 44.1 kHz, which this test writes with libsndfile) come
// out of Load as the featuriser's log-mel features, in the order of their
// placeholder runs, beside the sample's images; the token counts and the
// index manifest carry "audio"; and each bad input (a clip that does not
// decode, more clips than max_audios_per_sample, placeholders that do not
// match, clips for a model without an audio placeholder, one id for both
// kinds) is an error naming the manifest, the line, the sample and the fix,
// or under kSkip a skipped and counted line.
#include <gtest/gtest.h>
#include <sndfile.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "datasets/audio_features.h"
#include "datasets/jsonl_source.h"
#include "tests/fixtures/image_files.h"
#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::EncodePng8;
using testing::SolidPixels;
using testing::WriteBytes;

constexpr int64_t kImageToken = 63;
constexpr int64_t kTokensPerImage = 2;
constexpr int64_t kAudioToken = 62;
constexpr int64_t kFrames = 8;                          // 80 ms of log-mel frames
constexpr int64_t kTokensPerAudio = (kFrames + 1) / 2;  // 4

std::string ScratchDir(const std::string& name) {
  const std::string dir = fixtures::ScratchDir("maestro-jsonl-audio-", name);
  fs::create_directories(dir + "/clips");
  return dir;
}

JsonlSourceOptions AudioOptions() {
  JsonlSourceOptions o;
  o.manifest.seq_len = 16;
  o.manifest.vocab_size = 64;
  o.manifest.image_token_id = kImageToken;
  o.manifest.tokens_per_image = kTokensPerImage;
  o.manifest.audio_token_id = kAudioToken;
  o.manifest.tokens_per_audio = kTokensPerAudio;
  o.image.channels = 3;
  o.image.height = o.image.width = 4;
  o.image.mean = {0.0f, 0.0f, 0.0f};
  o.image.std = {1.0f, 1.0f, 1.0f};
  o.audio.mel_bins = 16;
  o.audio.frames = kFrames;
  o.max_audios_per_sample = 2;
  return o;
}

// A 0.1 s tone of `hz` at `rate` Hz, written by libsndfile as `format`
// (SF_FORMAT_WAV | SF_FORMAT_PCM_16, ...).
void WriteTone(const std::string& path, int rate, int format, double hz) {
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = 1;
  info.format = format;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << path << ": " << sf_strerror(nullptr);
  std::vector<float> samples(static_cast<size_t>(rate / 10));
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i] = static_cast<float>(0.4 * std::sin(2.0 * M_PI * hz * static_cast<double>(i) / rate));
  }
  EXPECT_EQ(sf_writef_float(f, samples.data(), static_cast<sf_count_t>(samples.size())),
            static_cast<sf_count_t>(samples.size()));
  sf_close(f);
}

void WriteClips(const std::string& dir) {
  WriteTone(dir + "/clips/a16.wav", 16000, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 440.0);
  WriteTone(dir + "/clips/b8.flac", 8000, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 660.0);
  WriteTone(dir + "/clips/c44.wav", 44100, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 1320.0);
  ASSERT_TRUE(WriteBytes(dir + "/red.png", EncodePng8(SolidPixels(4, 4, 3, 255, 0, 0), 4, 4, 3)));
  ASSERT_TRUE(WriteBytes(dir + "/clips/broken.wav", std::string("RIFF\x24\x00\x00\x00WAVEjunkjunkjunk", 20)));
}

// `ids` with a clip's placeholders (kTokensPerAudio of kAudioToken) where
// `audio_at` says and an image's where `image_at` says.
std::vector<int64_t> Ids(const std::vector<int64_t>& audio_at, const std::vector<int64_t>& image_at) {
  std::vector<int64_t> ids(16, 5);
  for (int64_t at : audio_at) {
    for (int64_t k = 0; k < kTokensPerAudio; ++k) ids[static_cast<size_t>(at + k)] = kAudioToken;
  }
  for (int64_t at : image_at) {
    for (int64_t k = 0; k < kTokensPerImage; ++k) ids[static_cast<size_t>(at + k)] = kImageToken;
  }
  return ids;
}

std::string Line(const std::vector<int64_t>& ids, const std::vector<std::string>& audios,
                 const std::vector<std::string>& images = {}, const std::string& user_id = "") {
  json j{{"input_ids", ids}};
  if (!audios.empty()) j["audios"] = audios;
  if (!images.empty()) j["images"] = images;
  if (!user_id.empty()) j["id"] = user_id;
  return j.dump() + "\n";
}

std::string WriteManifest(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/train.jsonl";
  EXPECT_TRUE(WriteBytes(path, text));
  return path;
}

TEST(JsonlAudio, ClipsLoadAsTheirFeaturesInPlaceholderOrderBesideImages) {
  const std::string dir = ScratchDir("load");
  WriteClips(dir);
  const std::string path =
      WriteManifest(dir, Line(Ids({}, {}), {}) + Line(Ids({1}, {}), {"clips/a16.wav"}) +
                             Line(Ids({1, 6}, {11}), {"clips/b8.flac", "clips/c44.wav"}, {"red.png"}, "both"));
  auto source = JsonlSampleSource::Open(path, AudioOptions());
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ASSERT_EQ((*source)->NumSamples(Split::kTrain), 3);
  EXPECT_EQ((*source)->AudiosOf(0), 0);
  EXPECT_EQ((*source)->AudiosOf(2), 2);

  auto text = (*source)->Load(Split::kTrain, 0);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_TRUE(text->audios.empty());
  auto both = (*source)->Load(Split::kTrain, 2);
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  ASSERT_EQ(both->audios.size(), 2u);
  ASSERT_EQ(both->images.size(), 1u);
  const char* files[] = {"clips/b8.flac", "clips/c44.wav"};
  for (size_t k = 0; k < 2; ++k) {
    auto want = LoadAudioForWhisper(dir + "/" + files[k], AudioOptions().audio);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    EXPECT_EQ(both->audios[k].mel_bins, 16);
    EXPECT_EQ(both->audios[k].frames, kFrames);
    EXPECT_EQ(both->audios[k].features, *want) << "clip " << k << " is " << files[k];
  }
  EXPECT_NE(both->audios[0].features, both->audios[1].features);
  // What an LLM section reads (SampleSource::LoadParts): the clips' and the
  // image's shapes, no features, no pixels, and no file opened.
  fs::remove_all(dir + "/clips");
  fs::remove(dir + "/red.png");
  MediaParts layout;
  layout.pixels = false;
  layout.audio_features = false;
  auto shapes = (*source)->LoadParts(Split::kTrain, 2, layout);
  ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
  EXPECT_EQ(shapes->input_ids, both->input_ids);
  ASSERT_EQ(shapes->audios.size(), 2u);
  for (const SampleAudio& clip : shapes->audios) {
    EXPECT_EQ(clip.mel_bins, 16);
    EXPECT_EQ(clip.frames, kFrames);
    EXPECT_TRUE(clip.features.empty());
  }
  ASSERT_EQ(shapes->images.size(), 1u);
  EXPECT_EQ(std::make_tuple(shapes->images[0].channels, shapes->images[0].height, shapes->images[0].width),
            std::make_tuple(both->images[0].channels, both->images[0].height, both->images[0].width));
  EXPECT_TRUE(shapes->images[0].pixels.empty());
  EXPECT_FALSE((*source)->Load(Split::kTrain, 2).ok()) << "with features, the clips are read";
  // Placeholders carry no loss, nor does the position before one.
  EXPECT_EQ(both->target_ids[0], kJsonlIgnoreTarget);
  EXPECT_EQ(both->target_ids[1], kJsonlIgnoreTarget);

  const SampleTokens tokens = (*source)->TokensOf(2);
  ASSERT_EQ(tokens.tokens.size(), 3u);
  EXPECT_EQ(tokens.tokens[1], (std::pair<std::string, int64_t>{"image", kTokensPerImage}));
  EXPECT_EQ(tokens.tokens[2], (std::pair<std::string, int64_t>{"audio", 2 * kTokensPerAudio}));
  EXPECT_EQ((*source)->TokensOf(0).tokens.size(), 1u);
  ASSERT_TRUE((*source)->manifest().WriteIndexManifest(dir + "/index.jsonl").ok());
  std::ifstream in(dir + "/index.jsonl");
  std::string line;
  std::vector<json> lines;
  while (std::getline(in, line)) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_FALSE(lines[0]["tokens"].contains("audio"));
  EXPECT_EQ(lines[1]["tokens"]["audio"], kTokensPerAudio);
  EXPECT_EQ(lines[2]["tokens"]["audio"], 2 * kTokensPerAudio);
  EXPECT_EQ(lines[2]["tokens"]["image"], kTokensPerImage);
}

// The message of opening a manifest of `lines` under `options`: fails the
// test when it opens.
std::string OpenError(const std::string& dir, const std::string& lines, const JsonlSourceOptions& options) {
  auto source = JsonlSampleSource::Open(WriteManifest(dir, lines), options);
  EXPECT_FALSE(source.ok());
  return source.ok() ? std::string() : source.status().message();
}

TEST(JsonlAudio, BadClipsAndPlaceholdersAreErrorsNamingTheLineOrSkipped) {
  const std::string dir = ScratchDir("bad");
  WriteClips(dir);
  const auto o = AudioOptions();
  const std::string good = Line(Ids({1}, {}), {"clips/a16.wav"});

  std::string m = OpenError(dir, good + Line(Ids({1}, {}), {"clips/broken.wav"}, {}, "bad-clip"), o);
  EXPECT_NE(m.find("train.jsonl:2 (sample 1, id \"bad-clip\"): audios[0]"), std::string::npos) << m;
  EXPECT_NE(m.find("broken.wav"), std::string::npos) << m;
  EXPECT_NE(m.find("re-encode the clip (WAV or FLAC)"), std::string::npos) << m;

  m = OpenError(dir, Line(Ids({1, 6, 11}, {}), {"clips/a16.wav", "clips/a16.wav", "clips/a16.wav"}), o);
  EXPECT_NE(m.find("3 audio clips, more than max_audios_per_sample = 2"), std::string::npos) << m;

  m = OpenError(dir, Line(Ids({1}, {}), {"clips/a16.wav", "clips/b8.flac"}), o);
  EXPECT_NE(m.find("input_ids holds 4 audio clip placeholder tokens (id 62), but \"audios\" lists 2"),
            std::string::npos)
      << m;

  m = OpenError(dir, Line(Ids({1}, {}), {"clips/missing.wav"}), o);
  EXPECT_NE(m.find("audios[0] \"clips/missing.wav\""), std::string::npos) << m;
  EXPECT_NE(m.find("does not exist"), std::string::npos) << m;

  auto positions = json::parse(good);
  positions["audio_positions"] = {2};
  m = OpenError(dir, positions.dump() + "\n", o);
  EXPECT_NE(m.find("audio_positions[0] = 2, but audio clip 0 (clips/a16.wav)'s placeholders start at input_ids[1]"),
            std::string::npos)
      << m;

  auto no_audio = o;
  no_audio.manifest.audio_token_id = -1;
  m = OpenError(dir, good, no_audio);
  EXPECT_NE(m.find("lists 1 audio clip(s), but the model takes none (no audio_token_id)"), std::string::npos) << m;

  auto same_id = o;
  same_id.manifest.audio_token_id = kImageToken;
  m = OpenError(dir, good, same_id);
  EXPECT_NE(m.find("each kind needs its own placeholder id"), std::string::npos) << m;

  // Under kSkip the broken clip's line is left out and counted.
  auto skip = o;
  skip.manifest.on_bad_sample = BadSamplePolicy::kSkip;
  auto source =
      JsonlSampleSource::Open(WriteManifest(dir, good + Line(Ids({1}, {}), {"clips/broken.wav"}) + good), skip);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ((*source)->NumSamples(Split::kTrain), 2);
  EXPECT_EQ((*source)->SkippedSamples(), 1);
}

}  // namespace
}  // namespace maestro::datasets
