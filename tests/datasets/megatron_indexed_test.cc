// SPDX-License-Identifier: Apache-2.0
// Megatron indexed corpora (.bin + .idx): the bytes the writer produces
// against the format computed independently, round trips of every integer
// dtype, the "pack" and "split" sample rules on a hand-checked corpus and
// against a naive reference on random corpora, and every damaged input the
// reader must reject with a message naming the file and the place.
#include "datasets/megatron_indexed.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

namespace fs = std::filesystem;
using Docs = std::vector<std::vector<int64_t>>;

// This file's scratch folders: <test-tmp>/maestro-megatron-<pid>/<name> (fixtures::ScratchDir).
constexpr char kScratch[] = "maestro-megatron-";

// Little-endian bytes built with shifts (independent of the writer's memcpy).
void PutLE(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PatchLE(std::string* bytes, size_t offset, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) (*bytes)[offset + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}

MegatronIndexedDataset OpenOrDie(const std::string& prefix) {
  auto ds = MegatronIndexedDataset::Open(prefix);
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return std::move(ds).ValueOrDie();
}

// ---- the bytes --------------------------------------------------------------

TEST(MegatronIndexedTest, WritesTheBytesMegatronWrites) {
  const std::string prefix = fixtures::ScratchDir(kScratch, "bytes") + "/corpus";
  // Two documents of one sequence each, and an empty third one.
  ASSERT_TRUE(WriteMegatronIndexedDataset(prefix, {{1, 2, 3}, {500, 65535}, {}}, MegatronDType::kUint16).ok());
  // What Megatron's _IndexWriter writes: header, lengths (int32), pointers
  // (int64, from the lengths), document indices [0, 1, 2, 3] (int64).
  std::string idx("MMIDIDX\0\0", 9);
  PutLE(&idx, 1, 8);  // version
  PutLE(&idx, 8, 1);  // uint16
  PutLE(&idx, 3, 8);  // sequence_count
  PutLE(&idx, 4, 8);  // document_count (entries)
  for (uint64_t len : {3, 2, 0}) PutLE(&idx, len, 4);
  for (uint64_t ptr : {0, 6, 10}) PutLE(&idx, ptr, 8);
  for (uint64_t e : {0, 1, 2, 3}) PutLE(&idx, e, 8);
  EXPECT_EQ(fixtures::ReadFile(prefix + ".idx"), idx);
  std::string bin;
  for (uint64_t t : {1, 2, 3, 500, 65535}) PutLE(&bin, t, 2);
  EXPECT_EQ(fixtures::ReadFile(prefix + ".bin"), bin);
  EXPECT_FALSE(fs::exists(prefix + ".bin.tmp"));

  // The multimodal tail: one int8 mode per sequence after the document index.
  const std::string mm = fixtures::ScratchDir(kScratch, "bytes-mm") + "/corpus";
  auto writer = MegatronIndexedDatasetWriter::Create(mm, MegatronDType::kInt32, /*with_sequence_modes=*/true);
  ASSERT_TRUE(writer.ok());
  const std::vector<int64_t> a = {7, -8};
  const std::vector<int64_t> b = {9};
  ASSERT_TRUE(writer->AddSequence(a.data(), a.size(), 0).ok());
  ASSERT_TRUE(writer->AddSequence(b.data(), b.size(), 3).ok());
  ASSERT_TRUE(writer->EndDocument().ok());
  ASSERT_TRUE(writer->Finalize().ok());
  std::string mm_idx("MMIDIDX\0\0", 9);
  PutLE(&mm_idx, 1, 8);
  PutLE(&mm_idx, 4, 1);  // int32
  PutLE(&mm_idx, 2, 8);
  PutLE(&mm_idx, 2, 8);
  for (uint64_t len : {2, 1}) PutLE(&mm_idx, len, 4);
  for (uint64_t ptr : {0, 8}) PutLE(&mm_idx, ptr, 8);
  for (uint64_t e : {0, 2}) PutLE(&mm_idx, e, 8);
  for (uint64_t mode : {0, 3}) PutLE(&mm_idx, mode, 1);
  EXPECT_EQ(fixtures::ReadFile(mm + ".idx"), mm_idx);
  std::string mm_bin;
  for (int64_t t : {7, -8, 9}) PutLE(&mm_bin, static_cast<uint64_t>(t), 4);
  EXPECT_EQ(fixtures::ReadFile(mm + ".bin"), mm_bin);
}

// ---- reading ---------------------------------------------------------------------

struct DTypeCase {
  MegatronDType dtype;
  int64_t min;
  int64_t max;
};

TEST(MegatronIndexedTest, RoundTripsEveryIntegerDtype) {
  const std::vector<DTypeCase> cases = {
      {MegatronDType::kUint8, 0, 255},
      {MegatronDType::kInt8, -128, 127},
      {MegatronDType::kInt16, -32768, 32767},
      {MegatronDType::kUint16, 0, 65535},
      {MegatronDType::kInt32, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()},
      {MegatronDType::kInt64, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()},
  };
  for (const DTypeCase& c : cases) {
    SCOPED_TRACE(MegatronDTypeName(c.dtype));
    const std::string prefix =
        fixtures::ScratchDir(kScratch, std::string("rt-") + MegatronDTypeName(c.dtype)) + "/corpus";
    const Docs docs = {{c.min, c.max, 0, 1}, {}, {c.max}, {5, 4, 3, 2, 1, 0, c.min}};
    ASSERT_TRUE(WriteMegatronIndexedDataset(prefix, docs, c.dtype).ok());
    // Each of the three spellings of the pair opens it.
    for (const std::string& spelling : {prefix, prefix + ".idx", prefix + ".bin"}) {
      const MegatronIndexedDataset ds = OpenOrDie(spelling);
      EXPECT_EQ(ds.dtype(), c.dtype);
      EXPECT_EQ(ds.idx_path(), prefix + ".idx");
      EXPECT_EQ(ds.bin_path(), prefix + ".bin");
    }
    const MegatronIndexedDataset ds = OpenOrDie(prefix);
    EXPECT_FALSE(ds.has_sequence_modes());
    ASSERT_EQ(ds.document_count(), static_cast<int64_t>(docs.size()));
    ASSERT_EQ(ds.sequence_count(), static_cast<int64_t>(docs.size()));
    int64_t offset = 0;
    for (size_t d = 0; d < docs.size(); ++d) {
      const int64_t di = static_cast<int64_t>(d);
      auto doc = ds.Document(di);
      ASSERT_TRUE(doc.ok());
      EXPECT_EQ(*doc, docs[d]);
      auto seq = ds.Sequence(di);
      ASSERT_TRUE(seq.ok());
      EXPECT_EQ(*seq, docs[d]);
      EXPECT_EQ(ds.DocumentLength(di), static_cast<int64_t>(docs[d].size()));
      EXPECT_EQ(ds.DocumentTokenOffset(di), offset);
      offset += static_cast<int64_t>(docs[d].size());
    }
    EXPECT_EQ(ds.total_tokens(), offset);
    EXPECT_EQ(fs::file_size(prefix + ".bin"), static_cast<uintmax_t>(offset * MegatronDTypeSize(c.dtype)));
    // A value that does not fit the dtype is refused by the writer.
    if (c.dtype != MegatronDType::kInt64) {
      auto w = WriteMegatronIndexedDataset(prefix + "-big", {{1, c.max + 1}}, c.dtype);
      EXPECT_EQ(w.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(w.message().find("sequence 0, token 1"), std::string::npos) << w.message();
    }
  }
}

// ReadTokens widens 16 tokens at a time and the rest one by one: every dtype,
// extremes and negatives at every position of a block, read from every start
// within two blocks and with counts that end inside, at and past a block.
TEST(MegatronIndexedTest, ReadTokensWidensWholeBlocksAndTailsOfEveryDtype) {
  const std::vector<DTypeCase> cases = {
      {MegatronDType::kUint8, 0, 255},
      {MegatronDType::kInt8, -128, 127},
      {MegatronDType::kInt16, -32768, 32767},
      {MegatronDType::kUint16, 0, 65535},
      {MegatronDType::kInt32, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()},
      {MegatronDType::kInt64, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()},
  };
  for (const DTypeCase& c : cases) {
    SCOPED_TRACE(MegatronDTypeName(c.dtype));
    // 3 blocks and 5: the pattern's period (7) is prime to the block (16), so
    // every value lands on every lane.
    const std::vector<int64_t> pattern = {c.min,     c.max,     c.min + 1,          c.max - 1,
                                          c.min / 2, c.max / 2, c.min == 0 ? 1 : -1};
    std::vector<int64_t> doc(16 * 3 + 5);
    for (size_t i = 0; i < doc.size(); ++i) doc[i] = pattern[i % pattern.size()];
    const std::string prefix =
        fixtures::ScratchDir(kScratch, std::string("widen-") + MegatronDTypeName(c.dtype)) + "/corpus";
    ASSERT_TRUE(WriteMegatronIndexedDataset(prefix, {doc}, c.dtype).ok());
    const MegatronIndexedDataset ds = OpenOrDie(prefix);
    const int64_t n = static_cast<int64_t>(doc.size());
    for (int64_t first = 0; first < 33; ++first) {
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{32}, n - first}) {
        if (first + count > n) continue;
        std::vector<int64_t> got(static_cast<size_t>(count) + 1, 42);  // one past: must stay untouched
        ds.ReadTokens(first, count, got.data());
        const std::vector<int64_t> want(doc.begin() + first, doc.begin() + first + count);
        ASSERT_EQ(std::vector<int64_t>(got.begin(), got.end() - 1), want) << "first " << first << " count " << count;
        ASSERT_EQ(got.back(), 42) << "first " << first << " count " << count;
      }
    }
  }
}

TEST(MegatronIndexedTest, DocumentsOfSeveralSequencesAndModes) {
  const std::string prefix = fixtures::ScratchDir(kScratch, "multi") + "/corpus";
  auto writer = MegatronIndexedDatasetWriter::Create(prefix, MegatronDType::kUint16, /*with_sequence_modes=*/true);
  ASSERT_TRUE(writer.ok());
  const std::vector<int64_t> s0 = {10, 11}, s1 = {12}, s2 = {13, 14, 15};
  ASSERT_TRUE(writer->AddSequence(s0.data(), s0.size()).ok());
  ASSERT_TRUE(writer->AddSequence(s1.data(), s1.size()).ok());
  ASSERT_TRUE(writer->EndDocument().ok());
  ASSERT_TRUE(writer->AddSequence(s2.data(), s2.size(), /*mode=*/1).ok());
  ASSERT_TRUE(writer->EndDocument().ok());
  ASSERT_TRUE(writer->Finalize().ok());
  const MegatronIndexedDataset ds = OpenOrDie(prefix);
  EXPECT_TRUE(ds.has_sequence_modes());
  EXPECT_EQ(ds.sequence_count(), 3);
  EXPECT_EQ(ds.document_count(), 2);
  EXPECT_EQ(ds.DocumentSequences(0), std::make_pair(int64_t{0}, int64_t{2}));
  EXPECT_EQ(ds.DocumentSequences(1), std::make_pair(int64_t{2}, int64_t{3}));
  EXPECT_EQ(ds.DocumentOfSequence(1), 0);
  EXPECT_EQ(ds.DocumentOfSequence(2), 1);
  EXPECT_EQ(*ds.Document(0), (std::vector<int64_t>{10, 11, 12}));
  EXPECT_EQ(*ds.Sequence(1), (std::vector<int64_t>{12}));
  EXPECT_EQ(ds.SequenceMode(2), 1);
  EXPECT_EQ(ds.SequenceMode(0), 0);
  // A sequence of mode 1 is not text: the text sample rules refuse the corpus.
  MegatronSampleOptions o;
  o.seq_len = 2;
  auto samples = MegatronSamples::Build(ds, o);
  ASSERT_FALSE(samples.ok());
  EXPECT_NE(samples.status().message().find("sequence 2 (document 1) has mode 1"), std::string::npos)
      << samples.status().message();
  // Out of range reads are errors naming the file.
  auto bad = ds.Sequence(3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(prefix + ".idx"), std::string::npos);
  EXPECT_FALSE(ds.Document(-1).ok());
  EXPECT_THROW(ds.SequenceLength(3), std::out_of_range);
  std::vector<int64_t> out(2);
  EXPECT_THROW(ds.ReadTokens(5, 2, out.data()), std::out_of_range);
}

// ---- samples ------------------------------------------------------------------

std::vector<int64_t> Inputs(const MegatronSamples& s, int64_t k) {
  return s.Sample(k)->input_ids;
}
std::vector<int64_t> Labels(const MegatronSamples& s, int64_t k) {
  return s.Sample(k)->labels;
}

TEST(MegatronIndexedTest, PackRuleOnAHandCheckedCorpus) {
  const std::string prefix = fixtures::ScratchDir(kScratch, "pack") + "/corpus";
  ASSERT_TRUE(WriteMegatronIndexedDataset(prefix, {{1, 2, 3}, {4, 5}, {6, 7, 8, 9}}, MegatronDType::kUint16).ok());
  const MegatronIndexedDataset ds = OpenOrDie(prefix);
  MegatronSampleOptions o;
  o.rule = MegatronSampleRule::kPack;
  o.seq_len = 3;
  // Stream 1..9: windows [1 2 3 4] and [4 5 6 7]; (9 - 1) / 3 = 2 samples.
  auto plain = MegatronSamples::Build(ds, o);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_EQ(plain->size(), 2);
  EXPECT_EQ(Inputs(*plain, 0), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(Labels(*plain, 0), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(Inputs(*plain, 1), (std::vector<int64_t>{4, 5, 6}));
  EXPECT_EQ(Labels(*plain, 1), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(plain->TokenCounts(), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(plain->Sample(2).status().code(), StatusCode::kInvalidArgument);

  // With eos 99: 1 2 3 99 4 5 99 6 7 8 9 99 (12 tokens): (12 - 1) / 3 = 3.
  o.eos_id = 99;
  auto eos = MegatronSamples::Build(ds, o);
  ASSERT_TRUE(eos.ok());
  ASSERT_EQ(eos->size(), 3);
  EXPECT_EQ(Inputs(*eos, 0), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(Labels(*eos, 0), (std::vector<int64_t>{2, 3, 99}));
  EXPECT_EQ(Inputs(*eos, 1), (std::vector<int64_t>{99, 4, 5}));
  EXPECT_EQ(Labels(*eos, 1), (std::vector<int64_t>{4, 5, 99}));
  EXPECT_EQ(Inputs(*eos, 2), (std::vector<int64_t>{99, 6, 7}));
  EXPECT_EQ(Labels(*eos, 2), (std::vector<int64_t>{6, 7, 8}));
  // Window 1 = eos of document 0, tokens 3..4 of the .bin (document 1), eos of document 1.
  const auto pieces = eos->Pieces(1);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_TRUE(pieces[0].eos);
  EXPECT_EQ(pieces[0].document, 0);
  EXPECT_FALSE(pieces[1].eos);
  EXPECT_EQ(pieces[1].document, 1);
  EXPECT_EQ(pieces[1].first_token, 3);
  EXPECT_EQ(pieces[1].count, 2);
  EXPECT_TRUE(pieces[2].eos);
  EXPECT_EQ(pieces[2].document, 1);
}

TEST(MegatronIndexedTest, SplitRuleOnAHandCheckedCorpus) {
  const std::string prefix = fixtures::ScratchDir(kScratch, "split") + "/corpus";
  ASSERT_TRUE(WriteMegatronIndexedDataset(prefix, {{1, 2, 3, 4, 5}, {6}, {7, 8}}, MegatronDType::kInt32).ok());
  const MegatronIndexedDataset ds = OpenOrDie(prefix);
  MegatronSampleOptions o;
  o.rule = MegatronSampleRule::kSplit;
  o.seq_len = 3;
  o.pad_id = 0;
  // Document 0: [1 2 3 4], [4 5 pad pad]; document 1 (1 token): none;
  // document 2: [7 8 pad pad].
  auto plain = MegatronSamples::Build(ds, o);
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(plain->size(), 3);
  EXPECT_EQ(Inputs(*plain, 0), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(Labels(*plain, 0), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(Inputs(*plain, 1), (std::vector<int64_t>{4, 5, 0}));
  EXPECT_EQ(Labels(*plain, 1), (std::vector<int64_t>{5, kIgnoreLabel, kIgnoreLabel}));
  EXPECT_EQ(Inputs(*plain, 2), (std::vector<int64_t>{7, 8, 0}));
  EXPECT_EQ(Labels(*plain, 2), (std::vector<int64_t>{8, kIgnoreLabel, kIgnoreLabel}));
  EXPECT_EQ(plain->TokenCounts(), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(plain->RealTokens(1), 2);
  EXPECT_EQ(plain->LossTokens(1), 1);
  EXPECT_EQ(plain->Sample(1)->real_tokens, 2);
  EXPECT_EQ(plain->Sample(1)->loss_tokens, 1);

  // With eos 99 and pad 7: [1 2 3 4], [4 5 99 pad]; [6 99]; [7 8 99].
  o.eos_id = 99;
  o.pad_id = 7;
  auto eos = MegatronSamples::Build(ds, o);
  ASSERT_TRUE(eos.ok());
  ASSERT_EQ(eos->size(), 4);
  EXPECT_EQ(Inputs(*eos, 1), (std::vector<int64_t>{4, 5, 99}));
  EXPECT_EQ(Labels(*eos, 1), (std::vector<int64_t>{5, 99, kIgnoreLabel}));
  EXPECT_EQ(Inputs(*eos, 2), (std::vector<int64_t>{6, 99, 7}));
  EXPECT_EQ(Labels(*eos, 2), (std::vector<int64_t>{99, kIgnoreLabel, kIgnoreLabel}));
  EXPECT_EQ(Inputs(*eos, 3), (std::vector<int64_t>{7, 8, 99}));
  EXPECT_EQ(Labels(*eos, 3), (std::vector<int64_t>{8, 99, kIgnoreLabel}));
  EXPECT_EQ(eos->TokenCounts(), (std::vector<int64_t>{3, 3, 2, 3}));
}

// The rules written the naive way: materialise the token stream (pack) or
// each document (split) and cut it.
struct RefSample {
  std::vector<int64_t> inputs, labels;
  int64_t real = 0;
};

std::vector<RefSample> Reference(const Docs& docs, MegatronSampleRule rule, int64_t seq_len, std::optional<int64_t> eos,
                                 int64_t pad) {
  std::vector<RefSample> out;
  auto cut = [&](const std::vector<int64_t>& stream, bool pad_tail) {
    const int64_t n = static_cast<int64_t>(stream.size());
    for (int64_t start = 0; start + 1 < n; start += seq_len) {
      if (!pad_tail && start + seq_len + 1 > n) break;
      RefSample s;
      for (int64_t i = 0; i < seq_len; ++i) {
        s.inputs.push_back(start + i < n ? stream[static_cast<size_t>(start + i)] : pad);
        s.labels.push_back(start + i + 1 < n ? stream[static_cast<size_t>(start + i + 1)] : kIgnoreLabel);
        if (start + i < n) ++s.real;
      }
      out.push_back(s);
    }
  };
  if (rule == MegatronSampleRule::kPack) {
    std::vector<int64_t> stream;
    for (const auto& d : docs) {
      stream.insert(stream.end(), d.begin(), d.end());
      if (eos) stream.push_back(*eos);
    }
    cut(stream, false);
  } else {
    for (const auto& d : docs) {
      std::vector<int64_t> stream = d;
      if (eos) stream.push_back(*eos);
      cut(stream, true);
    }
  }
  return out;
}

TEST(MegatronIndexedTest, RulesMatchANaiveReferenceOnRandomCorpora) {
  std::mt19937_64 rng(20240515);
  for (int trial = 0; trial < 12; ++trial) {
    SCOPED_TRACE(trial);
    const std::string prefix = fixtures::ScratchDir(kScratch, "random-" + std::to_string(trial)) + "/corpus";
    // Documents of 0-3 sequences of 0-40 tokens (empty documents included).
    Docs docs;
    auto writer =
        MegatronIndexedDatasetWriter::Create(prefix, trial % 2 ? MegatronDType::kUint16 : MegatronDType::kInt32);
    ASSERT_TRUE(writer.ok());
    const int n_docs = 1 + static_cast<int>(rng() % 30);
    for (int d = 0; d < n_docs; ++d) {
      std::vector<int64_t> doc;
      const int n_seq = static_cast<int>(rng() % 4);
      for (int s = 0; s < n_seq; ++s) {
        std::vector<int64_t> seq(rng() % 41);
        for (auto& t : seq) t = static_cast<int64_t>(rng() % 1000);
        ASSERT_TRUE(writer->AddSequence(seq.data(), seq.size()).ok());
        doc.insert(doc.end(), seq.begin(), seq.end());
      }
      ASSERT_TRUE(writer->EndDocument().ok());
      docs.push_back(doc);
    }
    ASSERT_TRUE(writer->Finalize().ok());
    const MegatronIndexedDataset ds = OpenOrDie(prefix);
    for (MegatronSampleRule rule : {MegatronSampleRule::kPack, MegatronSampleRule::kSplit}) {
      for (std::optional<int64_t> eos : {std::optional<int64_t>(), std::optional<int64_t>(1000)}) {
        for (int64_t seq_len : {1, 2, 7, 16}) {
          SCOPED_TRACE(testing::Message()
                       << "rule " << static_cast<int>(rule) << " eos " << eos.has_value() << " seq_len " << seq_len);
          MegatronSampleOptions o;
          o.rule = rule;
          o.seq_len = seq_len;
          o.eos_id = eos;
          o.pad_id = 1001;
          auto samples = MegatronSamples::Build(ds, o);
          ASSERT_TRUE(samples.ok());
          const std::vector<RefSample> ref = Reference(docs, rule, seq_len, eos, o.pad_id);
          ASSERT_EQ(samples->size(), static_cast<int64_t>(ref.size()));
          const std::vector<int64_t> counts = samples->TokenCounts();
          MegatronTokenSample got;
          for (int64_t k = 0; k < samples->size(); ++k) {
            samples->ReadSample(k, &got);
            const RefSample& r = ref[static_cast<size_t>(k)];
            ASSERT_EQ(got.input_ids, r.inputs) << "sample " << k;
            ASSERT_EQ(got.labels, r.labels) << "sample " << k;
            ASSERT_EQ(got.real_tokens, r.real) << "sample " << k;
            ASSERT_EQ(samples->RealTokens(k), r.real) << "sample " << k;
            ASSERT_EQ(counts[static_cast<size_t>(k)], r.real) << "sample " << k;
            int64_t loss = 0;
            for (int64_t l : r.labels) loss += l != kIgnoreLabel;
            ASSERT_EQ(samples->LossTokens(k), loss) << "sample " << k;
            ASSERT_EQ(got.loss_tokens, loss) << "sample " << k;
            int64_t piece_tokens = 0;
            for (const auto& p : samples->Pieces(k)) piece_tokens += p.count;
            ASSERT_EQ(piece_tokens, rule == MegatronSampleRule::kPack ? seq_len + 1 : loss + 1);
          }
        }
      }
    }
  }
}

TEST(MegatronIndexedTest, SampleOptionsAreChecked) {
  const std::string prefix = fixtures::ScratchDir(kScratch, "options") + "/corpus";
  ASSERT_TRUE(WriteMegatronIndexedDataset(prefix, {{1, 2, 3}}, MegatronDType::kUint16).ok());
  const MegatronIndexedDataset ds = OpenOrDie(prefix);
  MegatronSampleOptions o;
  o.seq_len = 0;
  auto zero = MegatronSamples::Build(ds, o);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("seq_len 0"), std::string::npos);
  o.seq_len = 2;
  o.eos_id = 50257;
  o.vocab_size = 50257;
  auto eos = MegatronSamples::Build(ds, o);
  ASSERT_FALSE(eos.ok());
  EXPECT_NE(eos.status().message().find("eos_id 50257"), std::string::npos) << eos.status().message();
  o.eos_id = 0;
  o.pad_id = -1;
  EXPECT_FALSE(MegatronSamples::Build(ds, o).ok());
  // A corpus too short for one window has no samples (and reads none).
  o.pad_id = 0;
  o.eos_id.reset();
  o.seq_len = 3;
  auto none = MegatronSamples::Build(ds, o);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->size(), 0);
  EXPECT_THROW(none->RealTokens(0), std::out_of_range);
}

// ---- damaged inputs ----------------------------------------------------------

// A corpus of three documents (lengths 3, 2, 4; uint16) to damage.
class MegatronDamagedCorpusTest : public testing::Test {
 protected:
  void SetUp() override {
    prefix_ = fixtures::ScratchDir(kScratch, testing::UnitTest::GetInstance()->current_test_info()->name()) + "/corpus";
    ASSERT_TRUE(WriteMegatronIndexedDataset(prefix_, {{1, 2, 3}, {4, 5}, {6, 7, 8, 9}}, MegatronDType::kUint16).ok());
    idx_ = fixtures::ReadFile(prefix_ + ".idx");
    bin_ = fixtures::ReadFile(prefix_ + ".bin");
    ASSERT_TRUE(MegatronIndexedDataset::Open(prefix_).ok());
  }
  // Offsets in the .idx of the three-sequence, four-entry corpus.
  static size_t LengthAt(int i) { return 34 + 4 * static_cast<size_t>(i); }
  static size_t PointerAt(int i) { return 34 + 12 + 8 * static_cast<size_t>(i); }
  static size_t DocIndexAt(int e) { return 34 + 36 + 8 * static_cast<size_t>(e); }

  // Writes the damaged pair, opens it, and returns the error.
  Status OpenDamaged() {
    fixtures::WriteFile(prefix_ + ".idx", idx_);
    fixtures::WriteFile(prefix_ + ".bin", bin_);
    auto ds = MegatronIndexedDataset::Open(prefix_);
    EXPECT_FALSE(ds.ok()) << "the damaged corpus opened";
    return ds.ok() ? Status::Ok() : ds.status();
  }
  std::string idx_path() const { return prefix_ + ".idx"; }
  std::string bin_path() const { return prefix_ + ".bin"; }

  std::string prefix_;
  std::string idx_;
  std::string bin_;
};

#define EXPECT_MENTIONS(status, text) \
  EXPECT_NE((status).message().find(text), std::string::npos) << "'" << (text) << "' not in: " << (status).message()

TEST_F(MegatronDamagedCorpusTest, WrongMagic) {
  idx_[0] = 'X';
  const Status s = OpenDamaged();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "magic");
  EXPECT_MENTIONS(s, "preprocess_data.py");
}

TEST_F(MegatronDamagedCorpusTest, EmptyIndex) {
  idx_.clear();
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "empty file");
}

TEST_F(MegatronDamagedCorpusTest, UnsupportedVersion) {
  PatchLE(&idx_, 9, 2, 8);
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "version 2 is not supported");
}

TEST_F(MegatronDamagedCorpusTest, UnknownDtypeCode) {
  PatchLE(&idx_, 17, 9, 1);
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "unknown dtype code 9");
}

TEST_F(MegatronDamagedCorpusTest, FloatDtypeIsNotATokenCorpus) {
  PatchLE(&idx_, 17, 7, 1);  // float32: 4-byte items; make the .bin match
  bin_ += bin_;
  PatchLE(&idx_, PointerAt(1), 12, 8);
  PatchLE(&idx_, PointerAt(2), 20, 8);
  const Status s = OpenDamaged();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "float32");
  EXPECT_MENTIONS(s, "not token ids");
}

TEST_F(MegatronDamagedCorpusTest, TruncatedHeader) {
  idx_.resize(20);
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "truncated header");
}

TEST_F(MegatronDamagedCorpusTest, TruncatedIndex) {
  idx_.resize(idx_.size() - 5);
  const Status s = OpenDamaged();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "truncated index: the header promises 3 sequences and 4 document-index entries");
}

TEST_F(MegatronDamagedCorpusTest, HugeCountsAreTruncationNotOverflow) {
  PatchLE(&idx_, 18, ~uint64_t{0}, 8);
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "truncated index");
}

TEST_F(MegatronDamagedCorpusTest, StrayBytesAfterTheIndex) {
  idx_ += "xy";  // neither 0 nor 3 (one mode per sequence) bytes
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "2 bytes follow the document indices");
}

TEST_F(MegatronDamagedCorpusTest, TruncatedBin) {
  bin_.resize(bin_.size() - 2);
  const Status s = OpenDamaged();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_MENTIONS(s, bin_path());
  EXPECT_MENTIONS(s, "truncated data file: sequence 2 (document 2) takes bytes [10, 18)");
}

TEST_F(MegatronDamagedCorpusTest, BinLongerThanTheIndexSays) {
  bin_ += "zz";
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, bin_path());
  EXPECT_MENTIONS(s, "different runs");
}

TEST_F(MegatronDamagedCorpusTest, MissingBin) {
  fixtures::WriteFile(idx_path(), idx_);
  fs::remove(bin_path());
  auto ds = MegatronIndexedDataset::Open(prefix_);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_MENTIONS(ds.status(), bin_path());
}

TEST_F(MegatronDamagedCorpusTest, PointerOutsideBin) {
  PatchLE(&idx_, PointerAt(1), 1000000, 8);
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "sequence 1 (document 1) points at bytes [1000000");
  EXPECT_MENTIONS(s, "outside");
}

TEST_F(MegatronDamagedCorpusTest, NegativePointer) {
  PatchLE(&idx_, PointerAt(2), static_cast<uint64_t>(int64_t{-8}), 8);
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, "sequence 2 (document 2) points at bytes [-8");
}

TEST_F(MegatronDamagedCorpusTest, PointersNotBackToBack) {
  PatchLE(&idx_, PointerAt(1), 0, 8);  // sequence 1 overlaps sequence 0
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "sequence 1 (document 1) starts at byte 0");
  EXPECT_MENTIONS(s, "end at byte 6");
}

TEST_F(MegatronDamagedCorpusTest, NegativeLength) {
  PatchLE(&idx_, LengthAt(0), static_cast<uint32_t>(-3), 4);
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, "sequence 0 (document 0) has a negative length -3");
}

TEST_F(MegatronDamagedCorpusTest, DocumentIndexDecreases) {
  PatchLE(&idx_, DocIndexAt(2), 0, 8);  // document 1 would end at sequence 0
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, idx_path());
  EXPECT_MENTIONS(s, "document 1 ends at sequence 0, before it starts (sequence 1)");
}

TEST_F(MegatronDamagedCorpusTest, DocumentIndexNotStartingAtZero) {
  PatchLE(&idx_, DocIndexAt(0), 1, 8);
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, "document 0 starts at sequence 1");
}

TEST_F(MegatronDamagedCorpusTest, DocumentIndexNotEndingAtSequenceCount) {
  PatchLE(&idx_, DocIndexAt(3), 2, 8);
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, "the last document ends at sequence 2 but the index holds 3 sequences");
}

TEST_F(MegatronDamagedCorpusTest, DocumentIndexPastTheSequences) {
  PatchLE(&idx_, DocIndexAt(2), 7, 8);
  const Status s = OpenDamaged();
  EXPECT_MENTIONS(s, "document 1 ends at sequence 7, past the 3 sequences");
}

TEST_F(MegatronDamagedCorpusTest, TokenIdAtOrAboveVocab) {
  const MegatronIndexedDataset ds = OpenOrDie(prefix_);
  EXPECT_TRUE(ds.CheckTokenIds(10).ok());
  const Status s = ds.CheckTokenIds(9);  // token 9 is document 2, position 3
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_MENTIONS(s, bin_path());
  EXPECT_MENTIONS(s, "document 2, token 3 (sequence 2, token 3) is id 9, outside the vocabulary [0, 9)");
  EXPECT_MENTIONS(s, "tokenizer");
  EXPECT_MENTIONS(ds.CheckTokenIds(5), "document 1, token 1 (sequence 1, token 1) is id 5");
  EXPECT_FALSE(ds.CheckTokenIds(0).ok());
}

TEST(MegatronIndexedTest, NegativeTokenIdsAreOutsideTheVocab) {
  const std::string prefix = fixtures::ScratchDir(kScratch, "negative") + "/corpus";
  auto writer = MegatronIndexedDatasetWriter::Create(prefix, MegatronDType::kInt16);
  ASSERT_TRUE(writer.ok());
  const std::vector<int64_t> a = {1, 2}, b = {3, -4, 5};
  ASSERT_TRUE(writer->AddDocument(a).ok());
  ASSERT_TRUE(writer->AddSequence(a.data(), a.size()).ok());
  ASSERT_TRUE(writer->AddSequence(b.data(), b.size()).ok());
  ASSERT_TRUE(writer->EndDocument().ok());
  ASSERT_TRUE(writer->Finalize().ok());
  const MegatronIndexedDataset ds = OpenOrDie(prefix);
  const Status s = ds.CheckTokenIds(100);
  EXPECT_MENTIONS(s, prefix + ".bin");
  EXPECT_MENTIONS(s, "document 1, token 3 (sequence 2, token 1) is id -4");
}

TEST(MegatronIndexedTest, WriterRefusesFloatDtypes) {
  const std::string prefix = fixtures::ScratchDir(kScratch, "float-writer") + "/corpus";
  auto w = MegatronIndexedDatasetWriter::Create(prefix, MegatronDType::kFloat32);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace maestro::datasets
