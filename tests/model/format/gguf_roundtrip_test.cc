#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/format/gguf_file.h"
#include "model/format/gguf_writer.h"
#include "model/tools/synthetic_model.h"
#include "tests/model/format/gguf_test_util.h"
#include "tests/model/format/safetensors_test_util.h"
#include "tests/model/format/status_matchers.h"

namespace tandem {
namespace {

using ::tandem::testing::SmallGguf;

// Rewrites a parsed file through a fresh writer (raw tensor bytes, every metadata value as
// read): identical bytes prove reading lost nothing.
std::string Rewrite(const GgufFile& f) {
  GgufWriter w(f.version(), static_cast<uint32_t>(f.contents().alignment));
  for (const auto& [key, value] : f.metadata()) w.Set(key, value);
  for (const GgufTensorInfo& t : f.tensors()) {
    const absl::Span<const uint8_t> data = f.TensorData(t);
    EXPECT_TRUE(w.AddTensor(t.name, t.Shape(), t.type,
                            std::string(reinterpret_cast<const char*>(data.data()), data.size()))
                    .ok());
  }
  return w.Serialize();
}

TEST(GgufRoundTripTest, SyntheticModelRewritesToIdenticalBytes) {
  for (const GgmlType dtype : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0}) {
    SyntheticModelOptions o;
    o.dtype = dtype;
    absl::StatusOr<GgufWriter> w = BuildSyntheticModel(o);
    ASSERT_OK(w);
    const std::string bytes = w->Serialize();
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(bytes, "synthetic");
    ASSERT_OK(f);
    EXPECT_EQ(Rewrite(**f), bytes);
    EXPECT_EQ((*f)->tensors().size(), 3u + 2u * 9u);  // embd, norm, output + 9 per layer
  }
}

TEST(GgufRoundTripTest, F32TensorsReadBackExactly) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(SmallGguf(), "small");
  ASSERT_OK(f);
  absl::StatusOr<Tensor> t0 = (*f)->ReadTensor("t0");
  ASSERT_OK(t0);
  EXPECT_EQ(t0->shape, (std::vector<int64_t>{2, 32}));
  for (size_t i = 0; i < t0->data.size(); ++i) EXPECT_EQ(t0->data[i], static_cast<float>(i) / 8.f);
  absl::StatusOr<Tensor> t1 = (*f)->ReadTensor("t1");
  ASSERT_OK(t1);
  // Integers in [-3, 3] with block max 3: d = 3/127 in F16, so values come back within d/2.
  for (size_t i = 0; i < t1->data.size(); ++i) {
    EXPECT_NEAR(t1->data[i], static_cast<float>(i % 7) - 3.f, 0.012f) << i;
  }
  const GgufTensorInfo* info = (*f)->FindTensor("t1");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->dims, (std::vector<int64_t>{32, 4}));  // GGUF order: ne0 first
  EXPECT_EQ(info->nbytes, 4u * 34u);
  EXPECT_EQ(((*f)->contents().data_offset + info->offset) % 32, 0u);
  EXPECT_STATUS_IS((*f)->ReadTensor("nope"), absl::StatusCode::kNotFound, "missing tensor 'nope'");
}

TEST(GgufRoundTripTest, EveryValueTypeSurvivesAndTypedGettersCheckTypes) {
  GgufWriter w(2, 64);
  w.Set("u8", GgufValue::Uint8(250));
  w.Set("i8", GgufValue::Int8(-5));
  w.Set("u16", GgufValue::Uint16(60000));
  w.Set("i16", GgufValue::Int16(-30000));
  w.Set("u32", GgufValue::Uint32(4000000000u));
  w.Set("i32", GgufValue::Int32(-2000000000));
  w.Set("u64", GgufValue::Uint64(1ull << 40));
  w.Set("i64", GgufValue::Int64(-(1ll << 40)));
  w.Set("f32", GgufValue::Float32(0.25f));
  w.Set("f64", GgufValue::Float64(-1.5));
  w.Set("bool", GgufValue::Bool(false));
  w.Set("str", GgufValue::String("héllo"));
  w.Set("strs", GgufValue::StringArray({"a", "", "ccc"}));
  const float floats[] = {1.f, -2.f};
  w.Set("floats", GgufValue::Float32Array(floats));
  const uint32_t u32s[] = {7, 8};
  w.Set("nested",
        GgufValue::ArrayOfArrays({GgufValue::Uint32Array(u32s), GgufValue::StringArray({"x"})}));
  const std::string bytes = w.Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(bytes, "types");
  ASSERT_OK(f);
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 2u);
  EXPECT_EQ(g.contents().alignment, 64u);
  EXPECT_EQ(Rewrite(g), bytes);
  EXPECT_EQ(*g.GetInt("u8"), 250);
  EXPECT_EQ(*g.GetInt("i8"), -5);
  EXPECT_EQ(*g.GetInt("u16"), 60000);
  EXPECT_EQ(*g.GetInt("i16"), -30000);
  EXPECT_EQ(*g.GetInt("u32"), 4000000000ll);
  EXPECT_EQ(*g.GetInt("i32"), -2000000000);
  EXPECT_EQ(*g.GetInt("u64"), 1ll << 40);
  EXPECT_EQ(*g.GetInt("i64"), -(1ll << 40));
  EXPECT_EQ(*g.GetFloat("f32"), 0.25);
  EXPECT_EQ(*g.GetFloat("f64"), -1.5);
  EXPECT_EQ(*g.GetBool("bool"), false);
  EXPECT_EQ(*g.GetString("str"), "héllo");
  EXPECT_EQ(
      std::vector<std::string>(g.GetStringArray("strs")->begin(), g.GetStringArray("strs")->end()),
      (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(*g.GetFloatArray("floats"), (std::vector<float>{1.f, -2.f}));
  ASSERT_EQ(g.Find("nested")->arrays().size(), 2u);
  EXPECT_EQ(*g.Find("nested")->arrays()[0].AsIntArray(), (std::vector<int64_t>{7, 8}));
  EXPECT_STATUS_IS(g.GetInt("missing"), absl::StatusCode::kNotFound,
                   "missing metadata key 'missing'");
  EXPECT_STATUS_IS(g.GetString("u32"), absl::StatusCode::kInvalidArgument,
                   "metadata key 'u32' has type UINT32, expected STRING");
  EXPECT_STATUS_IS(g.GetInt("f32"), absl::StatusCode::kInvalidArgument,
                   "metadata key 'f32' has type FLOAT32, expected an integer");
  EXPECT_STATUS_IS(g.GetStringArray("floats"), absl::StatusCode::kInvalidArgument,
                   "has type ARRAY of FLOAT32, expected ARRAY of STRING");
}

TEST(GgufRoundTripTest, WriteFileIsReadableThroughTheMapping) {
  const ::tandem::testing::ScopedTempDir tmp("roundtrip");
  const std::string path = tmp.path() + "/model.gguf";
  SyntheticModelOptions o;
  o.seed = 9;
  ASSERT_OK(WriteSyntheticModel(o, path));
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  ASSERT_OK(f);
  EXPECT_EQ(*(*f)->GetInt("tandem.synthetic.seed"), 9);
  absl::StatusOr<GgufWriter> w = BuildSyntheticModel(o);
  ASSERT_OK(w);
  EXPECT_EQ(Rewrite(**f), w->Serialize());
  EXPECT_STATUS_IS(GgufFile::Open(path + ".absent"), absl::StatusCode::kNotFound, ".absent");
  EXPECT_STATUS_IS(GgufFile::Open(::testing::TempDir()), absl::StatusCode::kInvalidArgument,
                   "is not a regular file");
}

}  // namespace
}  // namespace tandem
