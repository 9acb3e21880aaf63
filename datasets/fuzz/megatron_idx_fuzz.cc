// SPDX-License-Identifier: Apache-2.0
// libFuzzer: any bytes as a Megatron .idx, beside a small valid .bin (24
// bytes: 12 uint16 tokens, 6 int32, 3 int64, ...), must open or fail with a
// Status without crashing, hanging or tripping ASan/UBSan; when it opens,
// every sequence, document and sample of both rules must read back within
// bounds. The files live in a per-process scratch directory under $TMPDIR.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "datasets/megatron_indexed.h"

namespace {

namespace ds = maestro::datasets;

const std::string& Prefix() {
  static const std::string prefix = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string p =
        std::string(tmp != nullptr ? tmp : "/tmp") + "/maestro-megatron-idx-fuzz-" + std::to_string(::getpid());
    std::FILE* bin = std::fopen((p + ".bin").c_str(), "wb");
    if (bin == nullptr) std::abort();
    for (int i = 0; i < 24; ++i) std::fputc(i * 7 + 1, bin);
    std::fclose(bin);
    return p;
  }();
  return prefix;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;
  const std::string& prefix = Prefix();
  std::FILE* idx = std::fopen((prefix + ".idx").c_str(), "wb");
  if (idx == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, idx) != size) std::abort();
  std::fclose(idx);

  auto opened = ds::MegatronIndexedDataset::Open(prefix);
  if (!opened.ok()) return 0;
  const ds::MegatronIndexedDataset& corpus = *opened;
  // A valid index describes at most the .bin's 24 bytes of tokens, but it may
  // hold many empty sequences and documents: keep each run short.
  if (corpus.sequence_count() > 4096 || corpus.document_count() > 4096) return 0;
  for (int64_t i = 0; i < corpus.sequence_count(); ++i) {
    if (!corpus.Sequence(i).ok()) std::abort();
    (void)corpus.SequenceMode(i);
    if (corpus.DocumentOfSequence(i) >= corpus.document_count()) std::abort();
  }
  int64_t tokens = 0;
  for (int64_t d = 0; d < corpus.document_count(); ++d) {
    auto doc = corpus.Document(d);
    if (!doc.ok()) std::abort();
    tokens += static_cast<int64_t>(doc->size());
  }
  if (tokens != corpus.total_tokens()) std::abort();
  (void)corpus.CheckTokenIds(100);
  for (auto rule : {ds::MegatronSampleRule::kPack, ds::MegatronSampleRule::kSplit}) {
    for (int64_t seq_len : {1, 3}) {
      ds::MegatronSampleOptions options;
      options.rule = rule;
      options.seq_len = seq_len;
      options.eos_id = size % 2 == 0 ? std::optional<int64_t>(7) : std::nullopt;
      auto samples = ds::MegatronSamples::Build(corpus, options);
      if (!samples.ok()) continue;  // a multimodal corpus with a non-text mode
      ds::MegatronTokenSample sample;
      for (int64_t k = 0; k < samples->size(); ++k) {
        samples->ReadSample(k, &sample);
        if (sample.real_tokens != samples->RealTokens(k)) std::abort();
      }
      (void)samples->TokenCounts();
    }
  }
  return 0;
}
