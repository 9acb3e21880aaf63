// SPDX-License-Identifier: Apache-2.0
#include "runtime/micro_batch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/checks.h"

namespace maestro::runtime {

namespace {

// Appends sample `id`'s clips' features to *values; every clip of the
// micro-batch has the shape of the first (*shape: (mel_bins, frames)).
// Without features (datasets::MediaParts), only the shapes are checked
// (a source whose LoadParts is Load hands them anyway: left out).
Status AppendAudio(int64_t id, const std::vector<datasets::SampleAudio>& clips, bool features,
                   std::vector<int64_t>* shape, std::vector<float>* values) {
  for (const auto& clip : clips) {
    const std::vector<int64_t> dims{clip.mel_bins, clip.frames};
    if (shape->empty()) *shape = dims;
    if (dims != *shape || (features && static_cast<int64_t>(clip.features.size()) != dims[0] * dims[1])) {
      return Status::Internal(fmt::format("sample {}: an audio clip of {}x{} ({} values) in a micro-batch of {}x{}", id,
                                          dims[0], dims[1], clip.features.size(), (*shape)[0], (*shape)[1]));
    }
    if (features) values->insert(values->end(), clip.features.begin(), clip.features.end());
  }
  return Status::Ok();
}

// The rows [starts[b], starts[b] + counts[b]) of `all` for each b of
// `positions`, concatenated; undefined when there are none.
torch::Tensor SelectItems(const torch::Tensor& all, const std::vector<int64_t>& counts,
                          const std::vector<int64_t>& positions) {
  if (!all.defined()) return {};  // loaded without pixels or features (datasets::MediaParts)
  std::vector<int64_t> starts(counts.size() + 1, 0);
  for (size_t b = 0; b < counts.size(); ++b) starts[b + 1] = starts[b] + counts[b];
  std::vector<torch::Tensor> parts;
  for (int64_t p : positions) {
    const auto b = static_cast<size_t>(p);
    if (counts[b] > 0) parts.push_back(all.narrow(0, starts[b], counts[b]));
  }
  if (parts.empty()) return {};
  return parts.size() == 1 ? parts[0] : torch::cat(parts, 0);
}

// Appends sample `id`'s images to *pixels (and, native, their grids to
// *grids). Every image of the micro-batch is laid out as the first: fixed
// (*shape: (channels, H, W)) or native (*shape: (patch_dim), every item's
// patches row after row).
// Without pixels (datasets::MediaParts), only the layouts and grids.
Status AppendImages(int64_t id, const std::vector<datasets::SampleImage>& images, bool with_pixels,
                    std::vector<int64_t>* shape, std::vector<float>* pixels, std::vector<plan::PatchGrid>* grids,
                    int64_t* rows) {
  for (const auto& image : images) {
    const std::vector<int64_t> dims = image.native() ? std::vector<int64_t>{image.patch_dim}
                                                     : std::vector<int64_t>{image.channels, image.height, image.width};
    if (shape->empty()) *shape = dims;
    const int64_t patches = image.grid_t * image.grid_h * image.grid_w;
    const int64_t values = image.native() ? patches * image.patch_dim : dims[0] * dims[1] * dims[2];
    // Without pixels a source may still hand them (its LoadParts is Load):
    // they are left out, unchecked.
    if (dims != *shape || (with_pixels && static_cast<int64_t>(image.pixels.size()) != values)) {
      return Status::Internal(fmt::format(
          "sample {}: an image laid out as [{}] ({} values) in a micro-batch of [{}] (native-resolution and fixed "
          "images do not mix; each native image holds grid patches x patch_dim values)",
          id, fmt::join(dims, ", "), image.pixels.size(), fmt::join(*shape, ", ")));
    }
    if (with_pixels) pixels->insert(pixels->end(), image.pixels.begin(), image.pixels.end());
    if (image.native()) {
      plan::PatchGrid grid;
      grid.t = image.grid_t;
      grid.h = image.grid_h;
      grid.w = image.grid_w;
      grid.video = image.video;
      grid.seconds_per_t = image.seconds_per_grid_t;
      grids->push_back(grid);
      *rows += patches;
    } else {
      *rows += 1;
    }
  }
  return Status::Ok();
}

}  // namespace

plan::SampleMedia MediaOf(const MicroBatchData& data, size_t b) {
  plan::SampleMedia media;
  if (b < data.image_counts.size()) media.images = data.image_counts[b];
  if (b < data.audio_counts.size()) media.audios = data.audio_counts[b];
  return media;
}

datasets::MediaParts MediaPartsOf(const plan::SectionPlan& section) {
  datasets::MediaParts parts;
  parts.pixels = false;
  parts.audio_features = false;
  auto take = [&parts](const plan::SectionPlan& s) {
    parts.pixels = parts.pixels || s.model.kind == plan::ModelKind::kVit;
    parts.audio_features = parts.audio_features || s.model.kind == plan::ModelKind::kAudioEncoder;
  };
  take(section);
  for (const plan::SectionPlan& c : section.components) take(c);
  return parts;
}

StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids,
                                        datasets::Split split) {
  return LoadMicroBatch(samples, sample_ids, split, datasets::MediaParts());
}

StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids,
                                        datasets::Split split, const datasets::MediaParts& parts) {
  MicroBatchData mb;
  mb.sample_ids = sample_ids;
  const int64_t b = static_cast<int64_t>(sample_ids.size());
  std::vector<int64_t> inputs, targets;
  std::vector<float> pixels, features;
  int64_t seq_len = -1, image_rows = 0, audios = 0;
  std::vector<int64_t> image_shape;  // (channels, H, W) of the first image, or (patch_dim) when native
  std::vector<int64_t> audio_shape;  // (mel_bins, frames) of the first clip
  for (int64_t id : sample_ids) {
    auto sample = parts.all() ? samples.Load(split, id) : samples.LoadParts(split, id, parts);
    if (!sample.ok()) return sample.status();
    if (seq_len < 0) seq_len = static_cast<int64_t>(sample->input_ids.size());
    if (static_cast<int64_t>(sample->input_ids.size()) != seq_len ||
        static_cast<int64_t>(sample->target_ids.size()) != seq_len) {
      return Status::Internal(
          fmt::format("sample {}: {} tokens, the micro-batch has {}", id, sample->input_ids.size(), seq_len));
    }
    inputs.insert(inputs.end(), sample->input_ids.begin(), sample->input_ids.end());
    targets.insert(targets.end(), sample->target_ids.begin(), sample->target_ids.end());
    mb.image_counts.push_back(static_cast<int64_t>(sample->images.size()));
    mb.audio_counts.push_back(static_cast<int64_t>(sample->audios.size()));
    MAESTRO_RETURN_IF_ERROR(AppendAudio(id, sample->audios, parts.audio_features, &audio_shape, &features));
    audios += static_cast<int64_t>(sample->audios.size());
    mb.answer_positions.push_back(sample->answer_position);
    mb.labels.push_back(sample->label);
    MAESTRO_RETURN_IF_ERROR(
        AppendImages(id, sample->images, parts.pixels, &image_shape, &pixels, &mb.image_grids, &image_rows));
  }
  if (b == 0) return mb;
  mb.input_ids = torch::from_blob(inputs.data(), {b, seq_len}, torch::kInt64).clone();
  mb.target_ids = torch::from_blob(targets.data(), {b, seq_len}, torch::kInt64).clone();
  if (image_rows > 0 && parts.pixels) {
    std::vector<int64_t> dims{image_rows};
    dims.insert(dims.end(), image_shape.begin(), image_shape.end());  // (N, C, H, W) or native (N_patches, patch_dim)
    mb.images = torch::from_blob(pixels.data(), dims, torch::kFloat32).clone();
  }
  if (audios > 0 && parts.audio_features) {
    mb.audios = torch::from_blob(features.data(), {audios, audio_shape[0], audio_shape[1]}, torch::kFloat32).clone();
  }
  return mb;
}

StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids) {
  return LoadMicroBatch(samples, sample_ids, datasets::Split::kTrain);
}

MicroBatchData SelectSamples(const MicroBatchData& data, const std::vector<int64_t>& positions) {
  MicroBatchData out;
  for (int64_t p : positions) {
    const auto b = static_cast<size_t>(p);
    out.sample_ids.push_back(data.sample_ids[b]);
    out.image_counts.push_back(data.image_counts[b]);
    if (!data.audio_counts.empty()) out.audio_counts.push_back(data.audio_counts[b]);
    out.answer_positions.push_back(data.answer_positions[b]);
    out.labels.push_back(data.labels[b]);
  }
  if (positions.empty()) return out;
  auto index = torch::tensor(positions, torch::kInt64);
  if (data.input_ids.defined()) out.input_ids = data.input_ids.index_select(0, index);
  if (data.target_ids.defined()) out.target_ids = data.target_ids.index_select(0, index);
  if (data.image_grids.empty()) {
    out.images = SelectItems(data.images, data.image_counts, positions);
  } else {
    // Native: each sample's items' grids, and their patches' rows.
    std::vector<int64_t> patch_rows(data.image_counts.size(), 0), first_item(data.image_counts.size() + 1, 0);
    for (size_t b = 0; b < data.image_counts.size(); ++b) {
      first_item[b + 1] = first_item[b] + data.image_counts[b];
      for (int64_t k = first_item[b]; k < first_item[b + 1]; ++k) {
        patch_rows[b] += data.image_grids[static_cast<size_t>(k)].patches();
      }
    }
    for (int64_t p : positions) {
      const auto b = static_cast<size_t>(p);
      for (int64_t k = first_item[b]; k < first_item[b + 1]; ++k) {
        out.image_grids.push_back(data.image_grids[static_cast<size_t>(k)]);
      }
    }
    out.images = SelectItems(data.images, patch_rows, positions);
  }
  if (!data.audio_counts.empty()) out.audios = SelectItems(data.audios, data.audio_counts, positions);
  return out;
}

}  // namespace maestro::runtime
