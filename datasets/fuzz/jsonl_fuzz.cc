// SPDX-License-Identifier: Apache-2.0
// libFuzzer: any bytes as a JSONL manifest (check_images_exist = false, so
// image paths are only resolved) must open or fail with a Status, without
// crashing, hanging or tripping ASan/UBSan, under both bad-sample policies;
// when it opens, every sample must read back (Sample) and agree with what
// Open counted: seq_len inputs and targets, ids in the vocabulary, each image
// run of tokens_per_image placeholders inside the inputs, one path per run.
// The manifest lives in a per-process scratch directory under $TMPDIR.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "datasets/jsonl_manifest.h"

namespace {

namespace ds = maestro::datasets;

const std::string& ManifestPath() {
  static const std::string path = [] {
    const char* tmp = std::getenv("TMPDIR");
    return std::string(tmp != nullptr ? tmp : "/tmp") + "/maestro-jsonl-fuzz-" + std::to_string(::getpid()) + ".jsonl";
  }();
  return path;
}

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;
  const std::string& path = ManifestPath();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);

  ds::JsonlManifestOptions o;
  o.seq_len = 16;
  o.vocab_size = 64;
  o.image_token_id = (size % 5 == 0) ? -1 : 63;
  o.tokens_per_image = (size % 5 == 0) ? 0 : 2;
  o.pad_id = 0;
  o.check_images_exist = false;
  o.allow_absolute_paths = (size % 3 == 0);
  o.on_bad_sample = (size % 2 == 0) ? ds::BadSamplePolicy::kSkip : ds::BadSamplePolicy::kError;
  auto opened = ds::JsonlManifest::Open(path, o);
  if (!opened.ok()) {
    Check(o.on_bad_sample == ds::BadSamplePolicy::kError);  // kSkip fails only on the file itself
    return 0;
  }
  const ds::JsonlManifest& m = *opened;
  Check(m.size() + static_cast<int64_t>(m.skipped().size()) <= m.lines());
  for (int64_t i = 0; i < m.size() && i < 4096; ++i) {
    auto s = m.Sample(i);
    Check(s.ok());
    Check(s->id == i && s->line == m.LineOf(i) && m.SampleOfLine(s->line) == i);
    Check(static_cast<int64_t>(s->input_ids.size()) == o.seq_len);
    Check(static_cast<int64_t>(s->target_ids.size()) == o.seq_len);
    for (int64_t t = 0; t < o.seq_len; ++t) {
      const int64_t in = s->input_ids[static_cast<size_t>(t)];
      const int64_t tg = s->target_ids[static_cast<size_t>(t)];
      Check(in >= 0 && in < o.vocab_size);
      Check(tg == ds::kJsonlIgnoreTarget || (tg >= 0 && tg < o.vocab_size));
    }
    Check(s->image_paths.size() == s->image_runs.size());
    for (const ds::ImageTokenRun& run : s->image_runs) {
      Check(run.length == o.tokens_per_image && run.start >= 0 && run.start + run.length <= o.seq_len);
      for (int64_t t = run.start; t < run.start + run.length; ++t) {
        Check(s->input_ids[static_cast<size_t>(t)] == o.image_token_id);
      }
    }
    const ds::JsonlTokenCounts c = m.Counts(i);
    Check(c.text == s->counts.text && c.image == s->counts.image && c.images == s->counts.images &&
          c.loss == s->counts.loss);
    Check(c.text + c.image == s->real_tokens);
  }
  return 0;
}
