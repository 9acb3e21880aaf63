// SPDX-License-Identifier: Apache-2.0
#include "datasets/demo_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>

#include "base/checks.h"
#include "base/splitmix.h"
#include "datasets/default_text.h"
#include "datasets/idx_file.h"

namespace maestro::datasets {

namespace {

constexpr const char* kFashionPackageHint =
    "install the Debian package dataset-fashion-mnist (scripts/setup.sh does), or set MAESTRO_FASHION_MNIST_DIR to "
    "a folder holding the four Fashion-MNIST files (.gz, or uncompressed)";

// The idx file of `what` ("images" or "labels") of Fashion-MNIST split
// `split` ("train" or "t10k") in `dir`: the one name Open and
// FindFashionMnist use. The uncompressed file when `dir` holds one (as
// torchvision's raw/ folder does; it reads without inflating 26 MB on every
// rank), else the .gz the Debian package installs.
std::string FashionFile(const std::string& dir, const std::string& split, const std::string& what) {
  const std::string path = fmt::format("{}/{}-{}-idx{}-ubyte", dir, split, what, what == "images" ? 3 : 1);
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) ? path : path + ".gz";
}

// Caption prefixes, each followed by the class word token. The longest fixes
// MinCaptionSeqLen(); every template is used at every valid seq_len.
constexpr std::array<std::string_view, 3> kCaptionTemplates = {"a photo of a ", "this is a ", "it shows a "};

constexpr std::array<const char*, kNumClasses> kClassNames = {
    "t-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle boot"};

// Held-out share of the text chunks (the text test split is the last ones).
constexpr int64_t kTextTestDivisor = 20;  // 1/20 = 5%
constexpr double kMinImageFraction = 0.01;
constexpr int64_t kMaxSeqLen = int64_t{1} << 20;

// The caption template of sample `id` of split `split` (0 train, 1 test).
std::string_view CaptionTemplate(uint64_t seed, int split, int64_t id) {
  const uint64_t h = SplitMix64(SplitMix64(seed * 2 + static_cast<uint64_t>(split)) ^ static_cast<uint64_t>(id));
  return kCaptionTemplates[h % kCaptionTemplates.size()];
}

// Text tokens (non-pad, non-image positions) of a caption: <bos> prefix <class> <eos>.
int64_t CaptionTextTokens(std::string_view prefix) {
  return 3 + static_cast<int64_t>(prefix.size());
}

// target[t] = input[t+1], except: the last position, positions whose next
// token is a pad or an image placeholder, and image positions themselves.
void FillTargets(DemoSample& s) {
  const size_t n = s.input_ids.size();
  s.target_ids.assign(n, kIgnoreTarget);
  for (size_t t = 0; t + 1 < n; ++t) {
    const int64_t cur = s.input_ids[t];
    const int64_t next = s.input_ids[t + 1];
    if (cur == kImage || cur == kPad || next == kImage || next == kPad) continue;
    s.target_ids[t] = next;
  }
}

}  // namespace

StatusOr<DemoKind> DemoKindFromName(const std::string& name) {
  if (name == "fashion_mnist_captions") return DemoKind::kFashionMnistCaptions;
  if (name == "text") return DemoKind::kText;
  return Status::InvalidArgument(
      fmt::format("unknown demo dataset '{}' (expected fashion_mnist_captions or text)", name));
}

const char* DemoKindName(DemoKind kind) {
  return kind == DemoKind::kFashionMnistCaptions ? "fashion_mnist_captions" : "text";
}

int64_t MinCaptionSeqLen() {
  int64_t longest = 0;
  for (std::string_view t : kCaptionTemplates) longest = std::max(longest, CaptionTextTokens(t));
  return kImageTokens + longest;
}

std::string DefaultFashionMnistDir() {
  const char* dir = std::getenv(kFashionMnistDirEnv);
  return dir != nullptr && dir[0] != '\0' ? std::string(dir) : std::string(kDebianFashionMnistDir);
}

Status FindFashionMnist(const std::string& dir) {
  for (const char* split : {"train", "t10k"}) {
    for (const char* what : {"images", "labels"}) {
      const std::string path = FashionFile(dir, split, what);
      std::error_code error;
      if (!std::filesystem::is_regular_file(path, error)) {
        const char* env_dir = std::getenv(kFashionMnistDirEnv);
        return Status::NotFound(fmt::format(
            "{}: no such file ({}{})", path, kFashionPackageHint,
            env_dir != nullptr ? fmt::format("; {} is '{}' now", kFashionMnistDirEnv, env_dir) : std::string()));
      }
    }
  }
  return Status::Ok();
}

struct DemoDataset::Impl {
  // Fashion-MNIST, raw bytes read in place (normalized when a sample is
  // built): every rank opens the dataset, and a rank reads only its samples.
  IdxFile train_images;  // (num_train_images, 28, 28)
  IdxFile train_labels;  // (num_train_images)
  IdxFile test_images;   // (num_test_images, 28, 28)
  IdxFile test_labels;   // (num_test_images)
  int64_t num_train_images = 0;
  int64_t num_test_images = 0;

  std::string text;
  int64_t chunk_bytes = 0;  // seq_len - 1
  int64_t num_chunks = 0;
  int64_t num_train_chunks = 0;

  int64_t num_train = 0;  // train ids

  // Captions set: id -> (has image, image index or text index), by the
  // Bresenham rule: ids 0..i-1 hold floor(i*I/M) images.
  bool IdHasImage(int64_t id) const {
    const int64_t images = num_train_images;
    return (id + 1) * images / num_train - id * images / num_train == 1;
  }
  int64_t ImageIndexOfId(int64_t id) const { return id * num_train_images / num_train; }
  int64_t TextIndexOfId(int64_t id) const { return id - id * num_train_images / num_train; }
};

DemoDataset::DemoDataset(DemoOptions options) : options_(std::move(options)), impl_(std::make_unique<Impl>()) {}
DemoDataset::~DemoDataset() = default;

namespace {

// The demo text: `options.text_path`'s bytes (gzip decompressed) or the
// default text, and where it came from.
StatusOr<DefaultText> ReadDemoText(const DemoOptions& options) {
  if (options.text_path.empty()) return ReadDefaultText();
  DefaultText out;
  MAESTRO_ASSIGN_OR_RETURN(out.text, ReadMaybeGzipFile(options.text_path, "check the dataset's text_path"));
  out.source = options.text_path;
  return out;
}

// A text of `text_bytes` cut into samples of seq_len tokens (<bos> then
// seq_len - 1 bytes): the last 1/kTextTestDivisor of the chunks (at least
// one) are the test split.
struct TextChunks {
  int64_t chunk_bytes = 0, num_chunks = 0, num_train_chunks = 0;
};
StatusOr<TextChunks> SplitText(size_t text_bytes, const std::string& source, int64_t seq_len) {
  TextChunks c;
  c.chunk_bytes = seq_len - 1;
  c.num_chunks = static_cast<int64_t>(text_bytes) / c.chunk_bytes;
  if (c.num_chunks < 2) {
    return Status::InvalidArgument(fmt::format(
        "demo text {} has {} bytes: too short for seq_len {} (need at least 2 chunks of {} bytes, one to train on "
        "and one held out); use a smaller seq_len or a longer text_path",
        source, text_bytes, seq_len, c.chunk_bytes));
  }
  c.num_train_chunks = c.num_chunks - std::max<int64_t>(1, c.num_chunks / kTextTestDivisor);
  return c;
}

// The captions set's train samples: every train image once, with text
// samples mixed in so that `image_fraction` of them carry an image.
int64_t CaptionTrainSamples(int64_t train_images, double image_fraction) {
  if (image_fraction >= 1.0) return train_images;
  return std::max<int64_t>(train_images, std::llround(static_cast<double>(train_images) / image_fraction));
}

Status LoadFashionSplit(const std::string& dir, const std::string& split, IdxFile& images, IdxFile& labels,
                        int64_t& count) {
  const std::string images_path = FashionFile(dir, split, "images");
  const std::string labels_path = FashionFile(dir, split, "labels");
  MAESTRO_ASSIGN_OR_RETURN(images, IdxFile::Open(images_path, 3, kFashionPackageHint));
  MAESTRO_ASSIGN_OR_RETURN(labels, IdxFile::Open(labels_path, 1, kFashionPackageHint));
  if (images.dims()[1] != kImageSide || images.dims()[2] != kImageSide) {
    return Status::Corruption(fmt::format("{}: images are {}x{}, expected {}x{}", images_path, images.dims()[1],
                                          images.dims()[2], kImageSide, kImageSide));
  }
  if (images.dims()[0] != labels.dims()[0]) {
    return Status::Corruption(fmt::format("{} has {} images but {} has {} labels", images_path, images.dims()[0],
                                          labels_path, labels.dims()[0]));
  }
  if (images.dims()[0] == 0) return Status::Corruption(fmt::format("{}: no images", images_path));
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels.data()[i] >= kNumClasses) {
      return Status::Corruption(
          fmt::format("{}: label {} of sample {} is not a class 0..9", labels_path, labels.data()[i], i));
    }
  }
  count = images.dims()[0];
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<DemoDataset>> DemoDataset::Open(const DemoOptions& options) {
  const bool captions = options.kind == DemoKind::kFashionMnistCaptions;
  const int64_t min_len = captions ? MinCaptionSeqLen() : 2;
  if (options.seq_len < min_len || options.seq_len > kMaxSeqLen) {
    return Status::InvalidArgument(
        fmt::format("demo dataset '{}': seq_len {} is out of range: it must be at least {}{} and at most {}",
                    DemoKindName(options.kind), options.seq_len, min_len,
                    captions ? fmt::format(" (<bos>, {} image tokens, the caption \"{}\", the class word, <eos>)",
                                           kImageTokens, kCaptionTemplates[0])
                             : std::string(" (<bos> and one byte)"),
                    kMaxSeqLen));
  }
  if (captions && !(options.image_fraction >= kMinImageFraction && options.image_fraction <= 1.0)) {
    return Status::InvalidArgument(
        fmt::format("demo dataset 'fashion_mnist_captions': image_fraction {} must be in [{}, 1]",
                    options.image_fraction, kMinImageFraction));
  }

  std::unique_ptr<DemoDataset> ds(new DemoDataset(options));
  Impl& impl = *ds->impl_;

  if (captions) {
    MAESTRO_RETURN_IF_ERROR(
        LoadFashionSplit(options.fashion_dir, "train", impl.train_images, impl.train_labels, impl.num_train_images));
    MAESTRO_RETURN_IF_ERROR(
        LoadFashionSplit(options.fashion_dir, "t10k", impl.test_images, impl.test_labels, impl.num_test_images));
  }

  // The text (always for the text set; for captions only when text is mixed in).
  const bool needs_text = !captions || options.image_fraction < 1.0;
  if (needs_text) {
    MAESTRO_ASSIGN_OR_RETURN(DefaultText text, ReadDemoText(options));
    impl.text = std::move(text.text);
    ds->text_source_ = std::move(text.source);
    MAESTRO_ASSIGN_OR_RETURN(const TextChunks chunks, SplitText(impl.text.size(), ds->text_source_, options.seq_len));
    impl.chunk_bytes = chunks.chunk_bytes;
    impl.num_chunks = chunks.num_chunks;
    impl.num_train_chunks = chunks.num_train_chunks;
  }
  impl.num_train =
      captions ? CaptionTrainSamples(impl.num_train_images, options.image_fraction) : impl.num_train_chunks;
  return ds;
}

std::string BuiltInDatasetName(const std::string& dataset, bool images) {
  if (!dataset.empty()) return dataset;
  return images ? "fashion_mnist_captions" : "text";
}

StatusOr<int64_t> DemoTrainSamples(const DemoOptions& options) {
  if (options.kind == DemoKind::kFashionMnistCaptions) {
    return CaptionTrainSamples(kFashionMnistTrainImages, options.image_fraction);
  }
  MAESTRO_ASSIGN_OR_RETURN(const DefaultText text, ReadDemoText(options));
  MAESTRO_ASSIGN_OR_RETURN(const TextChunks chunks, SplitText(text.text.size(), text.source, options.seq_len));
  return chunks.num_train_chunks;
}

int64_t DemoDataset::NumTrain() const {
  return impl_->num_train;
}

int64_t DemoDataset::NumTest() const {
  return options_.kind == DemoKind::kFashionMnistCaptions ? impl_->num_test_images
                                                          : impl_->num_chunks - impl_->num_train_chunks;
}

int64_t DemoDataset::NumTextChunks() const {
  return impl_->num_chunks;
}
int64_t DemoDataset::NumTrainTextChunks() const {
  return impl_->num_train_chunks;
}

namespace {

DemoSample BuildTextSample(int64_t id, const std::string& text, int64_t chunk, int64_t chunk_bytes, int64_t seq_len) {
  DemoSample s;
  s.id = id;
  s.input_ids.resize(static_cast<size_t>(seq_len));
  s.input_ids[0] = kBos;
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data()) + chunk * chunk_bytes;
  for (int64_t i = 0; i < chunk_bytes; ++i) s.input_ids[static_cast<size_t>(i + 1)] = bytes[i];
  FillTargets(s);
  return s;
}

DemoSample BuildCaptionSample(int64_t id, const uint8_t* pixels, int label, std::string_view prefix, int64_t seq_len) {
  DemoSample s;
  s.id = id;
  s.has_image = true;
  s.label = label;
  s.input_ids.assign(static_cast<size_t>(seq_len), kPad);
  size_t pos = 0;
  s.input_ids[pos++] = kBos;
  for (int i = 0; i < kImageTokens; ++i) s.input_ids[pos++] = kImage;
  for (char c : prefix) s.input_ids[pos++] = static_cast<unsigned char>(c);
  s.answer_position = static_cast<int64_t>(pos) - 1;
  s.input_ids[pos++] = ClassToken(label);
  s.input_ids[pos++] = kEos;
  // The caption's prefix is the prompt; the loss covers the response only
  // (the class token and <eos>), as in instruction tuning of VLMs.
  s.target_ids.assign(static_cast<size_t>(seq_len), kIgnoreTarget);
  s.target_ids[static_cast<size_t>(s.answer_position)] = ClassToken(label);
  s.target_ids[static_cast<size_t>(s.answer_position + 1)] = kEos;
  s.image.resize(kImagePixels);
  constexpr float kScale = 1.0f / (255.0f * kPixelStd);
  constexpr float kShift = kPixelMean / kPixelStd;
  for (int i = 0; i < kImagePixels; ++i)
    s.image[static_cast<size_t>(i)] = static_cast<float>(pixels[i]) * kScale - kShift;
  return s;
}

}  // namespace

StatusOr<DemoSample> DemoDataset::LoadTrain(int64_t sample_id) const {
  const Impl& impl = *impl_;
  if (sample_id < 0 || sample_id >= impl.num_train) {
    return Status::InvalidArgument(fmt::format("demo dataset '{}': train sample id {} is out of range [0, {})",
                                               DemoKindName(options_.kind), sample_id, impl.num_train));
  }
  if (options_.kind == DemoKind::kText) {
    return BuildTextSample(sample_id, impl.text, sample_id, impl.chunk_bytes, options_.seq_len);
  }
  if (impl.IdHasImage(sample_id)) {
    const int64_t image = impl.ImageIndexOfId(sample_id);
    return BuildCaptionSample(sample_id, impl.train_images.data() + image * kImagePixels,
                              impl.train_labels.data()[image], CaptionTemplate(options_.seed, 0, sample_id),
                              options_.seq_len);
  }
  const int64_t chunk = impl.TextIndexOfId(sample_id) % impl.num_train_chunks;
  return BuildTextSample(sample_id, impl.text, chunk, impl.chunk_bytes, options_.seq_len);
}

StatusOr<DemoSample> DemoDataset::LoadTest(int64_t index) const {
  const Impl& impl = *impl_;
  if (index < 0 || index >= NumTest()) {
    return Status::InvalidArgument(fmt::format("demo dataset '{}': test index {} is out of range [0, {})",
                                               DemoKindName(options_.kind), index, NumTest()));
  }
  if (options_.kind == DemoKind::kText) {
    return BuildTextSample(index, impl.text, impl.num_train_chunks + index, impl.chunk_bytes, options_.seq_len);
  }
  return BuildCaptionSample(index, impl.test_images.data() + index * kImagePixels, impl.test_labels.data()[index],
                            CaptionTemplate(options_.seed, 1, index), options_.seq_len);
}

StatusOr<int64_t> DemoDataset::WriteManifest(const std::string& path) const {
  return datasets::WriteManifest(*this, path);
}

SampleTokens DemoDataset::TokensOf(int64_t id) const {
  const Impl& impl = *impl_;
  if (options_.kind == DemoKind::kText) return {fmt::format("text:{}", id), {{"text", options_.seq_len}}};
  if (impl.IdHasImage(id)) {
    return {fmt::format("fmnist:train:{}", impl.ImageIndexOfId(id)),
            {{"text", CaptionTextTokens(CaptionTemplate(options_.seed, 0, id))}, {"image", kImageTokens}}};
  }
  return {fmt::format("text:{}", impl.TextIndexOfId(id) % impl.num_train_chunks), {{"text", options_.seq_len}}};
}

int64_t DemoDataset::NumSamples(Split split) const {
  return split == Split::kTrain ? NumTrain() : NumTest();
}

StatusOr<SampleRecord> DemoDataset::Load(Split split, int64_t id) const {
  MAESTRO_ASSIGN_OR_RETURN(DemoSample sample, split == Split::kTrain ? LoadTrain(id) : LoadTest(id));
  SampleRecord record;
  record.id = sample.id;
  record.input_ids = std::move(sample.input_ids);
  record.target_ids = std::move(sample.target_ids);
  if (sample.has_image) record.images.push_back({1, kImageSide, kImageSide, std::move(sample.image)});
  record.answer_position = sample.answer_position;
  record.label = sample.label;
  return record;
}

std::string DemoDataset::ClassName(int label) {
  if (label < 0 || label >= kNumClasses) return fmt::format("<class {}?>", label);
  return kClassNames[static_cast<size_t>(label)];
}

std::string DemoDataset::Decode(const std::vector<int64_t>& ids) const {
  std::string out;
  size_t i = 0;
  while (i < ids.size()) {
    const int64_t id = ids[i];
    if (id == kImage || id == kPad) {
      size_t j = i;
      while (j < ids.size() && ids[j] == id) ++j;
      out += id == kImage ? "<image>" : "<pad>";
      if (j - i > 1) out += fmt::format("x{}", j - i);
      i = j;
      continue;
    }
    if (id >= 0 && id < 256) {
      const auto c = static_cast<unsigned char>(id);
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\\') {
        out += "\\\\";
      } else if (c >= 0x20 && c < 0x7f) {
        out += static_cast<char>(c);
      } else {
        out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
      }
    } else if (id == kBos) {
      out += "<bos>";
    } else if (id == kEos) {
      out += "<eos>";
    } else if (LabelOfToken(id) >= 0) {
      out += fmt::format("<class:{}>", ClassName(LabelOfToken(id)));
    } else {
      out += fmt::format("<id:{}>", id);
    }
    ++i;
  }
  return out;
}

}  // namespace maestro::datasets
