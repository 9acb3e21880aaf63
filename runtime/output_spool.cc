// SPDX-License-Identifier: Apache-2.0
#include "runtime/output_spool.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "base/checks.h"
#include "base/files.h"
#include "base/log.h"
#include "base/read_file.h"
#include "base/splitmix.h"
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

namespace {

namespace fs = std::filesystem;

// A unique token of this process's start (its files never clash with an
// earlier start's): wall-clock microseconds and the process id.
std::string StartToken() {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch());
  return fmt::format("{:x}-{}", us.count(), static_cast<long>(getpid()));
}

// What a section's spooled rows depend on, hashed (16 hex digits): its name,
// model and initial weights (init_from, init_section), the data that defines
// each sample id (plan.data without steps and global_batch), the spool dtype
// and, for a KD teacher, its student's loss (temperature, K, draws). The
// folder carries it: rows of another teacher, dataset or form are never read
// as this one's.
std::string SpoolIdentity(const plan::Plan& plan, int section) {
  plan::Plan what;  // only what the rows depend on, serialized
  const plan::SectionPlan& s = plan.sections[static_cast<size_t>(section)];
  plan::SectionPlan kept;
  kept.name = s.name;
  kept.model = s.model;
  kept.init_from = s.init_from;
  kept.init_section = s.init_section;
  if (const auto sent = plan::TeacherRowsOf(plan, section)) kept.loss = sent->loss;
  what.sections.push_back(kept);
  what.data = plan.data;
  what.data.steps = 0;
  what.data.global_batch = 0;
  what.spool_dtype = plan.spool_dtype;
  return fmt::format("{:016x}", HashBytes(plan::PlanToJson(what, -1)));
}

std::string SealedMarker(const std::string& h5) {
  return h5.substr(0, h5.size() - 3) + ".sealed";
}
std::string RecordsOf(const std::string& h5) {
  return h5.substr(0, h5.size() - 3) + ".sqlite";
}

// The folder's spool files (*.h5), sorted by name, and whether each is sealed.
std::vector<std::pair<std::string, bool>> SpoolFiles(const std::string& folder) {
  std::vector<std::pair<std::string, bool>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".h5") continue;
    out.emplace_back(path, fs::exists(SealedMarker(path), ec));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The bytes the folder's sealed files take (what the budget has spent).
int64_t SealedBytes(const std::string& folder) {
  int64_t bytes = 0;
  std::error_code ec;
  for (const auto& [path, sealed] : SpoolFiles(folder)) {
    if (sealed) bytes += static_cast<int64_t>(fs::file_size(path, ec));
  }
  return bytes;
}

}  // namespace

StatusOr<std::unique_ptr<OutputSpool>> OutputSpool::Open(const std::string& run_dir, const plan::Plan& plan,
                                                         int section, int replica, bool reuse_sealed, bool writes) {
  std::unique_ptr<OutputSpool> spool(new OutputSpool());
  spool->reuse_sealed_ = reuse_sealed;
  spool->writes_ = writes;
  const plan::SectionPlan& s = plan.sections[static_cast<size_t>(section)];
  spool->codec_ = SpoolRowCodec::For(plan, section);
  spool->folder_ =
      fmt::format("{}/spool/{}-{}-{}", run_dir, s.name, spool->codec_.name(), SpoolIdentity(plan, section));
  MAESTRO_RETURN_IF_ERROR(CreateDirectories(spool->folder_));
  spool->start_ = StartToken();
  spool->replica_ = replica;
  spool->replicas_ = std::max(1, s.config.dp);
  spool->share_bytes_ = plan::SpoolBudgetPerWriter(plan, section) * spool->replicas_;
  spool->options_.name = fmt::format("{}.out", s.name);
  spool->options_.dtype = spool->codec_.dtype();
  spool->options_.reuse_across_epochs = true;  // a frozen section's output never changes
  if (replica == 0 && writes) MAESTRO_RETURN_IF_ERROR(spool->RecoverUnsealed());
  return spool;
}

Status OutputSpool::RecoverUnsealed() {
  for (const auto& [path, sealed] : SpoolFiles(folder_)) {
    if (sealed) continue;
    // A dead start's file: repaired (or moved aside) as a writer's reopen
    // does, its committed rows kept, then sealed.
    auto index = datalayer::SampleIndex::Open(RecordsOf(path));
    if (!index.ok()) {
      Log(LogLevel::kWarn, "spool {}: the records of {} do not open ({}); its rows are computed again", folder_, path,
          index.status().message());
      continue;
    }
    auto file = datalayer::ActivationSpool::Open(path, &(*index)->db(), options_);
    if (!file.ok()) {
      Log(LogLevel::kWarn, "spool {}: {} does not open ({}); its rows are computed again", folder_, path,
          file.status().message());
      continue;
    }
    MAESTRO_RETURN_IF_ERROR((*file)->Close());
    MAESTRO_RETURN_IF_ERROR(
        WriteFileAtomically(SealedMarker(path), fmt::format("{}\n", (*file)->committed_table_rows())));
  }
  return Status::Ok();
}

Status OutputSpool::OpenWriter() {
  const std::string base = fmt::format("{}/e{}-w{}of{}-s{}", folder_, writer_epoch_, replica_, replicas_, start_);
  MAESTRO_ASSIGN_OR_RETURN(writer_index_, datalayer::SampleIndex::Open(base + ".sqlite"));
  datalayer::SpoolOptions options = options_;
  // This writer's part of what the section's share has left.
  options.budget_bytes = std::max<int64_t>(0, (share_bytes_ - SealedBytes(folder_)) / replicas_);
  MAESTRO_ASSIGN_OR_RETURN(writer_, datalayer::ActivationSpool::Open(base + ".h5", &writer_index_->db(), options));
  return Status::Ok();
}

Status OutputSpool::SealWriter() {
  if (!writer_) return Status::Ok();
  const std::string path = writer_->path();
  MAESTRO_RETURN_IF_ERROR(writer_->Close());
  const int64_t rows = writer_->committed_table_rows();
  writer_.reset();
  writer_index_.reset();
  return WriteFileAtomically(SealedMarker(path), fmt::format("{}\n", rows));
}

Status OutputSpool::Commit() {
  return writer_ ? writer_->Commit() : Status::Ok();
}

Status OutputSpool::BeginEpoch(int64_t epoch) {
  MAESTRO_RETURN_IF_ERROR(SealWriter());
  writer_epoch_ = epoch;
  return Status::Ok();
}

Status OutputSpool::Seal() {
  MAESTRO_RETURN_IF_ERROR(SealWriter());
  start_ = StartToken();  // the sealed file keeps its name; the next one is new
  return Status::Ok();
}

Status OutputSpool::Refresh() {
  if (!reuse_sealed_) return Status::Ok();
  for (const auto& [path, sealed] : SpoolFiles(folder_)) {
    if (!sealed || indexed_.count(path) > 0) continue;
    indexed_.insert(path);
    int64_t rows = -1;
    if (auto marker = ReadSmallFile(SealedMarker(path), 64, "a spool's seal"); marker.ok()) {
      rows = std::strtoll(marker->c_str(), nullptr, 10);
    }
    auto file =
        rows >= 0 ? datalayer::ActivationSpool::OpenSealed(path, options_, rows)
                  : StatusOr<std::unique_ptr<datalayer::ActivationSpool>>(Status::Corruption("its seal does not read"));
    if (!file.ok()) {
      Log(LogLevel::kWarn, "spool {}: sealed file {} is unreadable ({}); its rows are computed again", folder_, path,
          file.status().message());
      continue;
    }
    for (int64_t sample : (*file)->CommittedSamples()) sealed_row_[sample] = sealed_.size();
    sealed_.push_back(std::move(*file));
  }
  return Status::Ok();
}

StatusOr<bool> OutputSpool::ReadInto(int64_t sample_id, int64_t epoch, torch::Tensor slot) {
  bool found = false;
  if (writer_) {
    MAESTRO_ASSIGN_OR_RETURN(found, writer_->GetInto(sample_id, epoch, &read_row_));
  }
  if (!found) {
    auto it = sealed_row_.find(sample_id);
    if (it != sealed_row_.end()) {
      MAESTRO_ASSIGN_OR_RETURN(found, sealed_[it->second]->GetInto(sample_id, epoch, &read_row_));
    }
  }
  if (!found || !codec_.Decode(read_row_.data, slot)) return false;
  ++hits_;
  return true;
}

Status OutputSpool::Store(int64_t sample_id, int64_t epoch, const torch::Tensor& row, torch::Tensor slot) {
  std::vector<int64_t> dims;
  const auto bytes = codec_.Encode(row, &dims);
  if (!codec_.Decode(bytes, slot)) return Status::Internal("output spool: a row its codec cannot read back");
  ++computed_;
  if (!writes_) return Status::Ok();
  if (!writer_) MAESTRO_RETURN_IF_ERROR(OpenWriter());
  datalayer::RowView view{dims, bytes.data(), bytes.size()};
  return writer_->Put(sample_id, epoch, view).status();
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
