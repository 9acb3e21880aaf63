// SPDX-License-Identifier: Apache-2.0
#include "runtime/image_rows.h"

#include <vector>

#include "plan/plan_graph.h"
#include "runtime/models/encoders.h"

namespace maestro::runtime {

torch::Tensor VitRows(VitEncoderImpl& vit, const MicroBatchData& data, int64_t max_images, torch::Device device) {
  const int64_t b = static_cast<int64_t>(data.sample_ids.size());
  TORCH_CHECK(static_cast<int64_t>(data.image_counts.size()) == b, "the micro-batch has ", data.image_counts.size(),
              " image counts for ", b, " samples");
  int64_t total = 0;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t count = data.image_counts[static_cast<size_t>(i)];
    TORCH_CHECK(count >= 0 && count <= max_images, "sample ", data.sample_ids[static_cast<size_t>(i)], " carries ",
                count, " images, more than data.max_images_per_sample = ", max_images);
    total += count;
  }
  const int64_t per_image = vit.output_tokens();
  const int64_t width = vit.output_dim();
  torch::Tensor encoded;  // (total, per_image, width)
  if (total > 0) {
    TORCH_CHECK(data.images.defined() && data.images.size(0) == total, "the micro-batch's samples list ", total,
                " images but ", data.images.defined() ? data.images.size(0) : 0, " were loaded");
    encoded = vit.forward(data.images.to(device));
  }
  // Every sample one image and room for one: the rows as the ViT made them.
  if (max_images == 1 && total == b) return encoded;
  auto zeros_options =
      torch::TensorOptions().dtype(encoded.defined() ? encoded.scalar_type() : torch::kFloat32).device(device);
  std::vector<torch::Tensor> rows;  // per sample (max_images * per_image, width)
  int64_t next = 0;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t count = data.image_counts[static_cast<size_t>(i)];
    std::vector<torch::Tensor> parts;
    if (count > 0) parts.push_back(encoded.narrow(0, next, count).reshape({count * per_image, width}));
    if (count < max_images) parts.push_back(torch::zeros({(max_images - count) * per_image, width}, zeros_options));
    next += count;
    rows.push_back(parts.size() == 1 ? parts[0] : torch::cat(parts, 0));
  }
  return torch::stack(rows);
}

torch::Tensor SpliceImageRows(const torch::Tensor& embeds, const torch::Tensor& ids, int64_t image_token_id,
                              const torch::Tensor& rows, const MicroBatchData& data, const plan::SectionPlan& upstream,
                              int64_t max_images) {
  const int64_t b = ids.size(0);
  TORCH_CHECK(image_token_id >= 0, "section '", upstream.name,
              "' sends image rows, but the plan has no image placeholder id (data.image_token_id)");
  TORCH_CHECK(max_images >= 1 && rows.dim() == 3 && rows.size(1) % max_images == 0, "rows of shape ", rows.sizes(),
              " do not hold ", max_images, " images' rows per sample");
  const int64_t per_image = rows.size(1) / max_images;
  auto mask = ids.eq(image_token_id);                           // (B, T)
  const auto slots = mask.sum(1).to(torch::kCPU).contiguous();  // (B)
  const int64_t* slot = slots.data_ptr<int64_t>();
  std::vector<torch::Tensor> pieces;
  int64_t sender = 0;  // index into rows: the samples that activate `upstream`, in micro-batch order
  for (int64_t i = 0; i < b; ++i) {
    const int64_t count = data.image_counts[static_cast<size_t>(i)];
    const int64_t id = data.sample_ids[static_cast<size_t>(i)];
    if (!plan::SectionActivates(upstream, count > 0)) {
      TORCH_CHECK(slot[i] == 0, "sample ", id, " has ", slot[i], " image-token positions but no rows from section '",
                  upstream.name, "'");
      continue;
    }
    TORCH_CHECK(sender < rows.size(0), "section '", upstream.name, "' sent rows of ", rows.size(0),
                " samples; the micro-batch has more that activate it");
    TORCH_CHECK(slot[i] == count * per_image, "sample ", id, " has ", slot[i], " image-token positions (id ",
                image_token_id, ") but ", count, " image(s) x ", per_image, " rows");
    if (count > 0) pieces.push_back(rows[sender].narrow(0, 0, count * per_image));
    ++sender;
  }
  TORCH_CHECK(sender == rows.size(0), "section '", upstream.name, "' sent rows of ", rows.size(0), " samples; ", sender,
              " samples of the micro-batch activate it");
  if (pieces.empty()) return embeds;
  auto spliced = pieces.size() == 1 ? pieces[0] : torch::cat(pieces, 0);  // (slots, C), in the mask's row-major order
  return embeds.masked_scatter(mask.unsqueeze(-1), spliced.to(embeds.scalar_type()));
}

}  // namespace maestro::runtime
