// SPDX-License-Identifier: Apache-2.0
#include "runtime/media_rows.h"

#include <vector>

#include "plan/mrope.h"
#include "plan/native_vision.h"
#include "plan/plan_graph.h"
#include "runtime/models/encoders.h"
#include "runtime/plan_data.h"

namespace maestro::runtime {

namespace {

// Sample b's rows: its items' rows in order, then zeros up to max_items
// items. encoded: (sum of counts, per_item, width) or undefined when there are
// none. Returns (B, max_items * per_item, width).
torch::Tensor PadRowsPerSample(const torch::Tensor& encoded, const std::vector<int64_t>& counts, int64_t max_items,
                               int64_t per_item, int64_t width, torch::Device device) {
  const int64_t b = static_cast<int64_t>(counts.size());
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  // Every sample one item and room for one: the rows as the encoder made them.
  if (max_items == 1 && total == b) return encoded;
  auto zeros_options =
      torch::TensorOptions().dtype(encoded.defined() ? encoded.scalar_type() : torch::kFloat32).device(device);
  std::vector<torch::Tensor> rows;  // per sample (max_items * per_item, width)
  int64_t next = 0;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t count = counts[static_cast<size_t>(i)];
    std::vector<torch::Tensor> parts;
    if (count > 0) parts.push_back(encoded.narrow(0, next, count).reshape({count * per_item, width}));
    if (count < max_items) parts.push_back(torch::zeros({(max_items - count) * per_item, width}, zeros_options));
    next += count;
    rows.push_back(parts.size() == 1 ? parts[0] : torch::cat(parts, 0));
  }
  return torch::stack(rows);
}

// The items of the micro-batch: checks each sample's count against
// max_items and the loaded tensor's rows (when given) against their sum;
// returns the sum.
int64_t CheckItems(const MicroBatchData& data, const std::vector<int64_t>& counts, const torch::Tensor* loaded,
                   int64_t max_items, const char* noun, const char* limit) {
  const int64_t b = static_cast<int64_t>(data.sample_ids.size());
  TORCH_CHECK(static_cast<int64_t>(counts.size()) == b, "the micro-batch has ", counts.size(), " ", noun,
              " counts for ", b, " samples");
  int64_t total = 0;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t count = counts[static_cast<size_t>(i)];
    TORCH_CHECK(count >= 0 && count <= max_items, "sample ", data.sample_ids[static_cast<size_t>(i)], " carries ",
                count, " ", noun, "s, more than data.", limit, " = ", max_items);
    total += count;
  }
  if (total > 0 && loaded != nullptr) {
    TORCH_CHECK(loaded->defined() && loaded->size(0) == total, "the micro-batch's samples list ", total, " ", noun,
                "s but ", loaded->defined() ? loaded->size(0) : 0, " were loaded");
  }
  return total;
}

}  // namespace

namespace {

// Native resolution: sample b's rows are its items' LLM tokens, in order,
// then zeros up to `capacity`. encoded: (sum of the items' tokens, width).
torch::Tensor PadNativeRows(const torch::Tensor& encoded, const MicroBatchData& data, const plan::ModelDesc& vit,
                            int64_t capacity, int64_t width, torch::Device device) {
  auto zeros_options =
      torch::TensorOptions().dtype(encoded.defined() ? encoded.scalar_type() : torch::kFloat32).device(device);
  std::vector<torch::Tensor> rows;  // per sample (capacity, width)
  int64_t next = 0;
  for (size_t b = 0; b < data.image_counts.size(); ++b) {
    const int64_t own = VisionRowsOfSample(data, b, vit);
    TORCH_CHECK(own <= capacity, "sample ", data.sample_ids[b], ": its images make ", own,
                " rows, more than the edge's ", capacity, " per sample (data.seq_len)");
    std::vector<torch::Tensor> parts;
    if (own > 0) parts.push_back(encoded.narrow(0, next, own));
    if (own < capacity) parts.push_back(torch::zeros({capacity - own, width}, zeros_options));
    next += own;
    rows.push_back(parts.size() == 1 ? parts[0] : torch::cat(parts, 0));
  }
  return torch::stack(rows);
}

}  // namespace

int64_t VisionRowsOfSample(const MicroBatchData& data, size_t b, const plan::ModelDesc& vit) {
  const int64_t count = b < data.image_counts.size() ? data.image_counts[b] : 0;
  if (data.image_grids.empty()) return count * plan::VitOutputTokens(vit);
  int64_t first = 0;
  for (size_t i = 0; i < b; ++i) first += data.image_counts[i];
  int64_t rows = 0;
  for (int64_t k = first; k < first + count; ++k) {
    rows += plan::LlmGridOf(data.image_grids[static_cast<size_t>(k)], vit).tokens();
  }
  return rows;
}

torch::Tensor VitRows(VitEncoderImpl& vit, const MicroBatchData& data, const plan::Plan& plan, torch::Device device) {
  const int64_t max_images = MaxImagesPerSample(plan);
  if (data.image_grids.empty()) {
    const int64_t total =
        CheckItems(data, data.image_counts, &data.images, max_images, "image", "max_images_per_sample");
    torch::Tensor encoded;  // (total, per_image, width)
    if (total > 0) encoded = vit.forward(data.images.to(device));
    return PadRowsPerSample(encoded, data.image_counts, max_images, vit.output_tokens(), vit.output_dim(), device);
  }
  // Native resolution: every real image's patches in one packed call.
  const int64_t items = CheckItems(data, data.image_counts, nullptr, max_images, "image", "max_images_per_sample");
  TORCH_CHECK(static_cast<int64_t>(data.image_grids.size()) == items, "the micro-batch lists ", items,
              " images but carries ", data.image_grids.size(), " grids");
  int64_t patches = 0;
  for (const auto& grid : data.image_grids) patches += grid.patches();
  TORCH_CHECK(data.images.defined() && data.images.dim() == 2 && data.images.size(0) == patches,
              "the micro-batch's grids hold ", patches, " patches, but ",
              data.images.defined() ? data.images.size(0) : 0, " were loaded");
  const torch::Tensor encoded = vit.ForwardPacked(data.images.to(device), data.image_grids);  // (sum tokens, width)
  const int64_t capacity = plan::VisionRowsPerSample(vit.desc(), true, max_images, plan.data.seq_len);
  return PadNativeRows(encoded, data, vit.desc(), capacity, vit.output_dim(), device);
}

torch::Tensor AudioRows(AudioEncoderImpl& audio, const MicroBatchData& data, int64_t max_audios, torch::Device device) {
  const int64_t total =
      CheckItems(data, data.audio_counts, &data.audios, max_audios, "audio clip", "max_audios_per_sample");
  const int64_t per_clip = (audio.desc().audio_frames + 1) / 2;  // the stride-2 conv's rows of a whole clip
  torch::Tensor encoded;                                         // (total, per_clip, hidden)
  if (total > 0) {
    TORCH_CHECK(data.audios.size(2) == audio.desc().audio_frames, "audio clips of ", data.audios.size(2),
                " frames; the encoder takes ", audio.desc().audio_frames, " (the manifest pads every clip to them)");
    encoded = audio.forward(data.audios.to(device));
  }
  const int64_t width = audio.desc().hidden;
  return PadRowsPerSample(encoded, data.audio_counts, max_audios, per_clip, width, device);
}

torch::Tensor SpliceRows(const torch::Tensor& embeds, const torch::Tensor& ids, const torch::Tensor& rows,
                         const MicroBatchData& data, const plan::Plan& plan, const plan::SectionPlan& upstream) {
  const bool audio = upstream.activation == "audio";
  const char* noun = audio ? "audio" : "image";
  const int64_t token_id = audio ? plan.data.audio_token_id : ImageTokenIdOf(plan);
  const int64_t max_items = audio ? MaxAudiosPerSample(plan) : MaxImagesPerSample(plan);
  const std::vector<int64_t>& counts = audio ? data.audio_counts : data.image_counts;
  const int64_t b = ids.size(0);
  TORCH_CHECK(token_id >= 0, "section '", upstream.name, "' sends ", noun,
              " rows, but the plan has no placeholder id for them (data.", noun, "_token_id)");
  TORCH_CHECK(static_cast<int64_t>(counts.size()) == b, "the micro-batch has ", counts.size(), " ", noun,
              " counts for ", b, " samples");
  // A ViT at native resolution sends seq_len rows per sample
  // (plan::VisionRowsPerSample), not K items' worth: seq_len need not be a
  // multiple of K.
  const bool native_rows = !audio && plan::NativeResolution(plan);
  TORCH_CHECK(max_items >= 1 && rows.dim() == 3 && (native_rows || rows.size(1) % max_items == 0), "rows of shape ",
              rows.sizes(), " do not hold ", max_items, " items' rows per sample");
  const int64_t per_item = rows.size(1) / max_items;
  // Native resolution: each sample's rows are its items' LLM tokens (the
  // tower's grid), its videos' at the video placeholder.
  const bool native = !audio && !data.image_grids.empty();
  const plan::SectionPlan* vit =
      native ? (upstream.model.kind == plan::ModelKind::kVit ? &upstream : plan::MropeVisionSection(plan, upstream))
             : nullptr;
  TORCH_CHECK(!native || vit != nullptr, "section '", upstream.name,
              "' sends native-resolution image rows, but no ViT section feeds it");
  auto mask = ids.eq(token_id);  // (B, T)
  if (native && plan.data.video_token_id >= 0) mask = mask.logical_or(ids.eq(plan.data.video_token_id));
  const auto slots = mask.sum(1).to(torch::kCPU).contiguous();  // (B)
  const int64_t* slot = slots.data_ptr<int64_t>();
  std::vector<torch::Tensor> pieces;
  int64_t sender = 0;  // index into rows: the samples that activate `upstream`, in micro-batch order
  for (int64_t i = 0; i < b; ++i) {
    const int64_t count = counts[static_cast<size_t>(i)];
    const int64_t id = data.sample_ids[static_cast<size_t>(i)];
    if (!plan::SectionActivates(upstream, MediaOf(data, static_cast<size_t>(i)))) {
      TORCH_CHECK(slot[i] == 0, "sample ", id, " has ", slot[i], " ", noun,
                  "-token positions but no rows from section '", upstream.name, "'");
      continue;
    }
    TORCH_CHECK(sender < rows.size(0), "section '", upstream.name, "' sent rows of ", rows.size(0),
                " samples; the micro-batch has more that activate it");
    const int64_t own = native ? VisionRowsOfSample(data, static_cast<size_t>(i), vit->model) : count * per_item;
    TORCH_CHECK(slot[i] == own, "sample ", id, " has ", slot[i], " ", noun, "-token positions (id ", token_id,
                native ? " and the video's" : "", ") but its ", count, " item(s) make ", own, " rows");
    if (own > 0) pieces.push_back(rows[sender].narrow(0, 0, own));
    ++sender;
  }
  TORCH_CHECK(sender == rows.size(0), "section '", upstream.name, "' sent rows of ", rows.size(0), " samples; ", sender,
              " samples of the micro-batch activate it");
  if (pieces.empty()) return embeds;
  auto spliced = pieces.size() == 1 ? pieces[0] : torch::cat(pieces, 0);  // (slots, C), in the mask's row-major order
  return embeds.masked_scatter(mask.unsqueeze(-1), spliced.to(embeds.scalar_type()));
}

torch::Tensor MropePositionIds(const torch::Tensor& ids, const MicroBatchData& data, const plan::Plan& plan,
                               const plan::SectionPlan& decoder) {
  const auto mrope = plan::MropeOf(decoder.model);
  if (!mrope) return {};
  const plan::SectionPlan* vision = plan::MropeVisionSection(plan, decoder);
  if (vision == nullptr) return {};
  const bool native = !data.image_grids.empty();
  plan::LlmGrid fixed;
  if (!native) {
    const auto grid = plan::MropeImageGrid(vision->model);
    TORCH_CHECK(grid.ok(), "section '", decoder.name, "': ", grid.status().message());
    fixed = *grid;
  }
  TORCH_CHECK(ids.dim() == 2, "M-RoPE positions: ids must be (B, T), got ", ids.sizes());
  const auto host = ids.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t b = host.size(0), t = host.size(1);
  TORCH_CHECK(static_cast<int64_t>(data.image_counts.size()) == b, "the micro-batch has ", data.image_counts.size(),
              " image counts for ", b, " samples");
  auto positions = torch::empty({b, 3, t}, torch::kLong);  // per sample row-major (3, T), then (3, B, T)
  const int64_t image_token = ImageTokenIdOf(plan);
  size_t first = 0;  // the sample's first item in data.image_grids
  for (int64_t i = 0; i < b; ++i) {
    const auto count = static_cast<size_t>(data.image_counts[static_cast<size_t>(i)]);
    std::vector<plan::LlmGrid> items(count, fixed);
    for (size_t k = 0; native && k < count; ++k) items[k] = plan::LlmGridOf(data.image_grids[first + k], vision->model);
    first += native ? count : 0;
    const Status st = plan::MropePositions(host[i].data_ptr<int64_t>(), t, image_token, plan.data.video_token_id, items,
                                           mrope->tokens_per_second, positions[i].data_ptr<int64_t>());
    TORCH_CHECK(st.ok(), "section '", decoder.name, "', sample ", data.sample_ids[static_cast<size_t>(i)], ": ",
                st.message());
  }
  return positions.permute({1, 0, 2}).contiguous();
}

}  // namespace maestro::runtime
