// SPDX-License-Identifier: Apache-2.0
#include "runtime/output_spool.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "base/checks.h"
#include "base/files.h"
#include "runtime/teacher_rows.h"

namespace maestro::runtime {

namespace {

// The bytes of a contiguous host tensor appended to `out`.
void AppendBytes(const torch::Tensor& t, std::vector<std::byte>* out) {
  const auto* p = static_cast<const std::byte*>(t.data_ptr());
  out->insert(out->end(), p, p + t.numel() * static_cast<int64_t>(t.element_size()));
}

// `count` elements of `type` at `*offset` of `bytes` as a (rows, cols) tensor (a copy).
torch::Tensor TakeBytes(const std::vector<std::byte>& bytes, size_t* offset, int64_t rows, int64_t cols,
                        torch::ScalarType type) {
  auto t = torch::empty({rows, cols}, torch::TensorOptions().dtype(type));
  const size_t n = static_cast<size_t>(t.numel() * static_cast<int64_t>(t.element_size()));
  std::memcpy(t.data_ptr(), bytes.data() + *offset, n);
  *offset += n;
  return t;
}

int64_t ElementBytes(torch::ScalarType type) {
  return static_cast<int64_t>(c10::elementSize(type));
}

}  // namespace

SpoolRowCodec SpoolRowCodec::For(const plan::Plan& plan, int section) {
  SpoolRowCodec codec;
  codec.values_ = SpoolValuesType(plan.spool_dtype);
  if (const auto sent = plan::TeacherRowsOf(plan, section)) {
    codec.form_ = sent->form;
    codec.k_ = sent->form == plan::TeacherRowsForm::kTopK ? sent->loss.top_k : plan::SampledDraws(sent->loss);
  }
  return codec;
}

std::string SpoolRowCodec::name() const {
  const std::string values = values_ == torch::kFloat32 ? "f32" : values_ == torch::kHalf ? "f16" : "bf16";
  switch (form_) {
    case plan::TeacherRowsForm::kHidden: return values;
    case plan::TeacherRowsForm::kTopK: return fmt::format("topk{}-{}", k_, values);
    case plan::TeacherRowsForm::kSampled: return fmt::format("sampled{}", k_);
  }
  return values;
}

datalayer::DType SpoolRowCodec::dtype() const {
  if (form_ != plan::TeacherRowsForm::kHidden) return datalayer::DType::kU8;
  return values_ == torch::kFloat32 ? datalayer::DType::kF32
         : values_ == torch::kHalf  ? datalayer::DType::kF16
                                    : datalayer::DType::kBF16;
}

std::vector<std::byte> SpoolRowCodec::Encode(const torch::Tensor& row, std::vector<int64_t>* dims) const {
  std::vector<std::byte> out;
  switch (form_) {
    case plan::TeacherRowsForm::kHidden:
      AppendBytes(row.to(values_).contiguous(), &out);
      *dims = row.sizes().vec();
      return out;
    case plan::TeacherRowsForm::kTopK:
      AppendBytes(row.narrow(1, 0, k_).to(values_).contiguous(), &out);
      AppendBytes(row.narrow(1, k_, k_).to(torch::kInt32).contiguous(), &out);
      break;
    case plan::TeacherRowsForm::kSampled:
      AppendBytes(row.narrow(1, 0, k_).to(torch::kInt32).contiguous(), &out);
      AppendBytes(row.narrow(1, k_, 1).contiguous(), &out);
      break;
  }
  *dims = {static_cast<int64_t>(out.size())};
  return out;
}

bool SpoolRowCodec::Decode(const std::vector<std::byte>& bytes, torch::Tensor row) const {
  const int64_t l = row.size(0), w = row.size(1);
  size_t offset = 0;
  switch (form_) {
    case plan::TeacherRowsForm::kHidden: {
      if (static_cast<int64_t>(bytes.size()) != row.numel() * ElementBytes(values_)) return false;
      row.copy_(TakeBytes(bytes, &offset, l, w, values_));
      return true;
    }
    case plan::TeacherRowsForm::kTopK: {
      if (w != 2 * k_ || static_cast<int64_t>(bytes.size()) != l * k_ * (ElementBytes(values_) + 4)) return false;
      row.narrow(1, 0, k_).copy_(TakeBytes(bytes, &offset, l, k_, values_));
      row.narrow(1, k_, k_).copy_(TakeBytes(bytes, &offset, l, k_, torch::kInt32));
      return true;
    }
    case plan::TeacherRowsForm::kSampled: {
      if (w != k_ + 1 || static_cast<int64_t>(bytes.size()) != l * (k_ + 1) * 4) return false;
      row.narrow(1, 0, k_).copy_(TakeBytes(bytes, &offset, l, k_, torch::kInt32));
      row.narrow(1, k_, 1).copy_(TakeBytes(bytes, &offset, l, 1, torch::kFloat32));
      return true;
    }
  }
  return false;
}

StatusOr<std::unique_ptr<OutputSpool>> OutputSpool::Open(const std::string& run_dir, const plan::Plan& plan,
                                                         int section, int replica) {
  std::unique_ptr<OutputSpool> spool(new OutputSpool());
  const std::string& name = plan.sections[static_cast<size_t>(section)].name;
  spool->codec_ = SpoolRowCodec::For(plan, section);
  const std::string base = fmt::format("{}/spool/{}-{}-dp{}", run_dir, name, spool->codec_.name(), replica);
  (void)CreateDirectories(run_dir + "/spool");  // a failure shows when the spool opens
  // The spool's commit records live in a SampleIndex database of this rank's own.
  MAESTRO_ASSIGN_OR_RETURN(spool->index_, datalayer::SampleIndex::Open(base + ".sqlite"));
  datalayer::SpoolOptions options;
  options.name = fmt::format("{}.out", name);
  options.dtype = spool->codec_.dtype();
  options.budget_bytes = plan::SpoolBudgetPerWriter(plan, section);
  options.reuse_across_epochs = plan.spool_reuse;  // a frozen output never changes; the compiler may price reuse out
  MAESTRO_ASSIGN_OR_RETURN(spool->spool_,
                           datalayer::ActivationSpool::Open(base + ".h5", &spool->index_->db(), options));
  return spool;
}

StatusOr<bool> OutputSpool::ReadInto(int64_t sample_id, int64_t epoch, torch::Tensor slot) {
  MAESTRO_ASSIGN_OR_RETURN(auto row, spool_->Get(sample_id, epoch));
  if (!row || !codec_.Decode(row->data, slot)) return false;
  ++hits_;
  return true;
}

Status OutputSpool::Store(int64_t sample_id, int64_t epoch, const torch::Tensor& row, torch::Tensor slot) {
  std::vector<int64_t> dims;
  const auto bytes = codec_.Encode(row, &dims);
  if (!codec_.Decode(bytes, slot)) return Status::Internal("output spool: a row its codec cannot read back");
  datalayer::RowView view{dims, bytes.data(), bytes.size()};
  MAESTRO_RETURN_IF_ERROR(spool_->Put(sample_id, epoch, view).status());
  ++computed_;
  return Status::Ok();
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
    MAESTRO_ASSIGN_OR_RETURN(const bool hit, ReadInto(data.sample_ids[b], epoch, rows[static_cast<int64_t>(b)]));
    if (!hit) {
      missing.push_back(data.sample_ids[b]);
      missing_pos.push_back(static_cast<int64_t>(b));
    }
  }
  if (!missing.empty()) {
    MAESTRO_ASSIGN_OR_RETURN(auto sub, LoadMicroBatch(samples, missing));
    MAESTRO_ASSIGN_OR_RETURN(auto out, runner.Forward(sub, {}));
    // Host fp32 (the wire's format), whatever the runner computes on.
    auto computed_rows = staging != nullptr ? staging->ToWire(out.rows, launcher::Device::kCpu)
                                            : out.rows.to(torch::kCPU, torch::kFloat32).contiguous();
    for (size_t i = 0; i < missing.size(); ++i) {
      MAESTRO_RETURN_IF_ERROR(Store(missing[i], epoch, computed_rows[static_cast<int64_t>(i)], rows[missing_pos[i]]));
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
    MAESTRO_ASSIGN_OR_RETURN(const bool hit, ReadInto(sample_ids[b], epoch, looked.rows[static_cast<int64_t>(b)]));
    if (!hit) looked.missing.push_back(static_cast<int64_t>(b));
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
  for (size_t i = 0; i < looked.missing.size(); ++i) {
    const int64_t b = looked.missing[i];
    MAESTRO_RETURN_IF_ERROR(
        Store(sample_ids[static_cast<size_t>(b)], epoch, host[static_cast<int64_t>(i)], looked.rows[b]));
  }
  return Status::Ok();
}

}  // namespace maestro::runtime
