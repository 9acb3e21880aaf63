// SPDX-License-Identifier: Apache-2.0
#include "runtime/output_spool.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "base/checks.h"
#include "base/files.h"

namespace maestro::runtime {

StatusOr<std::unique_ptr<OutputSpool>> OutputSpool::Open(const std::string& run_dir, const std::string& section_name,
                                                         int replica) {
  std::unique_ptr<OutputSpool> spool(new OutputSpool());
  const std::string base = fmt::format("{}/spool/{}-dp{}", run_dir, section_name, replica);
  (void)CreateDirectories(run_dir + "/spool");  // a failure shows when the spool opens
  // The spool's commit records live in a SampleIndex database of this rank's own.
  MAESTRO_ASSIGN_OR_RETURN(spool->index_, datalayer::SampleIndex::Open(base + ".sqlite"));
  datalayer::SpoolOptions options;
  options.name = fmt::format("{}.out", section_name);
  options.reuse_across_epochs = true;  // a frozen section's output never changes
  MAESTRO_ASSIGN_OR_RETURN(spool->spool_,
                           datalayer::ActivationSpool::Open(base + ".h5", &spool->index_->db(), options));
  return spool;
}

StatusOr<torch::Tensor> OutputSpool::Rows(const MicroBatchData& data, int64_t epoch, SectionRunner& runner,
                                          const datasets::SampleSource& samples, TransferStaging* staging,
                                          MicroBatchData* computed_samples) {
  const auto shape = runner.OutputRowShape();
  std::vector<int64_t> full{static_cast<int64_t>(data.sample_ids.size())};
  full.insert(full.end(), shape.begin(), shape.end());
  auto rows =
      staging != nullptr ? staging->WireBuffer(full, launcher::Device::kCpu) : torch::empty(full, torch::kFloat32);
  std::vector<int64_t> missing;
  std::vector<int64_t> missing_pos;
  for (size_t b = 0; b < data.sample_ids.size(); ++b) {
    MAESTRO_ASSIGN_OR_RETURN(auto row, spool_->Get(data.sample_ids[b], epoch));
    if (row && static_cast<int64_t>(row->data.size()) == rows[static_cast<int64_t>(b)].numel() * 4) {
      std::memcpy(rows[static_cast<int64_t>(b)].data_ptr(), row->data.data(), row->data.size());
      ++hits_;
    } else {
      missing.push_back(data.sample_ids[b]);
      missing_pos.push_back(static_cast<int64_t>(b));
    }
  }
  if (!missing.empty()) {
    MAESTRO_ASSIGN_OR_RETURN(auto sub, LoadMicroBatch(samples, missing));
    MAESTRO_ASSIGN_OR_RETURN(auto out, runner.Forward(sub, {}));
    // Host fp32 (the spool's and the wire's format), whatever the runner computes on.
    auto computed_rows = staging != nullptr ? staging->ToWire(out.rows, launcher::Device::kCpu)
                                            : out.rows.to(torch::kCPU, torch::kFloat32).contiguous();
    for (size_t i = 0; i < missing.size(); ++i) {
      auto row = computed_rows[static_cast<int64_t>(i)];
      rows[missing_pos[i]].copy_(row);
      datalayer::RowView view{shape, row.data_ptr(), static_cast<size_t>(row.numel()) * sizeof(float)};
      MAESTRO_RETURN_IF_ERROR(spool_->Put(missing[i], epoch, view).status());
      ++computed_;
    }
    if (computed_samples != nullptr) *computed_samples = std::move(sub);
  }
  return rows;
}

StatusOr<OutputSpool::Looked> OutputSpool::Lookup(const std::vector<int64_t>& sample_ids, int64_t epoch,
                                                  const std::vector<int64_t>& row_shape, TransferStaging* staging) {
  std::vector<int64_t> full{static_cast<int64_t>(sample_ids.size())};
  full.insert(full.end(), row_shape.begin(), row_shape.end());
  Looked looked;
  looked.rows =
      staging != nullptr ? staging->WireBuffer(full, launcher::Device::kCpu) : torch::empty(full, torch::kFloat32);
  for (size_t b = 0; b < sample_ids.size(); ++b) {
    MAESTRO_ASSIGN_OR_RETURN(auto row, spool_->Get(sample_ids[b], epoch));
    auto slot = looked.rows[static_cast<int64_t>(b)];
    if (row && static_cast<int64_t>(row->data.size()) == slot.numel() * 4) {
      std::memcpy(slot.data_ptr(), row->data.data(), row->data.size());
      ++hits_;
    } else {
      looked.missing.push_back(static_cast<int64_t>(b));
    }
  }
  return looked;
}

Status OutputSpool::Fill(Looked& looked, const std::vector<int64_t>& sample_ids, int64_t epoch,
                         const torch::Tensor& computed, TransferStaging* staging) {
  if (looked.missing.empty()) return Status::Ok();
  if (!computed.defined() || computed.size(0) != static_cast<int64_t>(looked.missing.size())) {
    return Status::Internal(fmt::format("output spool: {} rows to fill, {} computed", looked.missing.size(),
                                        computed.defined() ? computed.size(0) : 0));
  }
  auto host = staging != nullptr ? staging->ToWire(computed, launcher::Device::kCpu)
                                 : computed.to(torch::kCPU, torch::kFloat32).contiguous();
  const auto dims = looked.rows.sizes().slice(1).vec();
  for (size_t i = 0; i < looked.missing.size(); ++i) {
    auto row = host[static_cast<int64_t>(i)];
    looked.rows[looked.missing[i]].copy_(row);
    datalayer::RowView view{dims, row.data_ptr(), static_cast<size_t>(row.numel()) * sizeof(float)};
    MAESTRO_RETURN_IF_ERROR(spool_->Put(sample_ids[static_cast<size_t>(looked.missing[i])], epoch, view).status());
    ++computed_;
  }
  return Status::Ok();
}

}  // namespace maestro::runtime
