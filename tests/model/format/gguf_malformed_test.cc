// Every malformed GGUF gets a specific error, never a crash or a huge allocation. Each case
// patches one field of a valid image (gguf_test_util.h).
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "model/format/gguf_file.h"
#include "tests/model/format/gguf_test_util.h"
#include "tests/model/format/status_matchers.h"

namespace tandem {
namespace {

using ::tandem::testing::OffsetAfter;
using ::tandem::testing::Patch;
using ::tandem::testing::SmallGguf;
using ::tandem::testing::TensorInfoAt;

absl::Status Parse(std::string bytes) {
  return GgufFile::FromBytes(std::move(bytes), "bad.gguf").status();
}

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

TEST(GgufMalformedTest, ValidImageParses) { EXPECT_TRUE(Parse(SmallGguf()).ok()); }

TEST(GgufMalformedTest, BadMagic) {
  std::string b = SmallGguf();
  b[3] = 'X';
  EXPECT_STATUS_IS(Parse(b), kInvalid, "bad.gguf: not a GGUF file: bad magic");
}

TEST(GgufMalformedTest, UnsupportedVersions) {
  for (const uint32_t v : {1u, 4u, 0x03000000u}) {
    std::string b = SmallGguf();
    Patch<uint32_t>(b, 4, v);
    EXPECT_STATUS_IS(Parse(b), absl::StatusCode::kUnimplemented,
                     "unsupported GGUF version " + std::to_string(v));
  }
  EXPECT_TRUE(Parse(SmallGguf(2)).ok());
}

TEST(GgufMalformedTest, TruncatedAnywhereInTheHeader) {
  const std::string full = SmallGguf();
  EXPECT_STATUS_IS(Parse(""), kInvalid, "truncated file: GGUF magic needs 4 bytes");
  EXPECT_STATUS_IS(Parse(full.substr(0, 10)), kInvalid, "truncated file: tensor count");
  // Every cut inside metadata or tensor infos is reported, whatever field it lands in.
  const size_t header_end = OffsetAfter(full, "t1") + 4 + 16 + 4 + 8;
  for (size_t cut = 24; cut < header_end; ++cut) {
    const absl::Status s = Parse(full.substr(0, cut));
    EXPECT_EQ(s.code(), kInvalid) << cut << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "truncated") ||
                absl::StrContains(s.message(), "exceeds") ||
                absl::StrContains(s.message(), "cannot fit") ||
                absl::StrContains(s.message(), "impossible"))
        << cut << ": " << s;
  }
}

TEST(GgufMalformedTest, TruncatedData) {
  const std::string full = SmallGguf();
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(full, "full");
  ASSERT_TRUE(f.ok());
  // t1 occupies [256, 392) of the data section; the padding after it may go, its last byte not.
  const size_t t1_end = (*f)->contents().data_offset + 392;
  EXPECT_TRUE(Parse(full.substr(0, t1_end)).ok());
  const std::string cut = full.substr(0, t1_end - 1);
  EXPECT_STATUS_IS(Parse(cut), kInvalid, "tensor 't1': data [256, 392) of the data section");
  EXPECT_STATUS_IS(Parse(cut), kInvalid, "extends past the end of the file");
}

TEST(GgufMalformedTest, AbsurdCounts) {
  std::string b = SmallGguf();
  Patch<uint64_t>(b, 8, uint64_t{1} << 60);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "tensor count 1152921504606846976 is impossible");
  b = SmallGguf();
  Patch<uint64_t>(b, 16, uint64_t{1} << 60);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "metadata count 1152921504606846976 is impossible");
}

TEST(GgufMalformedTest, AbsurdStringLength) {
  std::string b = SmallGguf();
  Patch<uint64_t>(b, 24, uint64_t{1} << 62);  // length of the first key
  EXPECT_STATUS_IS(Parse(b), kInvalid, "metadata entry #0: metadata key: string length");
  EXPECT_STATUS_IS(Parse(b), kInvalid, "exceeds the");
  b = SmallGguf();
  Patch<uint64_t>(b, OffsetAfter(b, "a.str") + 4, uint64_t{1} << 40);  // the value's length
  EXPECT_STATUS_IS(Parse(b), kInvalid, "metadata entry #1 ('a.str'): string value: string length");
}

TEST(GgufMalformedTest, AbsurdArrayLength) {
  std::string b = SmallGguf();
  Patch<uint64_t>(b, OffsetAfter(b, "a.arr") + 8, uint64_t{1} << 61);  // after type + elem type
  EXPECT_STATUS_IS(Parse(b), kInvalid, "('a.arr'): array length 2305843009213693952 of INT32");
}

TEST(GgufMalformedTest, UnknownValueTypeAndBadBool) {
  std::string b = SmallGguf();
  Patch<uint32_t>(b, OffsetAfter(b, "a.u32"), 13);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "('a.u32'): unknown value type 13");
  b = SmallGguf();
  Patch<uint8_t>(b, OffsetAfter(b, "a.flag") + 4, 2);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "('a.flag'): bool value 2 is neither 0 nor 1");
}

TEST(GgufMalformedTest, DuplicateKey) {
  std::string b = SmallGguf();
  const size_t at = OffsetAfter(b, "a.arr") - 5;
  b.replace(at, 5, "a.str");  // same length: now two keys are "a.str"
  EXPECT_STATUS_IS(Parse(b), kInvalid, "duplicate metadata key");
}

TEST(GgufMalformedTest, BadDimensions) {
  std::string b = SmallGguf();
  Patch<uint32_t>(b, TensorInfoAt(b, "t0", 2).n_dims, 5);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "tensor 't0': 5 dimensions (GGUF allows 1..4)");
  b = SmallGguf();
  Patch<uint32_t>(b, TensorInfoAt(b, "t0", 2).n_dims, 0);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "tensor 't0': 0 dimensions");
  b = SmallGguf();
  Patch<uint64_t>(b, TensorInfoAt(b, "t0", 2).dims + 8, 0);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "tensor 't0': dimension 1 is 0 (must be positive)");
  b = SmallGguf();
  Patch<uint64_t>(b, TensorInfoAt(b, "t0", 2).dims, uint64_t{1} << 40);
  Patch<uint64_t>(b, TensorInfoAt(b, "t0", 2).dims + 8, uint64_t{1} << 40);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "tensor 't0': element count overflows int64");
  b = SmallGguf();
  Patch<uint64_t>(b, TensorInfoAt(b, "t0", 2).dims, uint64_t{1} << 20);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "extends past the end of the file");
}

TEST(GgufMalformedTest, RowNotAWholeNumberOfBlocks) {
  std::string b = SmallGguf();
  const auto f = TensorInfoAt(b, "t1", 2);
  Patch<uint64_t>(b, f.dims, 16);     // ne0 32 -> 16
  Patch<uint64_t>(b, f.dims + 8, 8);  // ne1 4 -> 8: same element count
  EXPECT_STATUS_IS(Parse(b), kInvalid,
                   "tensor 't1': row length 16 is not a multiple of the Q8_0 block size 32");
}

TEST(GgufMalformedTest, UnknownTensorType) {
  std::string b = SmallGguf();
  Patch<uint32_t>(b, TensorInfoAt(b, "t1", 2).type, 99);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "tensor info #1: tensor 't1': unknown tensor type id 99");
}

TEST(GgufMalformedTest, OffsetsMisalignedPastTheEndOrOverlapping) {
  std::string b = SmallGguf();
  Patch<uint64_t>(b, TensorInfoAt(b, "t1", 2).offset, 65);
  EXPECT_STATUS_IS(Parse(b), kInvalid,
                   "tensor 't1': data offset 65 is not a multiple of the alignment 32");
  b = SmallGguf();
  Patch<uint64_t>(b, TensorInfoAt(b, "t1", 2).offset, uint64_t{1} << 50);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "tensor 't1': data [1125899906842624,");
  b = SmallGguf();
  Patch<uint64_t>(b, TensorInfoAt(b, "t1", 2).offset, 0xFFFFFFFFFFFFFFE0ull);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "extends past the end of the file");
  b = SmallGguf();
  Patch<uint64_t>(b, TensorInfoAt(b, "t1", 2).offset, 0);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "tensors 't0' and 't1' overlap");
}

TEST(GgufMalformedTest, BadAlignment) {
  GgufWriter w;
  w.Set("general.alignment", GgufValue::Uint32(24));
  EXPECT_STATUS_IS(Parse(w.Serialize()), kInvalid,
                   "general.alignment must be a nonzero power of two, got 24");
  GgufWriter w2;
  w2.Set("general.alignment", GgufValue::Uint64(32));
  EXPECT_STATUS_IS(Parse(w2.Serialize()), kInvalid, "has type UINT64, expected UINT32");
}

TEST(GgufMalformedTest, DuplicateTensorName) {
  std::string b = SmallGguf();
  b.replace(OffsetAfter(b, "t1") - 2, 2, "t0");
  EXPECT_STATUS_IS(Parse(b), kInvalid, "duplicate tensor name 't0'");
}

TEST(GgufMalformedTest, DeeplyNestedArrays) {
  GgufValue v = GgufValue::StringArray({"x"});
  for (int i = 0; i < 9; ++i) v = GgufValue::ArrayOfArrays({v});
  GgufWriter w;
  w.Set("deep", v);
  EXPECT_STATUS_IS(Parse(w.Serialize()), kInvalid, "arrays nested deeper than 8 levels");
}

// Property: random corruption never crashes or reads out of bounds (run under ASan); whatever
// parses can be fully read or fails with a status.
TEST(GgufMalformedTest, RandomCorruptionFailsCleanly) {
  const std::string good = SmallGguf();
  std::mt19937 rng(1234);
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string b = good;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] = static_cast<char>(rng());
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(b, "fuzz");
    if (!file.ok()) {
      EXPECT_TRUE(absl::StartsWith(file.status().message(), "fuzz: ")) << file.status();
      continue;
    }
    ++parsed;
    for (const GgufTensorInfo& t : (*file)->tensors()) {
      const absl::StatusOr<Tensor> tensor = (*file)->ReadTensor(t.name);
      if (tensor.ok()) {
        EXPECT_EQ(tensor->numel(), t.numel);
      }
    }
  }
  EXPECT_GT(parsed, 0);  // some flips land in tensor data and stay valid
}

}  // namespace
}  // namespace tandem
