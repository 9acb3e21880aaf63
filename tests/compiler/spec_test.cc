// SPDX-License-Identifier: Apache-2.0
// The spec reader: file:line:col messages, suggestions for misspellings,
// graph checks, and strings that must never reach an #SBATCH line.
#include "compiler/spec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "compiler/compile.h"
#include "tests/fixtures/specs.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

namespace fs = std::filesystem;

std::string Base(const std::string& job_extra = "", const std::string& tail = "") {
  return fixtures::TwoSectionSpec(job_extra, tail);
}

// Base() with `keys` (whole lines, as written) added to its [data].
std::string WithData(const std::string& keys) {
  return fixtures::WithLines(Base(), "data", keys);
}

std::string ErrorOf(const std::string& text) {
  auto s = ParseSpecString(text, "spec.toml", ".");
  if (s.ok()) return "";
  return s.status().message();
}

TEST(Spec, ValidSpecParsesIntoSectionsAndEdges) {
  auto s = ParseSpecString(Base(), "spec.toml", ".");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->sections.size(), 2u);
  ASSERT_EQ(s->edges.size(), 1u);
  EXPECT_EQ(s->edges[0].from, "vit");
  EXPECT_EQ(s->edges[0].tensor, "image_embeddings");
  EXPECT_EQ(s->cluster.gpu_types[0].nodes, 4);  // inherited from [cluster]
}

// [data] corpus: a Megatron corpus prefix, relative to the spec's folder.
TEST(Spec, ACorpusIsResolvedAgainstTheSpecFolderAndExcludesAManifest) {
  auto s = ParseSpecString(WithData("corpus = \"data/web_text_document\"\nsample_rule = \"split\"\neos_id = 2\n"),
                           "specs/x.toml", "specs");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->data.corpus, "specs/data/web_text_document");
  EXPECT_EQ(s->data.sample_rule, "split");
  EXPECT_EQ(s->data.eos_id, 2);
  EXPECT_NE(ErrorOf(WithData("corpus = \"c\"\nmanifest = \"m.jsonl\"\n")).find("exclude each other"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithData("corpus = \"c\"\ndataset = \"text\"\n")).find("exclude each other"), std::string::npos);
  const std::string e = ErrorOf(WithData("corpus = \"c\"\nsample_rule = \"packed\"\n"));
  EXPECT_NE(e.find("did you mean"), std::string::npos) << e;
}

// [data] manifest: a JSONL manifest relative to the spec's folder, with the
// keys of its samples; wrong combinations name the key and the fix.
TEST(Spec, AManifestCarriesItsKeysIntoThePlanAndWrongCombinationsAreNamed) {
  const std::string good =
      "manifest = \"data/train.jsonl\"\nimage_token_id = 31999\nmax_images_per_sample = 3\n"
      "on_bad_sample = \"skip\"\nallow_absolute_image_paths = true\nimage_mean = [0.5]\nimage_std = [0.2, 0.3, 0.4]\n";
  auto s = ParseSpecString(WithData(good), "specs/x.toml", "specs");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->data.manifest, "specs/data/train.jsonl");
  EXPECT_EQ(s->data.image_token_id, 31999);
  EXPECT_EQ(s->data.max_images_per_sample, 3);
  EXPECT_EQ(s->data.on_bad_sample, "skip");
  EXPECT_TRUE(s->data.allow_absolute_image_paths);
  EXPECT_EQ(s->data.image_mean, std::vector<double>{0.5});
  EXPECT_EQ(s->data.image_std, (std::vector<double>{0.2, 0.3, 0.4}));
  auto compiled = Compile(*s, CompileOptions{});
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  EXPECT_EQ(compiled->plan.data.manifest, "specs/data/train.jsonl");
  EXPECT_EQ(compiled->plan.data.image_token_id, 31999);
  EXPECT_EQ(compiled->plan.data.max_images_per_sample, 3);
  EXPECT_EQ(compiled->plan.data.on_bad_sample, "skip");
  EXPECT_TRUE(compiled->plan.data.allow_absolute_image_paths);
  // The ViT's work and its edge are planned for K = 3 images per sample:
  // 3 x (16 x 16 patches + the class token) tokens.
  const plan::Plan expanded = plan::ExpandFusedSections(compiled->plan);  // whatever the grouping
  const auto& vit = expanded.sections[0];
  EXPECT_EQ(vit.tokens_per_sample, 3 * (16 * 16 + 1));
  auto k1 = ParseSpecString(WithData("manifest = \"m.jsonl\"\nimage_token_id = 7\n"), "x.toml", ".");
  ASSERT_TRUE(k1.ok()) << k1.status().ToString();
  auto compiled1 = Compile(*k1, CompileOptions{});
  ASSERT_TRUE(compiled1.ok()) << compiled1.status().ToString();
  EXPECT_EQ(expanded.edges[0].bytes_per_sample,
            3 * plan::ExpandFusedSections(compiled1->plan).edges[0].bytes_per_sample);

  // A projector after the ViT maps all K images' rows of a sample.
  std::string with_projector = WithData("manifest = \"m.jsonl\"\nimage_token_id = 7\nmax_images_per_sample = 2\n");
  const std::string llm_inputs = "inputs = [\"vit.image_embeddings\"]";
  with_projector.replace(with_projector.find(llm_inputs), llm_inputs.size(), "inputs = [\"proj.image_embeddings\"]");
  with_projector += R"(
[models.proj]
kind = "projector"
in_dim = 1024
out_dim = 2048

[[section]]
name = "proj"
model = "proj"
activation = "image"
inputs = ["vit.image_embeddings"]
)";
  auto projected = ParseSpecString(with_projector, "x.toml", ".");
  ASSERT_TRUE(projected.ok()) << projected.status().ToString();
  auto compiled_projected = Compile(*projected, CompileOptions{});
  ASSERT_TRUE(compiled_projected.ok()) << compiled_projected.status().ToString();
  const plan::Plan projected_plan = plan::ExpandFusedSections(compiled_projected->plan);
  const int proj = projected_plan.section_index("proj");
  ASSERT_GE(proj, 0);
  EXPECT_EQ(projected_plan.sections[static_cast<size_t>(proj)].tokens_per_sample, 2 * (16 * 16 + 1));

  const auto error_has = [&](const std::string& keys, const std::vector<std::string>& words) {
    const std::string e = ErrorOf(WithData(keys));
    for (const auto& w : words) EXPECT_NE(e.find(w), std::string::npos) << keys << " -> " << e;
  };
  error_has("manifest = \"m.jsonl\"\n", {"image_token_id", "section 'vit'", "placeholder"});
  error_has("image_token_id = 5\n", {"data.image_token_id", "set data.manifest"});
  error_has("max_images_per_sample = 2\n", {"data.max_images_per_sample", "set data.manifest"});
  error_has("on_bad_sample = \"skip\"\n", {"data.on_bad_sample", "set data.manifest"});
  error_has("manifest = \"m.jsonl\"\nimage_token_id = 5\non_bad_sample = \"skipp\"\n",
            {"on_bad_sample", "did you mean"});
  error_has("manifest = \"m.jsonl\"\nimage_token_id = 32000\n", {"image_token_id = 32000", "vocabulary"});
  error_has("manifest = \"m.jsonl\"\nimage_token_id = 5\nmax_images_per_sample = 0\n", {"max_images_per_sample"});
  error_has("manifest = \"m.jsonl\"\nimage_token_id = 5\nimage_std = [0.5, 0.0, 0.5]\n", {"image_std", "positive"});
  error_has("manifest = \"m.jsonl\"\nimage_token_id = 5\nimage_mean = [0.5, 0.5]\n", {"image_mean", "1 or 3"});
  error_has("manifest = \"m.jsonl\"\ndataset = \"text\"\nimage_token_id = 5\n", {"exclude each other"});
}

// [data] image_resolution = "native" (plan/native_vision.h): the keys reach
// the plan; the ViT is priced at m^2 patches per placeholder of the image
// modality and its edge carries seq_len rows per sample; a tower that cannot
// take native images, videos without native resolution, a shared
// placeholder id and bad pixel bounds are each named with the fix.
TEST(Spec, NativeResolutionReachesThePlanAndItsMistakesAreNamed) {
  const std::string qwen_tower = fixtures::WithKeys(Base(), {{"models.vit", "pos_embed", "false"},
                                                             {"models.vit", "cls_token", "false"},
                                                             {"models.vit", "patch_bias", "false"},
                                                             {"models.vit", "final_norm", "false"},
                                                             {"models.vit", "temporal_patch", "2"},
                                                             {"models.vit", "spatial_merge", "2"},
                                                             {"models.vit", "out_dim", "2048"}});
  const std::string keys =
      "manifest = \"m.jsonl\"\nimage_token_id = 7\nvideo_token_id = 8\nimage_resolution = \"native\"\n"
      "image_min_pixels = 1000\nimage_max_pixels = 200000\n";
  auto s = ParseSpecString(fixtures::WithLines(qwen_tower, "data", keys), "x.toml", ".");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto compiled = Compile(*s, CompileOptions{});
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const plan::Plan& p = compiled->plan;
  EXPECT_EQ(p.data.image_resolution, "native");
  EXPECT_EQ(p.data.image_min_pixels, 1000);
  EXPECT_EQ(p.data.image_max_pixels, 200000);
  EXPECT_EQ(p.data.video_token_id, 8);
  const plan::Plan expanded = plan::ExpandFusedSections(p);
  EXPECT_EQ(expanded.sections[0].tokens_per_sample, 256 * 4);  // the modality's 256 placeholders, 2x2 patches each
  EXPECT_EQ(expanded.edges[0].bytes_per_sample, 2048.0 * 2048 * 4);  // seq_len rows of out_dim, fp32

  const auto error_has = [&](const std::string& spec, const std::vector<std::string>& words) {
    const std::string e = ErrorOf(spec);
    for (const auto& w : words) EXPECT_NE(e.find(w), std::string::npos) << e;
  };
  const std::string manifest = "manifest = \"m.jsonl\"\nimage_token_id = 7\n";
  error_has(WithData(manifest + "image_resolution = \"native\"\n"), {"section 'vit'", "Qwen2-VL", "\"fixed\""});
  error_has(fixtures::WithLines(qwen_tower, "data", manifest + "video_token_id = 8\n"),
            {"video_token_id = 8", "image_resolution = \"native\""});
  error_has(fixtures::WithLines(qwen_tower, "data", manifest + "image_resolution = \"native\"\nvideo_token_id = 7\n"),
            {"video_token_id = 7", "own id"});
  error_has(fixtures::WithLines(qwen_tower, "data",
                                manifest + "image_resolution = \"native\"\nimage_min_pixels = 9000\n"
                                           "image_max_pixels = 8000\n"),
            {"image_min_pixels = 9000"});
  error_has(WithData(manifest + "image_resolution = \"natve\"\n"), {"natve", "did you mean"});
  error_has(WithData("image_resolution = \"native\"\n"), {"data.image_resolution", "set data.manifest"});
}

// [data] test_corpus: the held-out corpus, resolved like corpus, needs one.
TEST(Spec, ATestCorpusIsResolvedAgainstTheSpecFolderAndNeedsACorpus) {
  auto s = ParseSpecString(WithData("corpus = \"data/train_document\"\ntest_corpus = \"data/heldout_document\"\n"),
                           "specs/x.toml", "specs");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->data.test_corpus, "specs/data/heldout_document");
  auto absolute =
      ParseSpecString(WithData("corpus = \"c\"\ntest_corpus = \"/data/heldout_document\"\n"), "specs/x.toml", "specs");
  ASSERT_TRUE(absolute.ok()) << absolute.status().ToString();
  EXPECT_EQ(absolute->data.test_corpus, "/data/heldout_document");
  auto none = ParseSpecString(WithData("corpus = \"c\"\n"), "specs/x.toml", "specs");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->data.test_corpus, "");
  const std::string alone = ErrorOf(WithData("test_corpus = \"h\"\n"));
  EXPECT_NE(alone.find("data.test_corpus"), std::string::npos) << alone;
  EXPECT_NE(alone.find("set data.corpus"), std::string::npos) << alone;
  EXPECT_NE(ErrorOf(WithData("corpus = \"c\"\ntest_corpus = \"\"\n")).find("non-empty"), std::string::npos);
  const std::string typo = ErrorOf(WithData("corpus = \"c\"\ntest_corpos = \"h\"\n"));
  EXPECT_NE(typo.find("did you mean 'test_corpus'"), std::string::npos) << typo;
}

TEST(Spec, TomlSyntaxErrorsCarryLineAndColumn) {
  const std::string e = ErrorOf("[job]\nname = \"x\"\nnodes = = 3\n");
  EXPECT_EQ(e.rfind("spec.toml:3:", 0), 0u) << e;
}

TEST(Spec, MisspelledKeysGetASuggestionAtTheirPosition) {
  const std::string e = ErrorOf(Base("reqeue = true\n"));
  EXPECT_NE(e.find("spec.toml:3:1: unknown key 'reqeue' in [job] (did you mean 'requeue'?)"), std::string::npos) << e;
  const std::string m = ErrorOf(Base("", "micro_bach = 2\n"));
  EXPECT_NE(m.find("did you mean 'micro_batch'?"), std::string::npos) << m;
}

TEST(Spec, WrongTypesAndRangesAreReported) {
  EXPECT_NE(ErrorOf(Base("requeue = \"yes\"\n")).find("job.requeue must be a boolean"), std::string::npos);
  EXPECT_NE(ErrorOf(Base("signal_seconds = -5\n")).find("out of range"), std::string::npos);
  EXPECT_NE(ErrorOf(Base("time = \"soon\"\n")).find("not a Slurm time limit"), std::string::npos);
}

TEST(Spec, UnknownSectionsInEdgesAreSuggested) {
  std::string t = Base("", "[[edge]]\nfrom = \"vitt\"\nto = \"llm\"\n");
  const std::string e = ErrorOf(t);
  EXPECT_NE(e.find("unknown section 'vitt' (did you mean 'vit'?)"), std::string::npos) << e;
  const size_t at = t.find("from = \"vitt\"");
  const int line = 1 + static_cast<int>(std::count(t.begin(), t.begin() + static_cast<long>(at), '\n'));
  EXPECT_NE(e.find("spec.toml:" + std::to_string(line) + ":8:"), std::string::npos) << e;  // the value
}

TEST(Spec, CyclesAreReportedWithTheirPath) {
  const std::string e = ErrorOf(Base("", "[[edge]]\nfrom = \"llm\"\nto = \"vit\"\n"));
  EXPECT_NE(e.find("cycle: vit -> llm -> vit"), std::string::npos) << e;
}

TEST(Spec, UnknownModelModalityAndGpuTypeAreSuggested) {
  std::string t = Base();
  t.replace(t.find("model = \"llm\""), 13, "model = \"lm\"");
  EXPECT_NE(ErrorOf(t).find("unknown model 'lm' (did you mean 'llm'?)"), std::string::npos);
  t = Base();
  t.replace(t.find("activation = \"image\""), 20, "activation = \"imag\"");
  EXPECT_NE(ErrorOf(t).find("did you mean 'image'?"), std::string::npos);
  EXPECT_NE(ErrorOf(Base("", "gpu_type = \"h10\"\n")).find("unknown gpu_type 'h10'"), std::string::npos);
}

TEST(Spec, StringsThatCouldEscapeAnSbatchLineAreRejected) {
  EXPECT_NE(ErrorOf(Base("account = \"a b\"\n")).find("#SBATCH line"), std::string::npos);
  EXPECT_NE(ErrorOf(Base("partition = \"p\\n#SBATCH --x\"\n")).find("#SBATCH line"), std::string::npos);
  EXPECT_NE(ErrorOf(Base("output = \"$(rm -rf /)\"\n")).find("#SBATCH line"), std::string::npos);
  std::string t = Base();
  t.replace(t.find("name = \"t\""), 10, "name = \"t;reboot\"");
  EXPECT_NE(ErrorOf(t).find("job.name must be"), std::string::npos);
}

TEST(Spec, ImpossiblePinnedFanOutIsAnError) {
  std::string t = Base("", "dp = 3\n[[edge]]\nfrom = \"vit\"\nto = \"llm\"\nfanout = 2\n");
  t.replace(t.find("activation = \"image\""), 20, "activation = \"image\"\ndp = 2");
  const std::string e = ErrorOf(t);
  EXPECT_NE(e.find("fan-out on edge vit -> llm is impossible"), std::string::npos) << e;
}

TEST(Compile, SectionThatFitsNowhereAndTooSmallBudgetPointAtTheSpec) {
  std::string t = Base();
  t.replace(t.find("hidden = 2048"), 13, "hidden = 65536");
  t.replace(t.find("heads = 16\nkv_heads"), 10, "heads = 64");
  auto spec = ParseSpecString(t, "spec.toml", ".");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto r = Compile(*spec, CompileOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("section 'llm' fits in memory at no configuration"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().rfind("spec.toml:", 0), 0u);

  // One node: too small when every section holds nodes of its own (sections
  // that share nodes fit: tests/compiler/shared_nodes_test.cc).
  t = Base();
  t.replace(t.find("nodes = 4"), 9, "nodes = 1\nshare_nodes = false");
  spec = ParseSpecString(t, "spec.toml", ".");
  ASSERT_TRUE(spec.ok());
  r = Compile(*spec, CompileOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("too small"), std::string::npos) << r.status().message();
}

TEST(Compile, ProfilesFromTheRuntimeReplaceAnalyticTimesAndNameKnownSections) {
  auto spec = ParseSpecString(Base(), "spec.toml", ".");
  ASSERT_TRUE(spec.ok());
  auto without = Compile(*spec, CompileOptions{});
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  const auto chosen = without->assignment.sections[1].cost.config;
  // Measured: the chosen replica shape of 'llm' is far slower than predicted.
  const fs::path file = fs::path(MAESTRO_TEST_TMP) / "profiles_test.json";
  std::ofstream(file) << R"([{"section": "llm", "gpus": )" << chosen.tp * chosen.pp * chosen.cp
                      << R"(, "micro_batch": )" << chosen.micro_batch << R"(, "seconds": 1000.0}])";
  auto profiles = ReadProfilesJson(file.string());
  ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();
  CompileOptions options;
  options.extra_profiles = *profiles;
  auto with = Compile(*spec, options);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  const auto& c = with->assignment.sections[1].cost.config;
  EXPECT_FALSE(c.tp * c.pp * c.cp == chosen.tp * chosen.pp * chosen.cp && c.micro_batch == chosen.micro_batch)
      << "the planner kept the shape measured to be slow";
  options.extra_profiles[0].section = "lmm";
  auto bad = Compile(*spec, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("did you mean 'llm'?"), std::string::npos);
  std::ofstream(file) << "{not json";
  EXPECT_FALSE(ReadProfilesJson(file.string()).ok());
}

TEST(Suggest, OnlyCloseWordsAreSuggested) {
  EXPECT_EQ(Suggest("nmae", {"name", "time"}), " (did you mean 'name'?)");
  EXPECT_EQ(Suggest("zzzzzz", {"name", "time"}), "");
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
}

}  // namespace
}  // namespace maestro::compiler
