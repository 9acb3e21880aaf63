// SPDX-License-Identifier: Apache-2.0
// Issue #18, the rest: what hostile and careless input did to maestro-compile,
// one test per case, each named after it. Injection into job.sbatch, control
// characters echoed to the terminal and report.txt, a NUL cutting messages
// short, a spec path in invalid UTF-8, 60,000 sections (stack overflow) and
// modalities (a hang), the runtime's limits, booleans taken for integers,
// tiny memory shown as 0.0 GiB, command-line values accepted silently, no
// -o, and output paths that are directories. The library is tested where it
// decides; the tool (maestro-compile as a process) where it prints and exits.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/shell.h"
#include "compiler/compile.h"
#include "compiler/spec.h"

namespace maestro::compiler {
namespace {

namespace fs = std::filesystem;

// A valid two-section spec on H100s (it plans in well under a second);
// `job_extra` goes into [job], `tail` after the last section.
std::string Base(const std::string& job_extra = "", const std::string& tail = "") {
  return R"([job]
name = "t"
)" + job_extra +
         R"(
[cluster]
nodes = 4
gpus_per_node = 8
[cluster.gpu.h100]
memory_gb = 80
tflops_bf16 = 989

[data]
global_batch = 64
seq_len = 2048

[[data.modality]]
name = "image"
fraction = 0.25
tokens = 256

[models.vit]
kind = "vit"
hidden = 1024
layers = 8
heads = 16
ffn_hidden = 4096
image_size = 224
patch_size = 14

[models.llm]
kind = "decoder"
hidden = 2048
layers = 16
heads = 16
kv_heads = 4
ffn_hidden = 5632
vocab = 32000

[[section]]
name = "vit"
model = "vit"
activation = "image"

[[section]]
name = "llm"
model = "llm"
inputs = ["vit.image_embeddings"]
)" + tail;
}

// `text` with the first `from` replaced by `to`.
std::string Replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// "spec.toml:LINE:COL:" of the first `needle` in `text`, `skip` bytes into
// it (1-based, as TOML++ counts).
std::string PlaceOf(const std::string& text, const std::string& needle, size_t skip = 0) {
  size_t at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  if (at == std::string::npos) return "?";
  at += skip;
  const size_t newline = text.rfind('\n', at);
  const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
  const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
  return "spec.toml:" + std::to_string(line) + ":" + std::to_string(at - line_start + 1) + ":";
}

std::string ErrorOf(const std::string& text) {
  auto s = ParseSpecString(text, "spec.toml", ".");
  return s.ok() ? "" : s.status().message();
}

bool HasControlCharacter(const std::string& s, bool newline_ok) {
  return std::any_of(s.begin(), s.end(), [newline_ok](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && !(newline_ok && c == '\n')) || u == 0x7F;
  });
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct ToolRun {
  int exit_code = -1;
  std::string out, err;
};

// maestro-compile with `args` (each shell-quoted) in the folder `cwd`.
ToolRun RunTool(const fs::path& cwd, const std::vector<std::string>& args) {
  std::string cmd =
      "cd " + ShellQuote(cwd.string()) + " && " + ShellQuote(std::string(MAESTRO_BIN_DIR) + "/maestro-compile");
  for (const auto& a : args) cmd += " " + ShellQuote(a);
  cmd += " > tool.out 2> tool.err";
  const int status = std::system(cmd.c_str());
  ToolRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(cwd / "tool.out");
  r.err = Slurp(cwd / "tool.err");
  return r;
}

class HostileInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::path(MAESTRO_TEST_TMP) / "hostile_input" / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  fs::path Write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  fs::path dir_;
};

// ---- Injection ------------------------------------------------------------------

// The spec's file name reaches job.sbatch in the comment on its second line;
// a newline there added a directive and a command.
TEST_F(HostileInput, SpecFileNameWithNewlineStaysInTheCommentOfJobSbatch) {
  const fs::path spec = Write(dir_ / "x\n#SBATCH --account=other\ntouch F\n#.toml", Base());
  auto parsed = ParseSpecFile(spec.string());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto r = Compile(*parsed, CompileOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<std::string> lines = Lines(r->sbatch);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[1].rfind("# Generated by maestro-compile from ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("\\n#SBATCH --account=other\\ntouch F"), std::string::npos) << lines[1];
  for (const std::string& l : lines) EXPECT_NE(l.rfind("#SBATCH --account", 0), 0u) << l;
  EXPECT_EQ(std::count(lines.begin(), lines.end(), "touch F"), 0);
  EXPECT_FALSE(HasControlCharacter(r->sbatch, true));
  // The report names the spec on one line, escaped, too.
  EXPECT_FALSE(HasControlCharacter(r->report, true));
  EXPECT_EQ(Lines(r->report)[0].find("maestro-compile: job 't' from "), 0u);
  EXPECT_NE(Lines(r->report)[0].find("\\ntouch F"), std::string::npos) << Lines(r->report)[0];
}

TEST_F(HostileInput, FolderWithNewlineInTheSpecPathStaysInTheCommentOfJobSbatch) {
  const fs::path spec = Write(dir_ / "a\n#SBATCH --uid=0" / "spec.toml", Base());
  auto parsed = ParseSpecFile(spec.string());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto r = Compile(*parsed, CompileOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Slurm reads any line that starts with #SBATCH as a directive.
  for (const std::string& l : Lines(r->sbatch)) EXPECT_NE(l.rfind("#SBATCH --uid", 0), 0u) << l;
  EXPECT_FALSE(HasControlCharacter(r->sbatch, true));
}

// The tool's own arguments go into the script through the same writer: a
// control character there is refused, not quoted across lines.
TEST_F(HostileInput, OutFolderOrWorkerArgumentWithNewlineIsRefusedByTheScriptWriter) {
  auto parsed = ParseSpecString(Base(), "spec.toml", ".");
  ASSERT_TRUE(parsed.ok());
  CompileOptions out;
  out.out_dir = "o\n#SBATCH --uid=0";
  auto r = Compile(*parsed, out);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("control character"), std::string::npos) << r.status().message();
  EXPECT_FALSE(HasControlCharacter(r.status().message(), false));

  CompileOptions arg;
  arg.worker_args = {"--ok", "x\x1b[2J"};
  r = Compile(*parsed, arg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("\\x1b[2J"), std::string::npos) << r.status().message();

  arg.worker_args = {"a b", "it's", ""};  // quoted, not refused
  r = Compile(*parsed, arg);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->sbatch.find("'a b' 'it'\\''s' ''"), std::string::npos);
}

// Control characters from the spec (ESC, BEL, newline) in messages and in the
// report are escaped.
TEST_F(HostileInput, ControlCharactersFromTheSpecAreEscapedInMessages) {
  const std::string text = Base("", "[[edge]]\nfrom = \"vit\"\nto = \"nope\\u001b[2J\\u0007\\nspec.toml:1:1: fake\"\n");
  const std::string e = ErrorOf(text);
  ASSERT_FALSE(e.empty());
  EXPECT_FALSE(HasControlCharacter(e, false)) << e;  // one error: one line
  EXPECT_NE(e.find("unknown section 'nope\\x1b[2J\\x07\\nspec.toml:1:1: fake'"), std::string::npos) << e;
}

TEST_F(HostileInput, ControlCharactersFromTheSpecAreEscapedInTheReport) {
  const std::string text = Replaced(Base(), "inputs = [\"vit.image_embeddings\"]",
                                    "inputs = [\"vit.t\\u001b]0;pwned\\u0007\\nspeed-up vs monolithic: 99x\"]");
  auto parsed = ParseSpecString(text, "spec.toml", ".");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto r = Compile(*parsed, CompileOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(HasControlCharacter(r->report, true));
  EXPECT_FALSE(HasControlCharacter(r->explain, true));
  EXPECT_NE(r->report.find("t\\x1b]0;pwned\\x07\\nspeed-up vs monolithic: 99x"), std::string::npos) << r->report;
  for (const std::string& l : Lines(r->report)) EXPECT_NE(l.rfind("speed-up vs monolithic: 99x", 0), 0u) << l;
}

// ---- Types and messages -----------------------------------------------------------

// A NUL in a value cut the printed message short and dropped every later
// error (printf's %s stops there).
TEST_F(HostileInput, NulInsideAValueKeepsTheMessageAndTheLaterErrors) {
  std::string text = Replaced(Base(), "model = \"llm\"", "model = \"ll\\u0000m\"");
  text += "[[edge]]\nfrom = \"vit\"\nto = \"after_the_nul\"\n";
  const fs::path spec = Write(dir_ / "spec.toml", text);
  const ToolRun run = RunTool(dir_, {spec.string(), "-o", "out"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("unknown model 'll\\0m'"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("unknown section 'after_the_nul'"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find('\0'), std::string::npos);
}

// nlohmann's dump threw type_error.316 on the spec's path: "internal error".
TEST_F(HostileInput, SpecFileNameInInvalidUtf8IsRefusedNotAnInternalError) {
  const fs::path spec = Write(dir_ / "spec\xff\xfe.toml", Base());
  auto parsed = ParseSpecFile(spec.string());
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("not valid UTF-8"), std::string::npos) << parsed.status().message();
  EXPECT_NE(parsed.status().message().find("spec\\xff\\xfe.toml"), std::string::npos) << parsed.status().message();

  const ToolRun run = RunTool(dir_, {spec.string(), "-o", "out", "--json"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.err.find("internal error"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("not valid UTF-8"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "plan.json"));
}

TEST_F(HostileInput, BooleanForAnIntegerShapeKeyIsRefusedAtTheValue) {
  for (const auto& [key, value, model] : std::vector<std::array<std::string, 3>>{
           {"kv_heads", "true", "llm"}, {"channels", "false", "vit"}, {"spatial_merge", "true", "vit"}}) {
    const std::string line = key + " = " + value;
    const std::string text = key == "kv_heads"
                                 ? Replaced(Base(), "kv_heads = 4", line)
                                 : Replaced(Base(), "patch_size = 14\n", "patch_size = 14\n" + line + "\n");
    EXPECT_EQ(ErrorOf(text), PlaceOf(text, line, key.size() + 3) + " models." + model + "." + key +
                                 " must be an integer, not a boolean");
  }
}

TEST_F(HostileInput, IntegerForAFlagIsRefusedNotIgnored) {
  const std::string text = Replaced(Base(), "vocab = 32000\n", "vocab = 32000\ntie_embeddings = 1\n");
  EXPECT_EQ(ErrorOf(text), PlaceOf(text, "tie_embeddings = 1", 17) +
                               " models.llm.tie_embeddings must be a boolean (true or false), not an integer");
}

// `layers = true` said "layers = 0 is out of range" at the table's header.
TEST_F(HostileInput, LayersTrueSaysItsTypeAtTheValue) {
  const std::string text = Replaced(Base(), "layers = 16", "layers = true");
  const std::string e = ErrorOf(text);
  EXPECT_EQ(e, PlaceOf(text, "true") + " models.llm.layers must be an integer, not a boolean");
}

// A value of the right type but out of the model's bounds points at the value
// too (it pointed at [models.x]).
TEST_F(HostileInput, OutOfRangeShapeValueIsLocatedAtTheValue) {
  const std::string text = Replaced(Base(), "layers = 16", "layers = 5000");
  const std::string e = ErrorOf(text);
  EXPECT_EQ(e.rfind(PlaceOf(text, "5000"), 0), 0u) << e;
  EXPECT_NE(e.find("layers = 5000 is out of range"), std::string::npos) << e;
}

// memory_gb = 1e-3 said "needs at least 0.0 GiB ... has 0.0 GiB".
TEST_F(HostileInput, TinyMemoryShowsUsefulPrecision) {
  auto parsed = ParseSpecString(Replaced(Base(), "memory_gb = 80", "memory_gb = 1e-3"), "spec.toml", ".");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto r = Compile(*parsed, CompileOptions{});
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find("a 'h100' GPU has 976.6 KiB"), std::string::npos) << m;  // 1e6 bytes
  EXPECT_EQ(m.find("0.0 GiB"), std::string::npos) << m;
}

// ---- Crashes, hangs and unbounded work ------------------------------------------

std::string ChainOfSections(int n) {
  std::string text = Replaced(Base(), "[[section]]\nname = \"vit\"", "[[section]]\nname = \"s0\"");
  text = Replaced(text, "[[section]]\nname = \"llm\"\nmodel = \"llm\"\ninputs = [\"vit.image_embeddings\"]\n", "");
  for (int i = 1; i < n; ++i) {
    text += "[[section]]\nname = \"s" + std::to_string(i) + "\"\nmodel = \"llm\"\ninputs = [\"s" +
            std::to_string(i - 1) + "\"]\n";
  }
  return text;
}

// A chain of 60,000 sections overflowed the stack of the recursive cycle
// search (SIGSEGV); the spec reader now stops at the runtime's limit.
TEST_F(HostileInput, ChainOf60000SectionsIsRefusedAtTheFirstSectionTooMany) {
  const std::string text = ChainOfSections(60000);
  const std::string e = ErrorOf(text);
  const std::string first_too_many = "[[section]]\nname = \"s" + std::to_string(kMaxSections) + "\"";
  EXPECT_EQ(e, PlaceOf(text, first_too_many) + " more than 32 [[section]] tables (this is one of 60000): the runtime " +
                   "runs at most 32; merge some");
}

TEST_F(HostileInput, ThirtyTwoSectionsInAChainAreAccepted) {
  auto s = ParseSpecString(ChainOfSections(kMaxSections), "spec.toml", ".");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->sections.size(), static_cast<size_t>(kMaxSections));
}

std::string WithModalities(int n) {
  std::string modalities;
  for (int i = 0; i < n; ++i) {
    modalities += "[[data.modality]]\nname = \"m" + std::to_string(i) + "\"\nfraction = 0.5\ntokens = 4\n";
  }
  return Replaced(Base(), "[[data.modality]]\nname = \"image\"", modalities + "[[data.modality]]\nname = \"image\"");
}

// 60,000 modalities hung the compiler (a linear search per sample and
// modality); the scheduler holds at most 8, and `maestro run` refused the plan.
TEST_F(HostileInput, SixtyThousandModalitiesAreRefusedAtTheNinth) {
  const std::string text = WithModalities(60000);
  const std::string e = ErrorOf(text);
  EXPECT_EQ(e, PlaceOf(text, "[[data.modality]]\nname = \"m8\"") +
                   " more than 8 [[data.modality]] tables (this is one of 60001): the runtime schedules at most 8 "
                   "modalities; merge some");
}

TEST_F(HostileInput, EightModalitiesAreAccepted) {
  auto s = ParseSpecString(WithModalities(kMaxModalities - 1), "spec.toml", ".");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->data.modalities.size(), static_cast<size_t>(kMaxModalities));
}

TEST_F(HostileInput, MoreEdgesThanADagOf32SectionsHasAreRefused) {
  std::string inputs = "\"vit.image_embeddings\"";
  for (int i = 0; i < kMaxEdges; ++i) inputs += ", \"vit.t" + std::to_string(i) + "\"";
  const std::string text = Replaced(Base(), "inputs = [\"vit.image_embeddings\"]", "inputs = [" + inputs + "]");
  const std::string e = ErrorOf(text);
  EXPECT_EQ(e, PlaceOf(text, "\"vit.t" + std::to_string(kMaxEdges - 1) + "\"") + " more than 496 edges (497 with " +
                   "the sections' inputs): 32 sections have at most 496 distinct edges in a DAG");
}

// ---- The command line --------------------------------------------------------------

TEST_F(HostileInput, SeqLenNegativeIsRefusedWithExit2) {
  const std::string config = std::string(MAESTRO_SOURCE_DIR) + "/tests/compiler/data/hf/llama2_7b.json";
  const ToolRun run = RunTool(dir_, {"--model-info", config, "--seq-len", "-5"});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.err.find("--seq-len"), std::string::npos) << run.err;
  EXPECT_EQ(run.out.find("4096"), std::string::npos) << run.out;
  EXPECT_EQ(RunTool(dir_, {"--model-info", config, "--seq-len", "0"}).exit_code, 2);
  EXPECT_EQ(RunTool(dir_, {"--model-info", config, "--seq-len", "128"}).exit_code, 0);
}

TEST_F(HostileInput, EmptyWorkerIsRefusedWithExit2) {
  const fs::path spec = Write(dir_ / "spec.toml", Base());
  const ToolRun run = RunTool(dir_, {spec.string(), "-o", "out", "--worker", ""});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--worker"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(dir_ / "out"));
  EXPECT_EQ(RunTool(dir_, {spec.string(), "-o", "out", "--worker", "w\nx"}).exit_code, 2);
  EXPECT_EQ(RunTool(dir_, {spec.string(), "-o", "out", "--worker-arg", "a\nb"}).exit_code, 2);
}

TEST_F(HostileInput, EmptyRuntimeSupportFeatureIsRefusedWithExit2) {
  const fs::path spec = Write(dir_ / "spec.toml", Base());
  for (const std::string list : {"dp,,tp_decoder", "dp,", ",dp", ""}) {
    const ToolRun run = RunTool(dir_, {spec.string(), "-o", "out", "--runtime-support", list});
    EXPECT_EQ(run.exit_code, 2) << list << ": " << run.err;
    EXPECT_NE(run.err.find("an empty feature"), std::string::npos) << run.err;
  }
  EXPECT_FALSE(fs::exists(dir_ / "out"));
  EXPECT_TRUE(ParseRuntimeSupport("dp,tp_decoder").ok());
}

// Without -o (or with -o "") the tool overwrote plan.json, job.sbatch and
// report.txt in the current folder. -o is required, but with --dry-run.
TEST_F(HostileInput, NoOutFolderIsRefusedAndNothingIsWritten) {
  const fs::path spec = Write(dir_ / "spec.toml", Base());
  Write(dir_ / "plan.json", "someone else's\n");
  ToolRun run = RunTool(dir_, {spec.string()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("-o DIR"), std::string::npos) << run.err;
  run = RunTool(dir_, {spec.string(), "-o", ""});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(Slurp(dir_ / "plan.json"), "someone else's\n");
  EXPECT_FALSE(fs::exists(dir_ / "job.sbatch"));
  EXPECT_FALSE(fs::exists(dir_ / "report.txt"));
  run = RunTool(dir_, {spec.string(), "--dry-run"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("maestro-compile: job 't'"), std::string::npos);
  EXPECT_EQ(Slurp(dir_ / "plan.json"), "someone else's\n");
}

// ---- Outputs ---------------------------------------------------------------------------

// A directory named job.sbatch (or plan.json, report.txt) in the output
// folder left *.tmp files and a new plan.json beside the old job.sbatch.
TEST_F(HostileInput, OutputPathThatIsADirectoryReplacesNothing) {
  auto parsed = ParseSpecString(Base(), "spec.toml", ".");
  ASSERT_TRUE(parsed.ok());
  auto r = Compile(*parsed, CompileOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const std::string in_the_way : {"plan.json", "job.sbatch", "report.txt"}) {
    const fs::path out = dir_ / ("out_" + in_the_way);
    for (const std::string name : {"plan.json", "job.sbatch", "report.txt"}) {
      if (name == in_the_way) {
        fs::create_directories(out / name);
      } else {
        Write(out / name, "old " + name);
      }
    }
    CompileOptions o;
    o.out_dir = out.string();
    const Status s = WriteOutputs(*r, o);
    ASSERT_FALSE(s.ok()) << in_the_way;
    EXPECT_EQ(s.code(), StatusCode::kIOError);
    EXPECT_NE(s.message().find(in_the_way + "': Is a directory"), std::string::npos) << s.message();
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(out)) left.push_back(e.path().filename().string());
    std::sort(left.begin(), left.end());
    EXPECT_EQ(left, (std::vector<std::string>{"job.sbatch", "plan.json", "report.txt"})) << in_the_way;
    for (const std::string name : {"plan.json", "job.sbatch", "report.txt"}) {
      if (name != in_the_way) {
        EXPECT_EQ(Slurp(out / name), "old " + name) << in_the_way << ": " << name;
      }
    }
  }
}

TEST_F(HostileInput, OutputsAreReplacedTogether) {
  auto parsed = ParseSpecString(Base(), "spec.toml", ".");
  ASSERT_TRUE(parsed.ok());
  auto r = Compile(*parsed, CompileOptions{});
  ASSERT_TRUE(r.ok());
  CompileOptions o;
  o.out_dir = (dir_ / "out").string();
  for (const std::string name : {"plan.json", "job.sbatch", "report.txt"}) Write(dir_ / "out" / name, "old");
  ASSERT_TRUE(WriteOutputs(*r, o).ok());
  EXPECT_EQ(Slurp(dir_ / "out" / "job.sbatch"), r->sbatch);
  EXPECT_EQ(Slurp(dir_ / "out" / "report.txt"), r->report);
  EXPECT_EQ(Slurp(dir_ / "out" / "plan.json"), plan::PlanToJson(r->plan) + "\n");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "out" / "job.sbatch").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
}

}  // namespace
}  // namespace maestro::compiler
