// SPDX-License-Identifier: Apache-2.0
// hf/safetensors.h: what the writer produces byte for byte (checked against a
// header built by hand from the format's README), round trips of every dtype,
// and every malformed file the reader must refuse with the file's name.
#include "hf/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "tests/fixtures/scratch.h"

namespace maestro::hf {
namespace {

class SafetensorsTest : public fixtures::TempDirTest {
 protected:
  SafetensorsTest() : TempDirTest("maestro-st") {}
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  static std::string Read(const std::string& path) { return fixtures::ReadFile(path); }
  void WriteRaw(const std::string& path, const std::string& bytes) { fixtures::WriteFile(path, bytes); }
  // A file of the given header text (size prefix added) and data bytes.
  static std::string FileOf(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
    return out + header + data;
  }
  // Opens bytes written to a file; the error message when refused.
  std::string Refusal(const std::string& bytes) {
    const std::string path = Path("bad.safetensors");
    WriteRaw(path, bytes);
    auto f = SafetensorsFile::Open(path);
    if (f.ok()) return "";
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
    return f.status().message();
  }
};

TEST_F(SafetensorsTest, WritesTheFormatByteForByte) {
  const float values[2] = {1.0f, -2.5f};
  const std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  const std::string path = Path("a.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", TensorDType::kF32, {2}, data}}, {{"format", "pt"}}).ok());
  // The README's layout: u64 little-endian N, the JSON header padded with
  // spaces to a multiple of 8 (HF's writer does), then the data.
  std::string header = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(Read(path), FileOf(header, data));
}

TEST_F(SafetensorsTest, EveryDTypeRoundTripsWithShapesAndMetadata) {
  const std::vector<TensorDType> all = {
      TensorDType::kBool, TensorDType::kU8,  TensorDType::kI8,  TensorDType::kF8E5M2, TensorDType::kF8E4M3,
      TensorDType::kI16,  TensorDType::kU16, TensorDType::kF16, TensorDType::kBF16,   TensorDType::kI32,
      TensorDType::kU32,  TensorDType::kF32, TensorDType::kF64, TensorDType::kI64,    TensorDType::kU64};
  std::vector<std::string> payloads;
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < all.size(); ++i) {
    const size_t bytes = TensorDTypeSize(all[i]) * 6;
    std::string p(bytes, '\0');
    for (size_t b = 0; b < bytes; ++b) p[b] = static_cast<char>(i * 31 + b);
    payloads.push_back(p);
  }
  for (size_t i = 0; i < all.size(); ++i) {
    tensors.push_back({std::string("t.") + TensorDTypeName(all[i]), all[i], {2, 3}, payloads[i]});
  }
  tensors.push_back({"scalar", TensorDType::kF32, {}, std::string_view(payloads[11]).substr(0, 4)});
  tensors.push_back({"empty", TensorDType::kF32, {0, 5}, std::string_view()});
  const std::string path = Path("all.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}, {"note", "x"}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->metadata().at("note"), "x");
  EXPECT_EQ((*f)->tensors().size(), tensors.size());
  for (const TensorToWrite& t : tensors) {
    const TensorInfo* info = (*f)->Find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->dtype, t.dtype);
    EXPECT_EQ(info->shape, t.shape);
    const TensorView v = (*f)->View(*info);
    ASSERT_EQ(v.bytes, t.bytes.size());
    EXPECT_EQ(std::memcmp(v.data, t.bytes.data(), v.bytes), 0) << t.name;
  }
  EXPECT_EQ((*f)->Find("missing"), nullptr);
  // The data starts 8-aligned.
  auto header = ParseSafetensorsHeader(Read(path), path);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->data_start % 8, 0u);
}

TEST_F(SafetensorsTest, TheWriterRefusesWhatTheFormatCannotHold) {
  const std::string four(4, '\0');
  EXPECT_FALSE(WriteSafetensors(Path("x"), {{"a", TensorDType::kF32, {2}, four}}).ok());  // 4 bytes for 2 floats
  EXPECT_FALSE(
      WriteSafetensors(Path("x"), {{"a", TensorDType::kF32, {1}, four}, {"a", TensorDType::kF32, {1}, four}}).ok());
  EXPECT_FALSE(WriteSafetensors(Path("x"), {{"__metadata__", TensorDType::kF32, {1}, four}}).ok());
  EXPECT_FALSE(std::filesystem::exists(Path("x")));
}

TEST_F(SafetensorsTest, RefusesEveryMalformedFileNamingIt) {
  const std::string d8(8, '\0');
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape, int b, int e) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  // A valid file to start from.
  EXPECT_EQ(Refusal(FileOf("{" + entry("a", "F32", "[2]", 0, 8) + "}", d8)), "");
  EXPECT_EQ(Refusal(FileOf("{" + entry("a", "F32", "[2]", 0, 8) + "}   ", d8)), "");  // padded header
  // Header size bounds.
  EXPECT_NE(Refusal("abc").find("too short"), std::string::npos);
  std::string huge(8, '\0');
  huge[4] = 1;  // 2^32 bytes of header
  EXPECT_NE(Refusal(huge + "{}").find("outside"), std::string::npos);
  std::string claims(8, '\0');
  claims[0] = 100;
  EXPECT_NE(Refusal(claims + "{}").find("claims 100 bytes"), std::string::npos);
  // Header content.
  EXPECT_NE(Refusal(FileOf(" {}", "")).find("start with '{'"), std::string::npos);
  EXPECT_NE(Refusal(FileOf("{\"a\":", "")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(Refusal(FileOf("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("a", "F32", "[1]", 4, 8) + "}", d8))
                .find("names 'a' twice"),
            std::string::npos);
  EXPECT_NE(Refusal(FileOf("{" + entry("a", "F17", "[2]", 0, 8) + "}", d8)).find("unknown dtype 'F17'"),
            std::string::npos);
  EXPECT_NE(Refusal(FileOf("{" + entry("a", "F32", "[-2]", 0, 8) + "}", d8)).find("non-negative"), std::string::npos);
  EXPECT_NE(Refusal(FileOf("{" + entry("a", "F32", "[2.5]", 0, 8) + "}", d8)).find("non-negative"), std::string::npos);
  EXPECT_NE(Refusal(FileOf(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", d8)).find("unknown key"),
            std::string::npos);
  EXPECT_NE(Refusal(FileOf(R"({"__metadata__":{"k":1}})", "")).find("not a string"), std::string::npos);
  // dtype against shape.
  EXPECT_NE(Refusal(FileOf("{" + entry("a", "F32", "[3]", 0, 8) + "}", d8)).find("needs 12"), std::string::npos);
  EXPECT_NE(Refusal(FileOf("{" + entry("a", "F64", "[4611686018427387904]", 0, 8) + "}", d8)).find("overflows"),
            std::string::npos);
  // Offsets: a hole, an overlap, trailing bytes, a truncated file.
  EXPECT_NE(Refusal(FileOf("{" + entry("a", "F32", "[1]", 4, 8) + "}", d8)).find("begins at byte 4"),
            std::string::npos);
  EXPECT_NE(Refusal(FileOf("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[1]", 4, 8) + "}", d8))
                .find("no hole or overlap"),
            std::string::npos);
  EXPECT_NE(Refusal(FileOf("{" + entry("a", "F32", "[1]", 0, 4) + "}", d8)).find("cover 4 bytes"), std::string::npos);
  EXPECT_NE(Refusal(FileOf("{" + entry("a", "F32", "[2]", 0, 8) + "}", d8.substr(0, 5))).find("truncated"),
            std::string::npos);
}

TEST_F(SafetensorsTest, AMissingFileIsNotFound) {
  auto f = SafetensorsFile::Open(Path("nope.safetensors"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace maestro::hf
