// SPDX-License-Identifier: Apache-2.0
#include "tests/datalayer/fake_training.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "datalayer/training_run.h"

namespace maestro::datalayer::testing {
namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

std::vector<float> TeacherOutput(int64_t sample_id, int64_t n) {
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    row[static_cast<size_t>(i)] = static_cast<float>((sample_id * 31 + i * 7) % 1009) / 8.0f;
  return row;
}

void WriteAll(int fd, const std::string& s) {
  if (fd < 0) return;
  // One write(2): survives kill -9 of this process once it returns.
  ssize_t n = ::write(fd, s.data(), s.size());
  (void)n;
}

std::string U64Bytes(uint64_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 8);
}
uint64_t BytesU64(const std::string& s) {
  uint64_t v = 0;
  std::memcpy(&v, s.data(), std::min<size_t>(8, s.size()));
  return v;
}

// The fake student's state as a sharded checkpoint (format 2, as the
// runtime writes it): the global tensor "student/state" (U64 [2]: weights,
// updates), its two elements written by two "ranks" (this process plays
// both, every durable operation through `env`: each is a crash point).
StatusOr<std::vector<SliceRecord>> WriteStudentState(const std::string& dir, uint64_t weights, uint64_t updates,
                                                     Env* env) {
  std::vector<SliceRecord> records;
  const uint64_t values[2] = {weights, updates};
  for (int rank = 0; rank < 2; ++rank) {
    SliceToWrite piece{"student/state",
                       {2},
                       hf::TensorDType::kU64,
                       Box{{rank}, {1}},
                       std::string_view(reinterpret_cast<const char*>(&values[rank]), sizeof(uint64_t))};
    MAESTRO_ASSIGN_OR_RETURN(auto mine, WriteRankShard(dir, rank, {piece}, env));
    records.insert(records.end(), mine.begin(), mine.end());
  }
  return records;
}

// ... and back from a resumed checkpoint: {weights, updates}.
StatusOr<std::pair<uint64_t, uint64_t>> ReadStudentState(const CheckpointData& state) {
  std::vector<const SliceRecord*> pieces;
  for (const auto& r : state.slices) pieces.push_back(&r);
  ShardReader reader(state.dir);
  MAESTRO_ASSIGN_OR_RETURN(std::string bytes, ReadWholeTensor(reader, pieces));
  if (bytes.size() != 2 * sizeof(uint64_t)) return Status::Corruption("fake student state: not two u64");
  uint64_t v[2];
  std::memcpy(v, bytes.data(), sizeof(v));
  return std::make_pair(v[0], v[1]);
}

}  // namespace

std::optional<DoneLine> ParseDoneLine(const std::string& text) {
  const size_t at = text.find("done weights=");
  if (at == std::string::npos) return std::nullopt;
  unsigned long long w = 0;
  long long steps = 0, computes = 0, hits = 0, wrong = 0;
  if (std::sscanf(text.c_str() + at, "done weights=%llx steps=%lld computes=%lld hits=%lld wrong=%lld", &w, &steps,
                  &computes, &hits, &wrong) != 5) {
    return std::nullopt;
  }
  return DoneLine{w, steps, computes, hits, wrong};
}

Status WriteFakeManifest(const std::string& path, int64_t n) {
  std::string text;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = 1000 + i;
    text += fmt::format("{{\"id\": {}, \"location\": \"shard-{}.tar:{}\", \"tokens\": {{\"text\": {}{}}}}}\n", id,
                        i / 100, i, 50 + i % 200, i % 3 == 0 ? ", \"image\": 64" : "");
  }
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Status::IOError("cannot write " + path);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  return Status::Ok();
}

StatusOr<FakeTrainerResult> RunFakeTrainer(const FakeTrainerOptions& o, Env* env) {
  FakeTrainerResult result;
  RunOptions ro;
  ro.run_dir = o.run_dir;
  ro.seed = o.seed;
  ro.global_batch_size = o.batch;
  ro.keep_last_checkpoints = 2;
  MAESTRO_ASSIGN_OR_RETURN(auto run, TrainingRun::Open(ro, env));
  MAESTRO_RETURN_IF_ERROR(run->index().IngestManifest(o.manifest).status());
  MAESTRO_ASSIGN_OR_RETURN(auto state, run->Resume());
  SpoolOptions so;
  so.name = "teacher.logits";
  so.dtype = DType::kF32;
  so.reuse_across_epochs = o.reuse_across_epochs;
  so.chunk_bytes = 64 << 10;
  so.budget_bytes = int64_t{256} << 20;  // 4096 chunks: the chunk index never splits
  MAESTRO_ASSIGN_OR_RETURN(ActivationSpool * spool, run->OpenSpool(so));

  uint64_t weights = 0x5EED;
  uint64_t rng = o.seed;
  int64_t updates = 0;
  if (state) {
    MAESTRO_ASSIGN_OR_RETURN(auto student, ReadStudentState(*state));
    weights = student.first;
    updates = static_cast<int64_t>(student.second);
    rng = BytesU64(state->rng_states.at("dropout"));
  }
  const int64_t total_steps = o.epochs * run->index().StepsPerEpoch();
  int gate_fd = o.gate_fd;
  bool wait_for_signal = o.wait_for_signal;
  auto checkpoint = [&]() -> Status {
    const int64_t step = run->next_step() - 1;
    CheckpointData data;
    data.step = step;
    MAESTRO_ASSIGN_OR_RETURN(data.slices, WriteStudentState(TrainingRun::ShardedCheckpointDir(ro.run_dir, step),
                                                            weights, static_cast<uint64_t>(updates), env));
    data.rng_states["dropout"] = U64Bytes(rng);
    MAESTRO_RETURN_IF_ERROR(run->Checkpoint(std::move(data)));
    WriteAll(o.progress_fd, fmt::format("committed {}\n", step));
    if (gate_fd >= 0) {
      char byte = 0;
      while (::read(gate_fd, &byte, 1) < 0 && errno == EINTR) {
      }
      gate_fd = -1;
    }
    if (wait_for_signal && o.preempt != nullptr) {
      sigset_t block, old;
      sigemptyset(&block);
      sigaddset(&block, SIGUSR1);
      sigaddset(&block, SIGTERM);
      sigprocmask(SIG_BLOCK, &block, &old);
      while (!o.preempt->requested()) sigsuspend(&old);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      wait_for_signal = false;
    }
    return Status::Ok();
  };

  while (run->next_step() < total_steps) {
    MAESTRO_ASSIGN_OR_RETURN(GlobalBatch batch, run->NextBatch());
    uint64_t w = weights;  // the step works on a copy: an abandoned step leaves no trace
    uint64_t step_rng = rng;
    bool abandoned = false;
    for (int64_t id : batch.sample_ids) {
      if (o.preempt != nullptr && o.preempt->requested()) {
        abandoned = true;
        break;
      }
      std::vector<float> expected = TeacherOutput(id, o.row_values);
      MAESTRO_ASSIGN_OR_RETURN(auto row, spool->Get(id, batch.epoch));
      const float* values = nullptr;
      if (row) {
        ++result.spool_hits;
        if (row->data.size() != expected.size() * sizeof(float) ||
            std::memcmp(row->data.data(), expected.data(), row->data.size()) != 0) {
          ++result.wrong_rows_used;
        }
        values = reinterpret_cast<const float*>(row->data.data());
      } else {
        ++result.teacher_computes;
        WriteAll(o.compute_log_fd, fmt::format("compute {} {}\n", batch.epoch, id));
        MAESTRO_RETURN_IF_ERROR(
            spool->Put(id, batch.epoch, RowView{{o.row_values}, expected.data(), expected.size() * sizeof(float)})
                .status());
        values = expected.data();
      }
      uint64_t bits = 0;
      std::memcpy(&bits, &values[id % o.row_values], 4);
      step_rng = Mix(step_rng, 0xD0);
      w = Mix(Mix(Mix(w, static_cast<uint64_t>(id)), bits), step_rng);
    }
    if (abandoned) break;
    weights = w;
    rng = step_rng;
    ++updates;
    ++result.steps_run;
    MAESTRO_RETURN_IF_ERROR(run->StepDone({batch.step, batch.sample_ids, R"({"kind":"fake"})"}));
    const bool last = run->next_step() == total_steps;
    const bool preempt = o.preempt != nullptr && o.preempt->requested();
    if (last || preempt || run->next_step() % o.checkpoint_every == 0) MAESTRO_RETURN_IF_ERROR(checkpoint());
    if (preempt) break;
  }
  if (o.preempt != nullptr && o.preempt->requested()) {
    // Keep the teacher outputs of an abandoned step; checkpoint finished steps.
    MAESTRO_RETURN_IF_ERROR(run->CommitSpools());
    if (run->pending_steps() > 0) MAESTRO_RETURN_IF_ERROR(checkpoint());
    result.preempted = true;
  }
  result.weights = weights;
  return result;
}

}  // namespace maestro::datalayer::testing
