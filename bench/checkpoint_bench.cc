// SPDX-License-Identifier: Apache-2.0
// maestro-bench checkpoint: issue #39's measured goals of sharded
// checkpoints (docs/datalayer.md "Sharded checkpoints", "Measured"), each a
// ratio of two things measured in the same run, with its goal and whether
// this run met it:
//   write_vs_raw              the ranks' aggregate save throughput
//                             (datalayer::WriteRankShard of each rank's
//                             pieces, the ranks as threads writing at once)
//                             over the same ranks writing the same bytes with
//                             plain write(2) + fsync, one file each. Goal >= 0.8.
//   rank0_peak_over_own_state rank 0's peak resident-set growth during a save
//                             (synchronous: views; asynchronous: the
//                             snapshot) and during a load of its own part of
//                             a checkpoint all ranks wrote, over the bytes of
//                             its own state, for a layout whose whole state is
//                             >= 4x rank 0's; the largest of the three.
//                             Measured in a child process holding only rank
//                             0's state (VmHWM, reset through
//                             /proc/self/clear_refs). Goal <= 1.25.
//   async_stall_fraction      two real `maestro run`s of the same spec (a
//                             decoder of tens of MB of state, 2 ranks, a
//                             checkpoint every few steps): mean stall_s of
//                             the asynchronous checkpoints (snapshot +
//                             commit, metrics.jsonl) over the mean stall_s
//                             of the same steps' synchronous ones (the whole
//                             save). Goal <= 0.15.
//   reshard_load_vs_same_layout  a checkpoint written under TP 2 x ZeRO-1
//                             DP 2, loaded by every rank of another layout
//                             (TP 1 DP 1; TP 4 x ZeRO-1 DP 2) over loaded by
//                             the same layout's ranks, per byte loaded (the
//                             layouts hold different amounts: replicas); the
//                             worst other layout. Goal <= 1.5.
// The state is runtime/checkpoint_speed.h's: a decoder's parameters and
// AdamW moments (fp32) as a rank of the layout holds them, written and read
// by the runtime's own code. --quick: small sizes (a smoke run, seconds).
// Files go to ScratchDir (MAESTRO_BENCH_DIR, else TMPDIR, else /tmp).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/files.h"
#include "base/process_memory.h"
#include "bench/registry.h"
#include "cli/subprocess.h"
#include "datalayer/env.h"
#include "datalayer/sharded_checkpoint.h"
#include "runtime/checkpoint_speed.h"

namespace {

namespace fs = std::filesystem;
namespace dl = maestro::datalayer;
using maestro::bench::Goal;
using maestro::runtime::CheckpointLayout;
using maestro::runtime::CheckpointSpeedRank;
using Ranks = std::vector<std::unique_ptr<CheckpointSpeedRank>>;

constexpr char kComponent[] = "student";
constexpr char kChildFlag[] = "--rank0-memory=";

void OrDie(const maestro::Status& s) {
  if (!s.ok()) throw maestro::Error(s);
}
template <typename T>
T OrDie(maestro::StatusOr<T> v) {
  if (!v.ok()) throw maestro::Error(v.status());
  return std::move(v).ValueOrDie();
}

maestro::plan::ModelDesc Decoder(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t ffn,
                                 int64_t vocab) {
  maestro::plan::ModelDesc d;
  d.kind = maestro::plan::ModelKind::kDecoder;
  d.source = "builtin";
  d.hidden = hidden;
  d.layers = layers;
  d.heads = heads;
  d.kv_heads = kv_heads;
  d.ffn_hidden = ffn;
  d.vocab = vocab;
  return d;
}

// The model of the in-process figures: TP 4 splits it (heads, kv_heads).
// Full: 15.2 M parameters, 183 MB of parameters and moments (rank 0 of TP 4
// x ZeRO-1 DP 2 holds 1/5 of it); quick: 0.14 M, 1.7 MB (1/5 too).
maestro::plan::ModelDesc SpeedModel(bool quick) {
  return quick ? Decoder(64, 2, 4, 4, 256, 64) : Decoder(512, 6, 8, 4, 1024, 1024);
}

Ranks MakeRanks(const maestro::plan::ModelDesc& desc, const CheckpointLayout& layout, uint64_t seed) {
  Ranks ranks;
  for (int r = 0; r < layout.world(); ++r) {
    ranks.push_back(OrDie(CheckpointSpeedRank::Create(desc, kComponent, layout, r, seed)));
  }
  return ranks;
}

int64_t StateBytes(const Ranks& ranks) {
  int64_t n = 0;
  for (const auto& r : ranks) n += r->state_bytes();
  return n;
}

// Runs fn(r) for every rank r on a thread of its own; the first failure is rethrown.
void OnRankThreads(size_t ranks, const std::function<void(size_t)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Writes every rank's pieces (views) as a checkpoint in `dir`; returns what
// a reader opens (the records of every rank, as rank 0's metadata holds them).
dl::CheckpointData WriteCheckpoint(Ranks& ranks, const std::string& dir) {
  dl::CheckpointData data;
  data.dir = dir;
  data.step = 0;
  data.next_step = 1;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto records =
        OrDie(dl::WriteRankShard(dir, static_cast<int>(r), ranks[r]->Pieces(false), dl::Env::Default()));
    ranks[r]->ReleaseSnapshot();
    data.slices.insert(data.slices.end(), records.begin(), records.end());
  }
  data.counters[ranks.front()->step_counter()] = 1;
  OrDie(dl::CheckSlicesTile(data.slices, dir));
  return data;
}

double Checksum(Ranks& ranks) {
  double sum = 0;
  for (auto& r : ranks) sum += r->Checksum();
  return sum;
}

// ---- write_vs_raw ------------------------------------------------------------

nlohmann::json MeasureWriteVsRaw(const maestro::plan::ModelDesc& desc, const std::string& dir, int repeats) {
  const CheckpointLayout layout{2, 2, true};
  Ranks ranks = MakeRanks(desc, layout, 1);
  std::vector<std::vector<dl::SliceToWrite>> pieces;
  int64_t bytes = 0;
  size_t piece_count = 0;
  for (auto& r : ranks) {
    pieces.push_back(r->Pieces(false));
    for (const auto& p : pieces.back()) bytes += static_cast<int64_t>(p.bytes.size());
    piece_count += pieces.back().size();
  }
  fs::create_directories(dir + "/raw");
  auto shard = [&] {
    OnRankThreads(ranks.size(), [&](size_t r) {
      OrDie(dl::WriteRankShard(dir + "/shard", static_cast<int>(r), pieces[r], dl::Env::Default()));
    });
  };
  auto raw = [&] {
    OnRankThreads(ranks.size(), [&](size_t r) {
      const std::string path = fmt::format("{}/raw/rank-{}.bin", dir, r);
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) throw std::runtime_error("cannot write " + path);
      for (const auto& p : pieces[r]) {
        if (maestro::WriteFully(fd, p.bytes) != 0) throw std::runtime_error("write " + path);
      }
      if (::fsync(fd) != 0) throw std::runtime_error("fsync " + path);
      ::close(fd);
    });
  };
  const std::vector<double> t = maestro::bench::InterleavedMedianSeconds({shard, raw}, repeats);
  fs::remove_all(dir);
  nlohmann::json out;
  out["write_vs_raw"] = t[1] / t[0];  // = shard GB/s over raw GB/s
  out["write_shard_gb_per_s"] = static_cast<double>(bytes) / t[0] / 1e9;
  out["write_raw_gb_per_s"] = static_cast<double>(bytes) / t[1] / 1e9;
  out["write_bytes"] = bytes;
  out["write_ranks"] = ranks.size();
  out["write_pieces"] = piece_count;
  out["write_layout"] = layout.Name();
  out["write_method"] = fmt::format(
      "{} ranks as threads writing at once, each its own file; shard: WriteRankShard (safetensors head, pieces, "
      "CRC-32C, tmp, fsync, rename, fsync dir); raw: write(2) of each piece + fsync; interleaved median of {} after "
      "a warm-up, files overwritten",
      ranks.size(), repeats);
  return out;
}

// ---- reshard_load_vs_same_layout ---------------------------------------------

nlohmann::json MeasureReshard(const maestro::plan::ModelDesc& desc, const std::string& dir, int repeats) {
  const CheckpointLayout written{2, 2, true};
  const std::vector<CheckpointLayout> loads = {written, {1, 1, false}, {4, 2, true}};
  dl::CheckpointData data;
  double written_sum = 0;
  {
    Ranks writers = MakeRanks(desc, written, 1);
    data = WriteCheckpoint(writers, dir);
    written_sum = Checksum(writers);
  }
  std::vector<Ranks> readers;
  readers.reserve(loads.size());  // the functions below hold references into it
  std::vector<std::function<void()>> fns;
  for (const auto& layout : loads) {
    readers.push_back(MakeRanks(desc, layout, 1000));
    Ranks& ranks = readers.back();
    fns.push_back([&ranks, &data] {
      for (auto& r : ranks) OrDie(r->Load(data));
    });
  }
  const std::vector<double> t = maestro::bench::InterleavedMedianSeconds(fns, repeats);
  // The bytes each layout's reads span in the files (one more load each, untimed).
  std::vector<double> spanned;
  for (Ranks& ranks : readers) {
    int64_t bytes = 0;
    for (auto& r : ranks) OrDie(r->Load(data, &bytes));
    spanned.push_back(static_cast<double>(bytes));
  }
  nlohmann::json out, layouts = nlohmann::json::object();
  double worst = 0, worst_spanned = 0;
  const double same_s_per_byte = t[0] / static_cast<double>(StateBytes(readers[0]));
  const double same_s_per_byte_spanned = t[0] / spanned[0];
  for (size_t i = 0; i < loads.size(); ++i) {
    // Every layout loaded the whole state: what its ranks write sums to the writers'.
    const double sum = Checksum(readers[i]);
    if (std::abs(sum - written_sum) > 1e-6 * (1 + std::abs(written_sum))) {
      throw std::runtime_error(
          fmt::format("a load into {} holds another state (sum {} vs {})", loads[i].Name(), sum, written_sum));
    }
    const double bytes = static_cast<double>(StateBytes(readers[i]));
    const double ratio = t[i] / bytes / same_s_per_byte;
    const double ratio_spanned = t[i] / spanned[i] / same_s_per_byte_spanned;
    if (i > 0) worst = std::max(worst, ratio);
    if (i > 0) worst_spanned = std::max(worst_spanned, ratio_spanned);
    layouts[loads[i].Name()] = {{"ranks", loads[i].world()},
                                {"load_s", t[i]},
                                {"bytes_loaded", bytes},
                                {"bytes_spanned", spanned[i]},
                                {"spanned_per_loaded", spanned[i] / bytes},
                                {"gb_per_s", bytes / t[i] / 1e9},
                                {"vs_same_layout_per_byte", ratio},
                                {"vs_same_layout_per_byte_spanned", ratio_spanned}};
  }
  fs::remove_all(dir);
  out["reshard_load_vs_same_layout"] = worst;
  // Per byte of the files the reads span: what remains once the bytes a
  // layout must touch (C-order pieces cut along their columns) are counted.
  out["reshard_load_vs_same_layout_per_byte_spanned"] = worst_spanned;
  out["reshard_written_layout"] = written.Name();
  out["reshard_layouts"] = layouts;
  out["reshard_method"] = fmt::format(
      "one thread loads every rank of a layout in turn (CheckpointTensors::Read of each part it holds, copied into "
      "its state; files mapped, page cache warm); seconds per byte loaded over the same layout's; interleaved "
      "median of {} after a warm-up; each load checked against the written state's sum",
      repeats);
  return out;
}

// ---- rank0_peak_over_own_state -------------------------------------------------

// kB of a "Name:   123 kB" line of /proc/self/status, as bytes.
int64_t StatusBytes(const std::string& name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) == 0) return std::stoll(line.substr(name.size() + 1)) * 1024;
  }
  throw std::runtime_error("/proc/self/status has no " + name);
}

// The peak resident-set growth while fn runs (VmHWM reset to VmRSS first).
int64_t PeakGrowth(const std::function<void()>& fn) {
  OrDie(maestro::ResetPeakResident());
  const int64_t before = StatusBytes("VmRSS");
  fn();
  return StatusBytes("VmHWM") - before;
}

// The child's side: rank 0 of `layout` alone in this process, one phase
// ("load", "sync_save" or "async_save": each in a fresh process, so that
// no phase reuses heap another freed); writes {"growth_bytes",
// "own_state_bytes", "global_state_bytes"} to <work>/<phase>.json.
nlohmann::json Rank0MemoryChild(const maestro::plan::ModelDesc& desc, const CheckpointLayout& layout,
                                const std::string& arg) {
  const size_t colon = arg.find(':');
  const std::string phase = arg.substr(0, colon), work = arg.substr(colon + 1);
  auto rank = OrDie(CheckpointSpeedRank::Create(desc, kComponent, layout, 0, 1));
  int64_t growth = 0;
  if (phase == "load") {
    dl::CheckpointData data;
    data.dir = work + "/checkpoint";
    data.slices = OrDie(dl::SliceRecordsFromJson(OrDie(dl::Env::Default()->ReadFile(work + "/records.json"))));
    data.counters[rank->step_counter()] = 1;
    growth = PeakGrowth([&] { OrDie(rank->Load(data)); });
  } else {
    const bool own_copy = phase == "async_save";  // the snapshot, held until its file is written
    growth = PeakGrowth([&] {
      OrDie(dl::WriteRankShard(work + "/" + phase, 0, rank->Pieces(own_copy), dl::Env::Default()));
      rank->ReleaseSnapshot();
    });
  }
  nlohmann::json out = {{"growth_bytes", growth},
                        {"own_state_bytes", rank->state_bytes()},
                        {"global_state_bytes", rank->global_state_bytes()}};
  std::ofstream(work + "/" + phase + ".json") << out.dump();
  return out;
}

nlohmann::json MeasureRank0Memory(const maestro::plan::ModelDesc& desc, const CheckpointLayout& layout,
                                  const std::string& work, bool quick) {
  {
    Ranks ranks = MakeRanks(desc, layout, 1);
    const dl::CheckpointData data = WriteCheckpoint(ranks, work + "/checkpoint");
    std::ofstream(work + "/records.json") << dl::SliceRecordsToJson(data.slices);
  }
  nlohmann::json out;
  double worst = 0, own = 0, global = 0;
  for (const std::string phase : {"load", "sync_save", "async_save"}) {
    std::vector<std::string> argv{maestro::cli::SelfDirectory() + "/maestro-bench", "checkpoint"};
    if (quick) argv.push_back("--quick");
    argv.insert(argv.end(), {"--", kChildFlag + phase + ":" + work});
    const auto rc = maestro::cli::RunProcess(argv, maestro::cli::ChildStdout::kToStderr);
    if (!rc.ok() || *rc != 0) throw std::runtime_error("the rank-0 memory child (" + phase + ") failed; see above");
    const auto child = nlohmann::json::parse(OrDie(dl::Env::Default()->ReadFile(work + "/" + phase + ".json")));
    own = child["own_state_bytes"].get<double>();
    global = child["global_state_bytes"].get<double>();
    const double ratio = child["growth_bytes"].get<double>() / own;
    out["rank0_" + phase + "_peak_over_own_state"] = ratio;
    worst = std::max(worst, ratio);
  }
  fs::remove_all(work);
  out["rank0_peak_over_own_state"] = worst;
  out["rank0_own_state_bytes"] = own;
  out["rank0_global_over_own_state"] = global / own;
  out["rank0_layout"] = layout.Name();
  out["rank0_method"] =
      "a child process per phase holds rank 0's state only (parameters + moments of its TP slice and ZeRO-1 shard); "
      "peak resident-set growth (VmHWM after a reset through /proc/self/clear_refs, minus VmRSS) while it loads its "
      "part of the checkpoint all ranks wrote (runtime CheckpointTensors::Read: the file pages it maps and its "
      "temporaries included), saves its pieces as views (synchronous) or as a snapshot (asynchronous); the largest "
      "over its own state's bytes";
  return out;
}

// ---- async_stall_fraction ------------------------------------------------------

// A spec of one training section, a decoder (quick: 0.5 MB of state; full:
// 8.2 M parameters, 98 MB of parameters and moments), on 2 CPU ranks, a
// checkpoint every `every` steps.
std::string StallSpec(bool quick, bool async, int64_t steps, int64_t every) {
  const auto m = quick ? Decoder(64, 2, 4, 2, 128, 512) : Decoder(256, 4, 4, 2, 1024, 8192);
  return fmt::format(R"([job]
name = "checkpoint-bench"
time = "01:00:00"
output = "checkpoint-bench-%j.out"
work_dir = "run/checkpoint-bench"
steps = {steps}
checkpoint_every = {every}
checkpoint_async = {async}
keep_checkpoints = 2

[cluster]
nodes = 1
gpus_per_node = 2

[cluster.gpu.cpu]
cpu = true
memory_gb = 8
tflops_bf16 = 0.05
partition = "batch"

[data]
dataset = "text"
global_batch = 4
seq_len = 64
seed = 7

[models.student]
kind = "decoder"
hidden = {hidden}
layers = {layers}
heads = {heads}
kv_heads = {kv}
ffn_hidden = {ffn}
vocab = {vocab}

[[section]]
name = "student"
model = "student"
mode = "train"
optimizer = {{ lr = 1e-3 }}
)",
                     fmt::arg("steps", steps), fmt::arg("every", every), fmt::arg("async", async ? "true" : "false"),
                     fmt::arg("hidden", m.hidden), fmt::arg("layers", m.layers), fmt::arg("heads", m.heads),
                     fmt::arg("kv", m.kv_heads), fmt::arg("ffn", m.ffn_hidden), fmt::arg("vocab", m.vocab));
}

// The checkpoint lines of a run's metrics.jsonl, by step.
std::map<int64_t, nlohmann::json> CheckpointLines(const std::string& metrics) {
  std::map<int64_t, nlohmann::json> lines;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("checkpoint")) lines[j["checkpoint"].get<int64_t>()] = j;
  }
  return lines;
}

// Trains the stall spec with checkpoint_async = `async` under `dir`;
// returns its checkpoint lines.
std::map<int64_t, nlohmann::json> TrainWithCheckpoints(bool quick, bool async, int64_t steps, int64_t every,
                                                       const std::string& dir) {
  fs::create_directories(dir);
  const std::string spec = dir + "/spec.toml";
  std::ofstream(spec) << StallSpec(quick, async, steps, every);
  const std::vector<std::string> argv{maestro::cli::SelfDirectory() + "/maestro",
                                      "run",
                                      spec,
                                      "-o",
                                      dir + "/out",
                                      "--ranks",
                                      "2",
                                      "--fresh",
                                      "--no-eval"};
  // Our stdout is the benchmark's JSON: the run's report goes to stderr.
  const auto rc = maestro::cli::RunProcess(argv, maestro::cli::ChildStdout::kToStderr);
  if (!rc.ok() || *rc != 0) throw std::runtime_error(fmt::format("maestro run (checkpoint_async = {}) failed", async));
  return CheckpointLines(dir + "/out/run/metrics.jsonl");
}

nlohmann::json MeasureAsyncStall(bool quick, const std::string& dir) {
  const int64_t steps = quick ? 4 : 14, every = quick ? 2 : 3;
  const auto async = TrainWithCheckpoints(quick, true, steps, every, dir + "/async");
  const auto sync = TrainWithCheckpoints(quick, false, steps, every, dir + "/sync");
  double async_stall = 0, sync_stall = 0, async_write = 0, async_snapshot = 0;
  int counted = 0;
  for (const auto& [step, line] : async) {
    // The run's last checkpoint is written at once in both runs: not compared.
    if (!line["async"].get<bool>() || sync.count(step) == 0) continue;
    async_stall += line["stall_s"].get<double>();
    async_write += line["write_s"].get<double>();
    async_snapshot += line.value("snapshot_s", 0.0);
    sync_stall += sync.at(step)["stall_s"].get<double>();
    ++counted;
  }
  if (counted == 0) throw std::runtime_error("no asynchronous checkpoint in " + dir + "/async/out/run/metrics.jsonl");
  fs::remove_all(dir);
  nlohmann::json out;
  out["async_stall_fraction"] = async_stall / sync_stall;
  out["async_stall_s"] = async_stall / counted;
  out["async_write_s"] = async_write / counted;
  out["async_snapshot_s"] = async_snapshot / counted;  // of the stall: the copy; the rest is the commit
  out["sync_stall_s"] = sync_stall / counted;
  out["async_checkpoints"] = counted;
  out["async_method"] = fmt::format(
      "two `maestro run`s of one spec (a decoder student, 2 local ranks, {} steps, checkpoint_every = {}), "
      "checkpoint_async true then false; mean metrics.jsonl stall_s of the asynchronous checkpoints (snapshot + "
      "commit, rank 0) over the same steps' synchronous stall_s (the whole save)",
      steps, every);
  return out;
}

}  // namespace

MAESTRO_BENCHMARK(checkpoint, "sharded checkpoints: save vs raw write, rank 0 memory, async stall, reshard load") {
  const maestro::plan::ModelDesc desc = SpeedModel(options.quick);
  const CheckpointLayout rank0_layout{4, 2, true};
  for (const std::string& a : options.args) {
    if (a.rfind(kChildFlag, 0) == 0) return Rank0MemoryChild(desc, rank0_layout, a.substr(std::strlen(kChildFlag)));
  }
  const std::string dir = maestro::bench::ScratchDir("checkpoint");
  const int repeats = options.quick ? 1 : 5;
  nlohmann::json out = MeasureWriteVsRaw(desc, dir + "/write", repeats);
  out.update(MeasureRank0Memory(desc, rank0_layout, dir + "/rank0", options.quick));
  out.update(MeasureReshard(desc, dir + "/reshard", repeats));
  out.update(MeasureAsyncStall(options.quick, dir + "/async"));
  fs::remove_all(dir);
  out["goals"] = {{"write_vs_raw", Goal(out["write_vs_raw"].get<double>(), 0.8, true)},
                  {"rank0_peak_over_own_state", Goal(out["rank0_peak_over_own_state"].get<double>(), 1.25, false)},
                  {"async_stall_fraction", Goal(out["async_stall_fraction"].get<double>(), 0.15, false)},
                  {"reshard_load_vs_same_layout", Goal(out["reshard_load_vs_same_layout"].get<double>(), 1.5, false)}};
  out["cores"] = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return out;
}
