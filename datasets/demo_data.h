// SPDX-License-Identifier: Apache-2.0
// The demo data sets of issue #7, torch-free: Fashion-MNIST images with
// captions naming the garment, mixed with text-only chunks of a real English
// text, and a text-only set for the language-modelling / KD demo. Formats,
// sources and the mixing rule: docs/datasets.md.
//
// Owns: a byte-level tokenizer with a few special tokens; the in-memory copy
// of the Fashion-MNIST idx files and of the text; the mapping from a stable
// sample id to a fully built sample (token ids, targets, image); the JSONL
// manifest the datalayer's SampleIndex ingests. A DemoDataset is a
// SampleSource (sample_source.h): the runtime reads it through that seam only.
// May call: base, datasets/sample_source, zlib (gzip-compressed idx files),
// std::filesystem and getenv (where Fashion-MNIST is).
// Thread safety: a DemoDataset is immutable after Open(); every const method
// may be called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "datasets/sample_source.h"

namespace maestro::datasets {

// Byte-level tokenizer + specials. Ids 0..255 are bytes; then the specials;
// 260..269 are the ten garment class words (one token each). All ids are
// below kVocabSize (the tiny specs' decoders have vocab 512).
inline constexpr int64_t kVocabSize = 512;
inline constexpr int64_t kPad = 256;
inline constexpr int64_t kBos = 257;
inline constexpr int64_t kEos = 258;
inline constexpr int64_t kImage = 259;  // placeholder where image embeddings are spliced in
inline constexpr int64_t kFirstClassToken = 260;
inline constexpr int kNumClasses = 10;
inline constexpr int64_t kIgnoreTarget = -100;  // target of positions without loss
inline constexpr int kImageTokens = 16;         // (28/7)^2 patches -> 16 embeddings per image
inline constexpr int kImageSide = 28;
inline constexpr int kImagePixels = kImageSide * kImageSide;  // 784, one channel
inline constexpr float kPixelMean = 0.2860f;                  // Fashion-MNIST train mean of x/255
inline constexpr float kPixelStd = 0.3530f;                   // ... and its standard deviation

// The class word token of garment class `label` (0..9).
inline constexpr int64_t ClassToken(int label) {
  return kFirstClassToken + label;
}
// The garment class of a class word token, or -1 when `token` is not one.
inline constexpr int LabelOfToken(int64_t token) {
  return (token >= kFirstClassToken && token < kFirstClassToken + kNumClasses)
             ? static_cast<int>(token - kFirstClassToken)
             : -1;
}

enum class DemoKind { kFashionMnistCaptions, kText };

// "fashion_mnist_captions" | "text"; anything else is InvalidArgument.
StatusOr<DemoKind> DemoKindFromName(const std::string& name);
const char* DemoKindName(DemoKind kind);

// Smallest seq_len that fits a caption sample (the longest caption template).
int64_t MinCaptionSeqLen();

// The environment variable that points the captions set at another folder of
// Fashion-MNIST idx files (docs/datasets.md); unset or "" = the Debian path.
inline constexpr const char* kFashionMnistDirEnv = "MAESTRO_FASHION_MNIST_DIR";
inline constexpr const char* kDebianFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Where the captions set reads Fashion-MNIST from by default:
// $MAESTRO_FASHION_MNIST_DIR when set and non-empty, else the folder the
// Debian package dataset-fashion-mnist installs (kDebianFashionMnistDir).
std::string DefaultFashionMnistDir();

// OK when `dir` holds the four files DemoDataset::Open reads for the captions
// set ({train,t10k}-{images-idx3,labels-idx1}-ubyte.gz); NotFound naming the
// first missing one and how to install it otherwise. Checks presence only
// (Open still verifies the contents). Tests use it to skip without the data.
Status FindFashionMnist(const std::string& dir);

// Fashion-MNIST's train split: 60,000 images (Xiao, Rasul, Vollgraf,
// "Fashion-MNIST", arXiv:1708.07747; the files say so again when
// DemoDataset opens them).
inline constexpr int64_t kFashionMnistTrainImages = 60000;

struct DemoOptions {
  DemoKind kind = DemoKind::kText;
  int64_t seq_len = 64;                                // tokens per sample (inputs and targets)
  std::string fashion_dir = DefaultFashionMnistDir();  // the four idx files; see FindFashionMnist
  // "" = the default Debian text (fortunes-min's literature, fortunes and
  // riddles; GPL-3 from base-files when fortunes-min is absent). A path is
  // read as raw bytes (gzip-compressed files are decompressed).
  std::string text_path = "";
  double image_fraction = 0.5;  // share of captions-set train samples with an image, in (0, 1]
  uint64_t seed = 0;            // picks the caption template of each sample
};

struct DemoSample {
  int64_t id = 0;                   // train: manifest id; test: test index
  std::vector<int64_t> input_ids;   // (seq_len); kImage at the kImageTokens image positions; kPad after the end
  std::vector<int64_t> target_ids;  // (seq_len); next-token target of each position, kIgnoreTarget where none
                                    // (pads, image positions, the position before an image token, the last position)
  bool has_image = false;
  std::vector<float> image;      // (1*28*28) normalized (x/255 - 0.2860)/0.3530 when has_image, else empty
  int label = -1;                // garment class 0..9 for captions, -1 for text
  int64_t answer_position = -1;  // position t whose logits predict the class token
                                 // (input_ids[t+1] is the class token); -1 for text
};

// The built-in set that data without a corpus or manifest reads: `dataset`
// when it names one, else "fashion_mnist_captions" when the data carries
// images, else "text" (the compiler's sizing and the runtime's choice).
std::string BuiltInDatasetName(const std::string& dataset, bool images);

// The train samples DemoDataset::Open(options) holds, without opening it:
// captions, Fashion-MNIST's train images spread by image_fraction (no file
// read); text, its chunks less the held-out ones (the text is read). What
// the compiler prices a job over (compiler/job_pricing.cc).
StatusOr<int64_t> DemoTrainSamples(const DemoOptions& options);

class DemoDataset : public SampleSource {
 public:
  // Reads every file once (gzip via zlib) and keeps it in memory (~56 MB for
  // the captions set). Errors name the missing file and the Debian package to
  // install; a seq_len too small for a caption is InvalidArgument.
  static StatusOr<std::unique_ptr<DemoDataset>> Open(const DemoOptions& options);

  // JSONL manifest of the TRAIN split for the datalayer's SampleIndex, one line
  // per sample in id order:
  //   {"id": 17, "location": "fmnist:train:123" | "text:<chunk>", "tokens": {"text": n, "image": 16}}
  // ("image" only for samples with an image; "text" counts the non-pad,
  // non-image positions). Written by datasets::WriteManifest. Returns the count.
  StatusOr<int64_t> WriteManifest(const std::string& path) const;

  int64_t NumTrain() const;
  // REQUIRES nothing: an id outside [0, NumTrain()) is InvalidArgument.
  // Deterministic: the same options give the same sample for an id.
  StatusOr<DemoSample> LoadTrain(int64_t sample_id) const;
  // Captions: 10000 (every test image, with a caption). Text: the held-out chunks.
  int64_t NumTest() const;
  StatusOr<DemoSample> LoadTest(int64_t index) const;

  // "t-shirt/top", "trouser", ...; "<class N?>" outside 0..9.
  static std::string ClassName(int label);
  // Printable rendering for logs: bytes as text (non-printable as \xNN),
  // specials as <bos>, <eos>, <image>x16, <pad>x9, <class:trouser>.
  std::string Decode(const std::vector<int64_t>& ids) const;

  const DemoOptions& options() const { return options_; }
  // Where the text came from, e.g. "fortunes-min (/usr/share/games/fortunes/...)".
  const std::string& text_source() const { return text_source_; }
  int64_t NumTextChunks() const;       // all chunks of seq_len-1 bytes
  int64_t NumTrainTextChunks() const;  // the first ~95%; the rest is the text test split

  // SampleSource: the train and test splits above as SampleRecords (one
  // image of (1, 28, 28) when has_image), the manifest's token counts, and
  // caption answers for the captions set.
  int64_t NumSamples(Split split) const override;
  StatusOr<SampleRecord> Load(Split split, int64_t id) const override;
  SampleTokens TokensOf(int64_t id) const override;
  bool HasCaptionAnswers() const override { return options_.kind == DemoKind::kFashionMnistCaptions; }

  ~DemoDataset() override;

 private:
  struct Impl;
  explicit DemoDataset(DemoOptions options);
  DemoOptions options_;
  std::string text_source_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace maestro::datasets
