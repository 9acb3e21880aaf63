// SPDX-License-Identifier: Apache-2.0
// The registry of maestro-bench. A benchmark is a function that measures
// something AND the baseline it is compared with in the same run, and returns
// its figures as a JSON object (ratios first; absolute numbers are noisy on a
// shared 2-core VM).
//
//   MAESTRO_BENCHMARK(scheduler, "wavefront vs FIFO on random batches") {
//     nlohmann::json out; ...; out["speedup_vs_fifo"] = x; return out;
//   }
//
// `maestro-bench <name> --json` prints the object; without --json a table.
// Either way stdout carries only that: while a benchmark runs, descriptor 1
// points at stderr (bench_main.cc), so its logs and its children's go there.
// A benchmark that starts a tool says so anyway (cli::ChildStdout::kToStderr).
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace maestro::bench {

struct BenchOptions {
  bool quick = false;             // --quick: smaller sizes (CI smoke runs)
  std::vector<std::string> args;  // anything after `--`
};

using BenchFn = std::function<nlohmann::json(const BenchOptions&)>;

struct BenchEntry {
  std::string description;
  BenchFn fn;
};

std::map<std::string, BenchEntry>& Registry();

struct Registrar {
  Registrar(const std::string& name, const std::string& description, BenchFn fn);
};

// Runs `fn` `repeats` times after one warm-up and returns the median seconds.
double MedianSeconds(const std::function<void()>& fn, int repeats);

// Runs every fn once (warm-up), then `repeats` rounds of all of them in turn,
// and returns each one's median seconds, in the order given. A benchmark and
// its baseline timed this way see the same page-cache state (warm after the
// warm-up) and the same share of a busy shared machine.
std::vector<double> InterleavedMedianSeconds(const std::vector<std::function<void()>>& fns, int repeats);

// A measured goal: {"value": value, "goal": goal, "met": value >= goal
// (at_least) or value <= goal}.
nlohmann::json Goal(double value, double goal, bool at_least);

// A fresh scratch folder "<base>/maestro-bench-<name>-<pid>", where base is
// $MAESTRO_BENCH_DIR, else $TMPDIR, else /tmp. The caller removes it.
std::string ScratchDir(const std::string& name);

}  // namespace maestro::bench

#define MAESTRO_BENCHMARK(name, description)                                                                   \
  static nlohmann::json maestro_bench_##name(const ::maestro::bench::BenchOptions& options);                   \
  static ::maestro::bench::Registrar maestro_bench_registrar_##name(#name, description, maestro_bench_##name); \
  static nlohmann::json maestro_bench_##name([[maybe_unused]] const ::maestro::bench::BenchOptions& options)
