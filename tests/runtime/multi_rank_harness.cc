// SPDX-License-Identifier: Apache-2.0
// The runtime's multi-rank test harness (multi_rank_harness.h): running
// maestro-worker ranks and the reference, comparing their losses and
// checkpoints, reading a run back, shaping the tiny plans. No torch.
#include "tests/runtime/multi_rank_harness.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "datalayer/sample_index.h"
#include "datasets/megatron_indexed.h"
#include "tests/fixtures/image_files.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro::runtime_testing {

using launcher::testing::MpirunArgs;
using launcher::testing::RunCaptured;

std::string WorkerBinary() {
  return std::string(MAESTRO_BIN_DIR) + "/maestro-worker";
}

std::string MaestroBinary() {
  return std::string(MAESTRO_BIN_DIR) + "/maestro";
}

RunResult RunBuiltTool(const std::string& tool, const std::vector<std::string>& args,
                       const std::vector<std::pair<std::string, std::string>>& env, int kill_after_s) {
  std::vector<std::string> argv;
  if (kill_after_s > 0) argv = {"timeout", "-s", "KILL", std::to_string(kill_after_s)};
  argv.push_back(std::string(MAESTRO_BIN_DIR) + "/" + tool);
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCaptured(argv, env);
}

RunResult RunMaestro(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env,
                     int kill_after_s) {
  return RunBuiltTool("maestro", args, env, kill_after_s);
}

RunResult RunWorkers(const plan::Plan& p, const std::string& plan_path, const std::string& run_dir,
                     const std::vector<std::string>& extra_flags, const WorkerOptions& options) {
  auto argv = MpirunArgs(p.world_size());
  argv.insert(argv.end(), {WorkerBinary(), "--no-eval"});
  if (!options.per_step_lines) argv.push_back("--no-progress");
  argv.insert(argv.end(), {"--run-dir", run_dir});
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  argv.push_back(plan_path);
  std::vector<std::pair<std::string, std::string>> env{{"MAESTRO_COMM_TIMEOUT_S", options.comm_timeout_s},
                                                       {"MAESTRO_THREADS_PER_RANK", "1"}};
  env.insert(env.end(), options.extra_env.begin(), options.extra_env.end());
  return RunCaptured(argv, env);
}

RunResult RunReference(const std::string& plan_path, const std::string& run_dir,
                       const std::vector<std::string>& extra_flags) {
  std::vector<std::string> argv{WorkerBinary(), "--reference", "--no-eval", "--run-dir", run_dir};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  argv.push_back(plan_path);
  return RunCaptured(argv, {{"MAESTRO_THREADS_PER_RANK", "1"}});
}

bool IsMpirunRank() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
}

void RunThisTestUnderMpirun(int ranks) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto argv = MpirunArgs(ranks);
  argv.push_back(std::filesystem::read_symlink("/proc/self/exe").string());
  argv.push_back(std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name());
  argv.push_back("--gtest_color=no");
  const auto r = RunCaptured(argv, {{"MAESTRO_COMM_TIMEOUT_S", "60"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Every rank ran the test and passed it.
  int passed = 0;
  for (size_t at = r.output.find("[  PASSED  ] 1 test"); at != std::string::npos;
       at = r.output.find("[  PASSED  ] 1 test", at + 1)) {
    ++passed;
  }
  EXPECT_EQ(passed, ranks) << r.output;
}

namespace {

// A fatal failure (it ends the caller that wraps it in ASSERT_NO_FATAL_FAILURE)
// unless `run` exited with `code`.
void AssertExitCode(const RunResult& run, int code, const std::string& what) {
  ASSERT_EQ(run.exit_code, code) << what << "\n" << run.output;
}

}  // namespace

void ExpectLossesNear(const std::string& what, const StepLosses& got, const StepLosses& want, double relative,
                      const std::string& against) {
  for (const auto& [step, loss] : got) {
    ASSERT_TRUE(want.count(step)) << what << " step " << step << against << ": no such step";
    EXPECT_TRUE(std::isfinite(loss)) << what << " step " << step;
    EXPECT_NEAR(loss, want.at(step), relative * std::abs(want.at(step))) << what << " step " << step << against;
  }
}

void ExpectLossFalls(const std::string& what, const StepLosses& losses) {
  ASSERT_FALSE(losses.empty()) << what;
  EXPECT_LT(losses.rbegin()->second, losses.begin()->second) << what << ": the loss moves";
}

RunAndReference ExpectRunEqualsReference(const std::string& what, const plan::Plan& p, const std::string& dir,
                                         const std::string& run_name, const WorkerOptions& options) {
  RunAndReference out;
  out.plan_path = WritePlan(p, dir);
  out.run = RunWorkers(p, out.plan_path, dir + "/" + run_name, {}, options);
  AssertExitCode(out.run, 0, what);
  if (out.run.exit_code != 0) return out;
  out.reference = RunReference(out.plan_path, dir + "/reference");
  AssertExitCode(out.reference, 0, what + " (the reference)");
  if (out.reference.exit_code != 0) return out;
  out.run_losses = Losses(dir + "/" + run_name);
  out.reference_losses = Losses(dir + "/reference");
  [&] {
    ASSERT_EQ(static_cast<int64_t>(out.run_losses.size()), p.data.steps) << what << "\n" << out.run.output;
    ASSERT_EQ(out.reference_losses.size(), out.run_losses.size()) << what << "\n" << out.reference.output;
    ExpectLossesNear(what, out.run_losses, out.reference_losses, 1e-5);
    ExpectLossFalls(what, out.run_losses);
  }();
  return out;
}

ThreeRuns ExpectRunEqualsReferenceAndOther(const std::string& what, const plan::Plan& p, const plan::Plan& other,
                                           const std::string& dir, const std::string& other_name,
                                           const std::string& against_other) {
  ThreeRuns out;
  const std::string path = WritePlan(p, dir);
  const std::string other_dir = dir + "/" + other_name;
  const std::string other_path = WritePlan(other, other_dir);
  out.run = RunWorkers(p, path, dir + "/run");
  AssertExitCode(out.run, 0, what);
  if (out.run.exit_code != 0) return out;
  out.other = RunWorkers(other, other_path, other_dir + "/run");
  AssertExitCode(out.other, 0, what + " (" + other_name + ")");
  if (out.other.exit_code != 0) return out;
  out.reference = RunReference(path, dir + "/reference");
  AssertExitCode(out.reference, 0, what + " (the reference)");
  if (out.reference.exit_code != 0) return out;
  out.run_losses = Losses(dir + "/run");
  out.other_losses = Losses(other_dir + "/run");
  out.reference_losses = Losses(dir + "/reference");
  [&] {
    ASSERT_EQ(static_cast<int64_t>(out.run_losses.size()), p.data.steps) << what << "\n" << out.run.output;
    ASSERT_EQ(out.reference_losses.size(), out.run_losses.size()) << what << "\n" << out.reference.output;
    ASSERT_EQ(out.other_losses.size(), out.run_losses.size()) << what << "\n" << out.other.output;
    ASSERT_NO_FATAL_FAILURE(ExpectLossesNear(what, out.run_losses, out.reference_losses, 1e-5, " vs the reference"));
    ASSERT_NO_FATAL_FAILURE(ExpectLossesNear(what, out.run_losses, out.other_losses, 1e-5, against_other));
    ExpectLossFalls(what, out.run_losses);
  }();
  return out;
}

StopAndResumeRuns ExpectStopAndResumeLossesEqual(const std::string& what, const plan::Plan& p, const std::string& dir,
                                                 int64_t stop_after, const WorkerOptions& options) {
  StopAndResumeRuns out;
  const std::string plan_path = WritePlan(p, dir);
  out.whole = RunWorkers(p, plan_path, dir + "/whole", {}, options);
  AssertExitCode(out.whole, 0, what + " (uninterrupted)");
  if (out.whole.exit_code != 0) return out;
  out.first = RunWorkers(p, plan_path, dir + "/split", {"--stop-after-steps", std::to_string(stop_after)}, options);
  AssertExitCode(out.first, 85, what + ": a stopped run exits 85 (requeue)");
  if (out.first.exit_code != 85) return out;
  EXPECT_EQ(static_cast<int64_t>(Losses(dir + "/split").size()), stop_after) << what << ": steps before the stop";
  out.second = RunWorkers(p, plan_path, dir + "/split", {}, options);
  AssertExitCode(out.second, 0, what + " (resumed)");
  if (out.second.exit_code != 0) return out;
  out.whole_losses = Losses(dir + "/whole");
  out.split_losses = Losses(dir + "/split");
  [&] {
    ASSERT_EQ(static_cast<int64_t>(out.whole_losses.size()), p.data.steps) << what;
    ASSERT_EQ(static_cast<int64_t>(out.split_losses.size()), p.data.steps)
        << what << ": the resumed run starts at the next step, not over";
    for (const auto& [step, loss] : out.whole_losses)
      EXPECT_EQ(loss, out.split_losses.at(step)) << what << " step " << step;
  }();
  return out;
}

void ExpectSameCheckpointWeights(const std::string& what, const datalayer::CheckpointData& x,
                                 const datalayer::CheckpointData& y, const CheckpointChecks& checks) {
  ASSERT_FALSE(x.sections.empty()) << what;
  ASSERT_EQ(x.sections.size(), y.sections.size()) << what << ": entries";
  for (const auto& [name, state] : x.sections) {
    ASSERT_TRUE(y.sections.count(name)) << what << ": " << name;
    const auto& other = y.sections.at(name);
    EXPECT_TRUE(state.model == other.model) << what << ": weights of " << name;
    if (checks.optimizer_present) {
      EXPECT_FALSE(other.optimizer.empty()) << what << ": optimizer of " << name;
    }
    if (checks.optimizer_bytes_equal) {
      EXPECT_TRUE(state.optimizer == other.optimizer) << what << ": optimizer " << name;
    }
  }
}

void ExpectStopAndResumeCheckpointsEqual(const std::string& what, const plan::Plan& p, const std::string& dir,
                                         int64_t stop_after, int64_t last_step, const std::string& prefix,
                                         size_t writer_files, const CheckpointChecks& checks) {
  ASSERT_NO_FATAL_FAILURE(ExpectStopAndResumeLossesEqual(what, p, dir, stop_after));
  const auto x = LastCheckpoint(dir + "/whole");
  const auto y = LastCheckpoint(dir + "/split");
  EXPECT_EQ(x.step, last_step) << what;
  EXPECT_EQ(y.step, last_step) << what;
  ASSERT_EQ(PieceFiles(x, prefix).size(), writer_files) << what << ": rank files holding " << prefix;
  ASSERT_EQ(PieceFiles(y, prefix).size(), writer_files) << what << ": rank files holding " << prefix;
  ExpectSameCheckpointWeights(what, x, y, checks);
}

void ExpectSameSectionWeights(const std::string& what, const std::string& run_a, const std::string& run_b,
                              const std::string& section) {
  const auto x = LastCheckpoint(run_a);
  const auto y = LastCheckpoint(run_b);
  ASSERT_TRUE(x.sections.count(section) && y.sections.count(section)) << what << ": " << section;
  EXPECT_TRUE(x.sections.at(section).model == y.sections.at(section).model) << what << ": weights of " << section;
}

int64_t LoggedNumber(const std::string& output, const std::string& label, int* count) {
  int64_t value = -1;
  int n = 0;
  for (size_t at = output.find(label); at != std::string::npos; at = output.find(label, at + 1)) {
    if (n++ == 0) value = std::atoll(output.c_str() + at + label.size());
  }
  if (count != nullptr) *count = n;
  return value;
}

RunAheadLine ParseRunAheadLine(const std::string& output) {
  RunAheadLine line;
  const size_t at = output.find("batch(es): ");
  if (at == std::string::npos) return line;
  const std::string rest = output.substr(at);
  line.steps_ahead = LoggedNumber(rest, "batch(es): ");
  line.most_rows = LoggedNumber(rest, "at most ");
  line.bound = LoggedNumber(rest, "(bound ");
  return line;
}

int64_t ConsumedSamples(const std::string& run_dir, int64_t epochs) {
  auto index = datalayer::SampleIndex::Open(run_dir + "/index.sqlite");
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  if (!index.ok()) return -1;
  int64_t consumed = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    auto n = (*index)->ConsumedCount(epoch);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    if (!n.ok()) return -1;
    consumed += *n;
  }
  return consumed;
}

StopAndResumeRuns ExpectRunAheadResumeComputesEachRowOnce(const std::string& what, const plan::Plan& p,
                                                          const std::string& dir, int64_t stop_after,
                                                          int64_t rows_before_stop, const WorkerOptions& options) {
  StopAndResumeRuns runs = ExpectStopAndResumeLossesEqual(what, p, dir, stop_after, options);
  if (::testing::Test::HasFatalFailure()) return runs;
  ExpectSameSectionWeights(what, dir + "/whole", dir + "/split", "student");
  const int64_t computed_whole = LoggedNumber(runs.whole.output, "computed ");
  const int64_t computed_first = LoggedNumber(runs.first.output, "computed ");
  const int64_t computed_second = LoggedNumber(runs.second.output, "computed ");
  EXPECT_EQ(computed_first, rows_before_stop) << what << ": the steps before the stop and those computed ahead\n"
                                              << runs.first.output;
  EXPECT_EQ(computed_first + computed_second, computed_whole)
      << what << ": the rows computed ahead before the stop are not computed again\n"
      << runs.first.output << runs.second.output;
  ExpectWholeAndSplitConsumed(dir, p.data.steps, p.data.steps * p.data.global_batch);
  return runs;
}

plan::EdgePlan StudentIntoTeacherEdge() {
  plan::EdgePlan into_teacher;
  into_teacher.from = "student";
  into_teacher.to = "teacher";
  return into_teacher;
}

void ExpectWholeAndSplitConsumed(const std::string& dir, int64_t epochs, int64_t samples) {
  for (const std::string run : {"whole", "split"}) {
    EXPECT_EQ(ConsumedSamples(dir + "/" + run, epochs), samples) << run;
  }
}

pid_t WaitForWorkerOfRank(const std::string& plan_path, int rank, const std::string& run_dir, size_t steps,
                          std::chrono::seconds within, std::chrono::milliseconds poll) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Losses(run_dir).size() >= steps) {
      const pid_t pid = WorkerOfRank(plan_path, rank);
      if (pid > 0) return pid;
    }
    std::this_thread::sleep_for(poll);  // polling a file, not synchronization
  }
  return -1;
}

KilledRun RunAndKillRank(const plan::Plan& p, const std::string& plan_path, const std::string& run_dir, int rank,
                         size_t steps, std::chrono::seconds within, std::chrono::milliseconds poll,
                         const WorkerOptions& options) {
  KilledRun out;
  std::thread job([&] { out.result = RunWorkers(p, plan_path, run_dir, {}, options); });
  out.pid = WaitForWorkerOfRank(plan_path, rank, run_dir, steps, within, poll);
  const auto killed_at = std::chrono::steady_clock::now();
  if (out.pid > 0) {
    EXPECT_EQ(::kill(out.pid, SIGKILL), 0) << "rank " << rank;
  }
  job.join();
  out.seconds_after_kill = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  return out;
}

void ExpectKilledRankEndedTheJob(const KilledRun& killed, int victim, const std::string& no_progress) {
  ASSERT_GT(killed.pid, 0) << no_progress;
  const RunResult& result = killed.result;
  EXPECT_NE(result.exit_code, 0) << result.output;
  // mpirun ends with the killed rank's status (128 + 9); the outer timeout
  // (MpirunArgs: 120 s) would end it after the communication timeout.
  EXPECT_LT(killed.seconds_after_kill, 60.0) << "within the communication timeout (60 s): no hang\n" << result.output;
  EXPECT_NE(result.output.find("process rank " + std::to_string(victim)), std::string::npos) << result.output;
}

void SetDegrees(plan::SectionPlan& section, const SectionDegrees& degrees) {
  section.config.tp = degrees.tp;
  section.config.pp = degrees.pp;
  section.config.cp = degrees.cp;
  section.config.dp = degrees.dp;
  section.config.micro_batch = degrees.micro_batch;
}

void UseKdLoss(plan::SectionPlan& student) {
  if (student.loss.kind == "kd") return;
  student.loss.kind = "kd";
  student.loss.kd_alpha = 0.5;
  student.loss.temperature = 2.0;
}

plan::SectionPlan* ShapeTinyKd(plan::Plan& p, const SectionDegrees& student, const SectionDegrees& teacher,
                               int student_zero_stage) {
  plan::SectionPlan* student_section = nullptr;
  for (auto& s : p.sections) {
    const bool is_student = s.name == "student";
    s.init_from.clear();
    SetDegrees(s, is_student ? student : teacher);
    s.config.zero_stage = is_student ? student_zero_stage : 0;
    if (is_student) student_section = &s;
  }
  EXPECT_NE(student_section, nullptr) << "the tiny KD has a section 'student'";
  return student_section;
}

void UseTinyMoe(plan::ModelDesc& model, bool qwen2_shape, double aux_loss_coef) {
  model.experts = 4;
  model.experts_per_token = 2;
  model.moe_ffn_hidden = 64;
  model.ffn_hidden = 0;
  model.extra["router_aux_loss_coef"] = aux_loss_coef;
  if (qwen2_shape) {
    model.extra["shared_expert_ffn_hidden"] = 96;
    model.extra["norm_topk_prob"] = 0;
  }
}

void UseImageManifest(plan::Plan& p, const std::string& manifest, int64_t image_token, int64_t seq_len,
                      int64_t global_batch) {
  p.data.dataset.clear();
  p.data.manifest = manifest;
  p.data.image_token_id = image_token;
  p.data.max_images_per_sample = 2;
  p.data.seq_len = seq_len;
  p.data.global_batch = global_batch;
}

plan::SectionPlan* TheFusedSection(plan::Plan& p) {
  EXPECT_EQ(p.sections.size(), 1u) << "a plan compiled --grouping fused has one section";
  if (p.sections.size() != 1) return nullptr;
  EXPECT_TRUE(p.sections[0].fused()) << p.sections[0].name;
  return p.sections[0].fused() ? &p.sections[0] : nullptr;
}

std::string WriteImageManifest(const std::string& dir, int samples, int64_t placeholders_per_image, int64_t image_token,
                               const std::vector<std::string>& extra_lines, ImageManifestKind kind) {
  const bool jpeg = kind == ImageManifestKind::kPngAndJpegWithIds;
  std::filesystem::create_directories(dir + "/img");
  for (int k = 0; k < 6; ++k) {
    std::vector<uint8_t> gray(28 * 28), rgb(20 * 36 * 3);
    for (int y = 0; y < 28; ++y) {
      for (int x = 0; x < 28; ++x)
        gray[static_cast<size_t>(y * 28 + x)] = static_cast<uint8_t>((x * (k + 1) * 9 + y * 17) % 256);
    }
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * (k + 3)) % 251);
    EXPECT_TRUE(testing::WriteBytes(fmt::format("{}/img/{}.png", dir, k), testing::EncodePng8(gray, 28, 28, 1)));
    if (jpeg) {
      EXPECT_TRUE(testing::WriteBytes(fmt::format("{}/img/{}.jpg", dir, k), testing::EncodeJpeg8(rgb, 20, 36, 3)));
    }
  }
  std::string text;
  for (int i = 0; i < samples; ++i) {
    std::vector<int64_t> ids{257};
    std::vector<std::string> images;
    for (int k = 0; k < i % 3; ++k) {
      const int image = (i + k) % 6;
      images.push_back(fmt::format("img/{}.{}", image, !jpeg || (i + k) % 2 == 0 ? "png" : "jpg"));
      ids.insert(ids.end(), static_cast<size_t>(placeholders_per_image), image_token);
      ids.push_back(260 + image);  // a word naming the image
    }
    for (int t = 0; t < 8 + i % 5; ++t) ids.push_back(32 + (i * 7 + t) % 60);  // counting text
    ids.push_back(258);
    nlohmann::json line{{"input_ids", ids}};
    if (jpeg) line["id"] = fmt::format("s{}", i);
    if (!images.empty()) line["images"] = images;
    text += line.dump() + "\n";
  }
  for (const auto& line : extra_lines) text += line + "\n";
  const std::string path = dir + "/train.jsonl";
  EXPECT_TRUE(testing::WriteBytes(path, text));
  return path;
}

std::string WriteCountingCorpus(const std::string& dir, int64_t first_token) {
  std::vector<std::vector<int64_t>> documents;
  uint64_t x = 12345;
  for (int d = 0; d < 120; ++d) {
    std::vector<int64_t> doc;
    const int64_t start = static_cast<int64_t>(x % 50);
    for (int t = 0; t < 40 + d % 30; ++t) doc.push_back(first_token + (start + t) % 250);  // learnable: counting
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    documents.push_back(doc);
  }
  const std::string prefix = dir + "/corpus_text_document";
  EXPECT_TRUE(datasets::WriteMegatronIndexedDataset(prefix, documents, datasets::MegatronDType::kUint16).ok());
  return prefix;
}

}  // namespace maestro::runtime_testing
