// SPDX-License-Identifier: Apache-2.0
#include "runtime/media_rows.h"

#include <vector>

#include "plan/mrope.h"
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
// max_items and the loaded tensor's rows against their sum; returns the sum.
int64_t CheckItems(const MicroBatchData& data, const std::vector<int64_t>& counts, const torch::Tensor& loaded,
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
  if (total > 0) {
    TORCH_CHECK(loaded.defined() && loaded.size(0) == total, "the micro-batch's samples list ", total, " ", noun,
                "s but ", loaded.defined() ? loaded.size(0) : 0, " were loaded");
  }
  return total;
}

}  // namespace

torch::Tensor VitRows(VitEncoderImpl& vit, const MicroBatchData& data, int64_t max_images, torch::Device device) {
  const int64_t total = CheckItems(data, data.image_counts, data.images, max_images, "image", "max_images_per_sample");
  torch::Tensor encoded;  // (total, per_image, width)
  if (total > 0) encoded = vit.forward(data.images.to(device));
  return PadRowsPerSample(encoded, data.image_counts, max_images, vit.output_tokens(), vit.output_dim(), device);
}

torch::Tensor AudioRows(AudioEncoderImpl& audio, const MicroBatchData& data, int64_t max_audios, torch::Device device) {
  const int64_t total =
      CheckItems(data, data.audio_counts, data.audios, max_audios, "audio clip", "max_audios_per_sample");
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
  TORCH_CHECK(max_items >= 1 && rows.dim() == 3 && rows.size(1) % max_items == 0, "rows of shape ", rows.sizes(),
              " do not hold ", max_items, " items' rows per sample");
  const int64_t per_item = rows.size(1) / max_items;
  auto mask = ids.eq(token_id);                                 // (B, T)
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
    TORCH_CHECK(slot[i] == count * per_item, "sample ", id, " has ", slot[i], " ", noun, "-token positions (id ",
                token_id, ") but ", count, " item(s) x ", per_item, " rows");
    if (count > 0) pieces.push_back(rows[sender].narrow(0, 0, count * per_item));
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
  if (!plan::MropeOf(decoder.model)) return {};
  const plan::SectionPlan* vision = plan::MropeVisionSection(plan, decoder);
  if (vision == nullptr) return {};
  const auto grid = plan::MropeImageGrid(vision->model);
  TORCH_CHECK(grid.ok(), "section '", decoder.name, "': ", grid.status().message());
  TORCH_CHECK(ids.dim() == 2, "M-RoPE positions: ids must be (B, T), got ", ids.sizes());
  const auto host = ids.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t b = host.size(0), t = host.size(1);
  TORCH_CHECK(static_cast<int64_t>(data.image_counts.size()) == b, "the micro-batch has ", data.image_counts.size(),
              " image counts for ", b, " samples");
  auto positions = torch::empty({b, 3, t}, torch::kLong);  // per sample row-major (3, T), then (3, B, T)
  const int64_t image_token = ImageTokenIdOf(plan);
  for (int64_t i = 0; i < b; ++i) {
    const std::vector<plan::LlmGrid> images(static_cast<size_t>(data.image_counts[static_cast<size_t>(i)]), *grid);
    const Status st =
        plan::MropePositions(host[i].data_ptr<int64_t>(), t, image_token, images, positions[i].data_ptr<int64_t>());
    TORCH_CHECK(st.ok(), "section '", decoder.name, "', sample ", data.sample_ids[static_cast<size_t>(i)], ": ",
                st.message());
  }
  return positions.permute({1, 0, 2}).contiguous();
}

}  // namespace maestro::runtime
