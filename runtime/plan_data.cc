// SPDX-License-Identifier: Apache-2.0
#include "runtime/plan_data.h"

#include <fmt/format.h>

#include "base/checks.h"
#include "datasets/demo_data.h"
#include "datasets/megatron_source.h"

namespace maestro::runtime {

namespace {

double ModalityFraction(const plan::Plan& plan, const std::string& name, double fallback) {
  for (const auto& m : plan.data.modalities) {
    if (m.name == name) return m.fraction;
  }
  return fallback;
}

// The smallest vocabulary of the plan's decoders: every token id of the
// corpus must embed in each of them. 0 when the plan has no decoder.
int64_t SmallestDecoderVocab(const plan::Plan& plan) {
  int64_t vocab = 0;
  for (const auto& s : plan.sections) {
    if (s.model.kind != plan::ModelKind::kDecoder) continue;
    vocab = vocab == 0 ? s.model.vocab : std::min(vocab, s.model.vocab);
  }
  return vocab;
}

StatusOr<std::unique_ptr<datasets::SampleSource>> OpenCorpus(const plan::Plan& plan) {
  datasets::MegatronSampleOptions options;
  if (plan.data.sample_rule == "split") {
    options.rule = datasets::MegatronSampleRule::kSplit;
  } else if (plan.data.sample_rule != "pack") {
    return Status::InvalidArgument(
        fmt::format("plan data.sample_rule = '{}' must be \"pack\" or \"split\"", plan.data.sample_rule));
  }
  options.seq_len = plan.data.seq_len;
  if (plan.data.eos_id >= 0) options.eos_id = plan.data.eos_id;
  options.pad_id = plan.data.pad_id;
  options.vocab_size = SmallestDecoderVocab(plan);
  if (options.vocab_size <= 0) {
    return Status::InvalidArgument(
        fmt::format("[data] corpus = '{}': a token corpus needs a decoder section to read it", plan.data.corpus));
  }
  MAESTRO_ASSIGN_OR_RETURN(auto source,
                           datasets::MegatronSampleSource::Open(plan.data.corpus, options, plan.data.test_corpus));
  return std::unique_ptr<datasets::SampleSource>(std::move(source));
}

}  // namespace

StatusOr<std::unique_ptr<datasets::SampleSource>> OpenPlanDataset(const plan::Plan& plan) {
  if (!plan.data.corpus.empty()) return OpenCorpus(plan);
  if (!plan.data.test_corpus.empty()) {
    return Status::InvalidArgument(
        fmt::format("plan data.test_corpus = '{}' without data.corpus: a held-out corpus is the test split of a "
                    "training corpus (set [data] corpus, or remove test_corpus)",
                    plan.data.test_corpus));
  }
  if (!plan.data.manifest.empty()) {
    return Status::FailedPrecondition(
        fmt::format("[data] manifest = '{}': the runtime reads the payloads of the built-in datasets only "
                    "(set manifest = \"\" and dataset = \"fashion_mnist_captions\" or \"text\")",
                    plan.data.manifest));
  }
  datasets::DemoOptions options;
  std::string kind = plan.data.dataset;
  if (kind.empty()) {
    bool image = false;
    for (const auto& s : plan.sections) image = image || s.activation == "image";
    for (const auto& m : plan.data.modalities) image = image || m.name == "image";
    kind = image ? "fashion_mnist_captions" : "text";
  }
  MAESTRO_ASSIGN_OR_RETURN(options.kind, datasets::DemoKindFromName(kind));
  options.seq_len = plan.data.seq_len;
  options.seed = plan.data.seed;
  options.image_fraction = ModalityFraction(plan, "image", 0.5);
  MAESTRO_ASSIGN_OR_RETURN(auto demo, datasets::DemoDataset::Open(options));
  return std::unique_ptr<datasets::SampleSource>(std::move(demo));
}

StatusOr<std::unique_ptr<datalayer::TrainingRun>> OpenPlanRun(const plan::Plan& plan,
                                                              const datasets::SampleSource& samples,
                                                              const std::string& run_dir) {
  datalayer::RunOptions options;
  options.run_dir = run_dir;
  options.seed = plan.data.seed;
  options.global_batch_size = plan.data.global_batch;
  options.keep_last_checkpoints = 2;
  MAESTRO_ASSIGN_OR_RETURN(auto run, datalayer::TrainingRun::Open(options));
  if (run->index().NumSamples() == 0) {
    MAESTRO_RETURN_IF_ERROR(samples.CheckBeforeIngest());
    const std::string manifest = run_dir + "/manifest.jsonl";
    MAESTRO_RETURN_IF_ERROR(datasets::WriteManifest(samples, manifest).status());
    MAESTRO_RETURN_IF_ERROR(run->index().IngestManifest(manifest).status());
  }
  return run;
}

}  // namespace maestro::runtime
