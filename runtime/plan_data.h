// SPDX-License-Identifier: Apache-2.0
// A plan's data: the one place that picks the SampleSource a plan reads (a
// Megatron corpus, a JSONL manifest with images, or the built-in demo data
// sets) and opens its run directory with the source's manifest ingested;
// what the sections read of the data's layout (the image placeholder id,
// images per sample). Shared by the executor, the section runner, the
// reference and the profiler.
// May call: datasets, datalayer, plan (plan/model_desc.h: the ViT layouts),
// base. Torch-free.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "datalayer/training_run.h"
#include "datasets/image_decode.h"
#include "datasets/sample_source.h"
#include "plan/plan.h"

namespace maestro::runtime {

// The plan's samples: a Megatron corpus (plan.data.corpus, checked against
// the smallest vocabulary of the plan's decoders; plan.data.test_corpus, when
// set, is its test split), a JSONL manifest (plan.data.manifest:
// datasets::JsonlSampleSource with the plan's ViT's image size, channels,
// mean/std and rows per image, image_token_id, max_images_per_sample,
// on_bad_sample; the plan's audio encoder's mel_bins and frames,
// audio_token_id, max_audios_per_sample), else the built-in dataset
// plan.data.dataset (or captions when a section activates on "image", else
// text: BuiltInDatasetOf).
StatusOr<std::unique_ptr<datasets::SampleSource>> OpenPlanDataset(const plan::Plan& plan);

// The built-in dataset a plan reads: "" with a corpus or a manifest, else
// plan.data.dataset, else "fashion_mnist_captions" when a section activates
// on "image" or the data has an image modality, else "text".
std::string BuiltInDatasetOf(const plan::Plan& plan);

// The token id whose positions a decoder fills with a vision section's rows:
// plan.data.image_token_id, else the built-in captions' datasets::kImage when
// the plan reads built-in data, else -1 (no placeholder).
int64_t ImageTokenIdOf(const plan::Plan& plan);
// K: the images whose rows one sample's ViT output holds (>= 1; the built-in
// captions carry one image per image sample).
int64_t MaxImagesPerSample(const plan::Plan& plan);
// K_audio: the audio clips whose rows one sample's audio encoder output
// holds (>= 1).
int64_t MaxAudiosPerSample(const plan::Plan& plan);
// The image the plan's ViT section `vit` (a kVit section) takes from a file:
// (channels, image_size, image_size); mean/std: plan.data.image_mean/std, else
// OpenAI CLIP's for the CLIP and Qwen2-VL layouts and the Fashion-MNIST
// demo's (datasets::kPixelMean/kPixelStd) for the built-in ViT; CLIP's
// shortest-edge resize and centre crop, Qwen2-VL's composite on white.
StatusOr<datasets::ImageSpec> ImageSpecOf(const plan::Plan& plan, const plan::SectionPlan& vit,
                                          datasets::DecodeOptions* decode);

// Opens (creating) the run directory's TrainingRun and ingests the source's
// manifest (written to <run_dir>/manifest.jsonl) the first time; a corpus's
// token ids are checked whole before that.
StatusOr<std::unique_ptr<datalayer::TrainingRun>> OpenPlanRun(const plan::Plan& plan,
                                                              const datasets::SampleSource& samples,
                                                              const std::string& run_dir);

}  // namespace maestro::runtime
