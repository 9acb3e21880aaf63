// SPDX-License-Identifier: Apache-2.0
#include "runtime/plan_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#include "base/checks.h"
#include "base/log.h"
#include "datalayer/crash_env.h"
#include "datasets/demo_data.h"
#include "datasets/jsonl_source.h"
#include "datasets/megatron_source.h"
#include "plan/model_desc.h"
#include "plan/native_vision.h"
#include "runtime/data_against_plan.h"

namespace maestro::runtime {

namespace {

double ModalityFraction(const plan::Plan& plan, const std::string& name, double fallback) {
  for (const auto& m : plan.data.modalities) {
    if (m.name == name) return m.fraction;
  }
  return fallback;
}

// The smallest vocabulary of the plan's decoders: every token id of the
// corpus must embed in each of them. 0 when the plan has no decoder.
int64_t SmallestDecoderVocab(const plan::Plan& plan) {
  int64_t vocab = 0;
  for (const auto& s : plan.sections) {
    if (s.model.kind != plan::ModelKind::kDecoder) continue;
    vocab = vocab == 0 ? s.model.vocab : std::min(vocab, s.model.vocab);
  }
  return vocab;
}

StatusOr<std::unique_ptr<datasets::SampleSource>> OpenCorpus(const plan::Plan& plan) {
  datasets::MegatronSampleOptions options;
  if (plan.data.sample_rule == "split") {
    options.rule = datasets::MegatronSampleRule::kSplit;
  } else if (plan.data.sample_rule != "pack") {
    return Status::InvalidArgument(
        fmt::format("plan data.sample_rule = '{}' must be \"pack\" or \"split\"", plan.data.sample_rule));
  }
  options.seq_len = plan.data.seq_len;
  if (plan.data.eos_id >= 0) options.eos_id = plan.data.eos_id;
  options.pad_id = plan.data.pad_id;
  options.vocab_size = SmallestDecoderVocab(plan);
  if (options.vocab_size <= 0) {
    return Status::InvalidArgument(
        fmt::format("[data] corpus = '{}': a token corpus needs a decoder section to read it", plan.data.corpus));
  }
  MAESTRO_ASSIGN_OR_RETURN(auto source,
                           datasets::MegatronSampleSource::Open(plan.data.corpus, options, plan.data.test_corpus));
  return std::unique_ptr<datasets::SampleSource>(std::move(source));
}

// Per channel from the plan's override (1 value for every channel, or one
// per channel), else `fallback`.
Status ChannelValues(const std::vector<double>& given, const char* key, int channels,
                     const std::array<float, 3>& fallback, std::array<float, 3>* out) {
  *out = fallback;
  if (given.empty()) return Status::Ok();
  if (given.size() != 1 && given.size() != static_cast<size_t>(channels)) {
    return Status::InvalidArgument(
        fmt::format("[data] {} has {} values; give 1 (every channel) or {} (one per channel "
                    "of the ViT)",
                    key, given.size(), channels));
  }
  for (size_t c = 0; c < out->size(); ++c) (*out)[c] = static_cast<float>(given[given.size() == 1 ? 0 : c]);
  return Status::Ok();
}

// The manifest's audio: the one audio encoder section's features (its
// mel_bins, audio_frames) and placeholder (audio_token_id, ceil(frames / 2)
// rows per clip), or none.
Status SetAudioOptions(const plan::Plan& plan, const std::string& where, datasets::JsonlSourceOptions* options) {
  const auto& d = plan.data;
  std::vector<const plan::SectionPlan*> encoders;
  for (const auto& s : plan.sections) {
    if (s.model.kind == plan::ModelKind::kAudioEncoder) encoders.push_back(&s);
  }
  if (encoders.size() > 1) {
    return Status::InvalidArgument(fmt::format(
        "{}: sections '{}' and '{}' are both audio encoders; the clips of a manifest feed one audio section (keep one)",
        where, encoders[0]->name, encoders[1]->name));
  }
  if (encoders.empty()) {
    if (d.audio_token_id >= 0) {
      return Status::InvalidArgument(fmt::format(
          "{}: data.audio_token_id = {} but no audio encoder section encodes clips; add a [[section]] of a kind = "
          "\"audio_encoder\" model, or drop audio_token_id (a manifest without audio)",
          where, d.audio_token_id));
    }
    return Status::Ok();
  }
  if (d.audio_token_id < 0) {
    return Status::InvalidArgument(fmt::format(
        "{}: audio section '{}' encodes the clips, but data.audio_token_id is not set; set [data] audio_token_id to "
        "the placeholder id your processor repeats per clip (e.g. Qwen2-Audio's <|AUDIO|> = 151646)",
        where, encoders[0]->name));
  }
  const auto& m = encoders[0]->model;
  options->manifest.audio_token_id = d.audio_token_id;
  options->manifest.tokens_per_audio = (m.audio_frames + 1) / 2;
  options->audio.mel_bins = m.mel_bins;
  options->audio.frames = m.audio_frames;
  options->max_audios_per_sample = MaxAudiosPerSample(plan);
  return Status::Ok();
}

// Native resolution (plan/native_vision.h): each image and video at its
// smart_resize size within the plan's pixel bounds, cut into the tower's
// patches (patch, merge, temporal patch), normalised as the fixed grid would
// be; videos at data.video_token_id.
Status SetNativeOptions(const plan::Plan& plan, const plan::SectionPlan& vit, datasets::JsonlSourceOptions* options) {
  if (!plan::NativeResolution(plan)) return Status::Ok();
  MAESTRO_RETURN_IF_ERROR(plan::CheckNativeResolution(plan.data, vit.model, "section '" + vit.name + "'"));
  const plan::ModelDesc& m = vit.model;
  auto& manifest = options->manifest;
  manifest.native_resolution = true;
  manifest.tokens_per_image = 0;
  manifest.video_token_id = plan.data.video_token_id;
  datasets::NativeVisionOptions& native = manifest.native;
  native.patch = static_cast<int>(m.patch_size);
  native.merge = static_cast<int>(plan::SpatialMerge(m));
  const auto temporal = m.extra.find("temporal_patch");
  native.temporal = temporal == m.extra.end() ? 1 : static_cast<int>(temporal->second);
  native.min_pixels = plan.data.image_min_pixels;
  native.max_pixels = plan.data.image_max_pixels;
  native.channels = options->image.channels;
  native.mean = options->image.mean;
  native.std = options->image.std;
  return datasets::ValidateNativeVisionOptions(native);
}

StatusOr<std::unique_ptr<datasets::SampleSource>> OpenManifest(const plan::Plan& plan) {
  const auto& d = plan.data;
  const std::string where = fmt::format("[data] manifest = '{}'", d.manifest);
  datasets::JsonlSourceOptions options;
  options.manifest.seq_len = d.seq_len;
  options.manifest.vocab_size = SmallestDecoderVocab(plan);
  if (options.manifest.vocab_size <= 0) {
    return Status::InvalidArgument(
        fmt::format("{}: a manifest of token ids needs a decoder section to read it", where));
  }
  options.manifest.pad_id = d.pad_id;
  options.manifest.allow_absolute_paths = d.allow_absolute_image_paths;
  if (d.on_bad_sample == "skip") {
    options.manifest.on_bad_sample = datasets::BadSamplePolicy::kSkip;
  } else if (d.on_bad_sample != "error") {
    return Status::InvalidArgument(
        fmt::format("plan data.on_bad_sample = '{}' must be \"error\" or \"skip\"", d.on_bad_sample));
  }
  options.max_images_per_sample = MaxImagesPerSample(plan);
  std::vector<const plan::SectionPlan*> vits;
  for (const auto& s : plan.sections) {
    if (s.model.kind == plan::ModelKind::kVit) vits.push_back(&s);
  }
  if (vits.size() > 1) {
    return Status::InvalidArgument(
        fmt::format("{}: sections '{}' and '{}' are both ViTs; the images of a manifest feed "
                    "one vision section (keep one)",
                    where, vits[0]->name, vits[1]->name));
  }
  if (vits.empty()) {
    if (d.image_token_id >= 0) {
      return Status::InvalidArgument(fmt::format(
          "{}: data.image_token_id = {} but no ViT section encodes images; add a [[section]] of a kind = \"vit\" "
          "model, or drop image_token_id (a manifest without images)",
          where, d.image_token_id));
    }
  } else {
    if (d.image_token_id < 0) {
      return Status::InvalidArgument(fmt::format(
          "{}: ViT section '{}' encodes the images, but data.image_token_id is not set; set [data] image_token_id to "
          "the placeholder id your processor repeats per image (e.g. Qwen2-VL's <|image_pad|> = 151655)",
          where, vits[0]->name));
    }
    options.manifest.image_token_id = d.image_token_id;
    options.manifest.tokens_per_image = VitOutputTokens(vits[0]->model);
    MAESTRO_ASSIGN_OR_RETURN(options.image, ImageSpecOf(plan, *vits[0], &options.decode));
    MAESTRO_RETURN_IF_ERROR(SetNativeOptions(plan, *vits[0], &options));
  }
  MAESTRO_RETURN_IF_ERROR(SetAudioOptions(plan, where, &options));
  MAESTRO_ASSIGN_OR_RETURN(auto source, datasets::JsonlSampleSource::Open(d.manifest, options));
  return std::unique_ptr<datasets::SampleSource>(std::move(source));
}

}  // namespace

int64_t ImageTokenIdOf(const plan::Plan& plan) {
  if (plan.data.image_token_id >= 0) return plan.data.image_token_id;
  if (plan.data.manifest.empty() && plan.data.corpus.empty()) return datasets::kImage;
  return -1;
}

int64_t MaxImagesPerSample(const plan::Plan& plan) {
  return std::max<int64_t>(1, plan.data.max_images_per_sample);
}

int64_t MaxAudiosPerSample(const plan::Plan& plan) {
  return std::max<int64_t>(1, plan.data.max_audios_per_sample);
}

StatusOr<datasets::ImageSpec> ImageSpecOf(const plan::Plan& plan, const plan::SectionPlan& vit,
                                          datasets::DecodeOptions* decode) {
  datasets::ImageSpec spec;
  const plan::ModelDesc& m = vit.model;
  spec.channels = static_cast<int>(m.channels > 0 ? m.channels : 3);
  spec.height = spec.width = static_cast<int>(m.image_size);
  const int layout = VitLayout(m);
  std::array<float, 3> mean{datasets::kPixelMean, datasets::kPixelMean, datasets::kPixelMean};
  std::array<float, 3> stdev{datasets::kPixelStd, datasets::kPixelStd, datasets::kPixelStd};
  *decode = datasets::DecodeOptions{};
  if (layout == plan::kVitLayoutClip || plan::IsQwenVisionLayout(layout)) {
    mean = datasets::kOpenAiClipMean;
    stdev = datasets::kOpenAiClipStd;
  }
  if (layout == plan::kVitLayoutSiglip) {  // SiglipImageProcessor: resize to S x S, mean = std = 0.5
    mean = {0.5f, 0.5f, 0.5f};
    stdev = {0.5f, 0.5f, 0.5f};
  }
  if (layout == plan::kVitLayoutClip) spec.fit = datasets::ImageFit::kShortestEdgeThenCenterCrop;
  if (plan::IsQwenVisionLayout(layout)) decode->alpha = datasets::AlphaHandling::kCompositeOnWhite;
  MAESTRO_RETURN_IF_ERROR(ChannelValues(plan.data.image_mean, "image_mean", spec.channels, mean, &spec.mean));
  MAESTRO_RETURN_IF_ERROR(ChannelValues(plan.data.image_std, "image_std", spec.channels, stdev, &spec.std));
  Status valid = datasets::ValidateImageSpec(spec);
  if (!valid.ok()) return valid.WithContext(fmt::format("ViT section '{}' ([data] image_mean / image_std)", vit.name));
  return spec;
}

std::string BuiltInDatasetOf(const plan::Plan& given) {
  const plan::Plan plan = plan::ExpandFusedSections(given);
  if (!plan.data.corpus.empty() || !plan.data.manifest.empty()) return "";
  bool image = false;
  for (const auto& s : plan.sections) image = image || s.activation == "image";
  for (const auto& m : plan.data.modalities) image = image || m.name == "image";
  return datasets::BuiltInDatasetName(plan.data.dataset, image);
}

StatusOr<std::unique_ptr<datasets::SampleSource>> OpenPlanDataset(const plan::Plan& given) {
  // The data follows the components (a fused section's models read it).
  const plan::Plan plan = plan::ExpandFusedSections(given);
  if (!plan.data.corpus.empty()) return OpenCorpus(plan);
  if (!plan.data.test_corpus.empty()) {
    return Status::InvalidArgument(
        fmt::format("plan data.test_corpus = '{}' without data.corpus: a held-out corpus is the test split of a "
                    "training corpus (set [data] corpus, or remove test_corpus)",
                    plan.data.test_corpus));
  }
  if (!plan.data.manifest.empty()) return OpenManifest(plan);
  datasets::DemoOptions options;
  MAESTRO_ASSIGN_OR_RETURN(options.kind, datasets::DemoKindFromName(BuiltInDatasetOf(plan)));
  options.seq_len = plan.data.seq_len;
  options.seed = plan.data.seed;
  options.image_fraction = ModalityFraction(plan, "image", 0.5);
  MAESTRO_ASSIGN_OR_RETURN(auto demo, datasets::DemoDataset::Open(options));
  return std::unique_ptr<datasets::SampleSource>(std::move(demo));
}

StatusOr<std::unique_ptr<datalayer::TrainingRun>> OpenPlanRun(const plan::Plan& plan,
                                                              const datasets::SampleSource& samples,
                                                              const std::string& run_dir) {
  datalayer::RunOptions options;
  options.run_dir = run_dir;
  options.seed = plan.data.seed;
  options.global_batch_size = plan.data.global_batch;
  options.keep_last_checkpoints = plan.keep_checkpoints;
  // Rank 0's (the executor's and the one-process reference's): its durable
  // operations go through rank 0's Env (the crash tests' seam).
  MAESTRO_ASSIGN_OR_RETURN(auto run, datalayer::TrainingRun::Open(options, datalayer::RankEnv(0)));
  if (run->index().NumSamples() == 0) {
    MAESTRO_RETURN_IF_ERROR(samples.CheckBeforeIngest());
    for (const std::string& line : DataAgainstPlan(plan, samples)) Log(LogLevel::kWarn, "maestro: warning: {}", line);
    const std::string manifest = run_dir + "/manifest.jsonl";
    MAESTRO_RETURN_IF_ERROR(datasets::WriteManifest(samples, manifest).status());
    MAESTRO_RETURN_IF_ERROR(run->index().IngestManifest(manifest).status());
  }
  return run;
}

}  // namespace maestro::runtime
