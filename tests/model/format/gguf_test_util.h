// Helpers for GGUF tests: a small valid image and byte patching for broken variants.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/format/gguf_file.h"
#include "model/format/gguf_writer.h"

namespace tandem::testing {

// Metadata: "a.u32" = 7 (UINT32), "a.str" = "hello", "a.arr" = [1, 2, 3] (INT32 array),
// "a.flag" = true. Tensors: "t0" {2, 32} F32 (values i/8), "t1" {4, 32} Q8_0.
inline std::string SmallGguf(uint32_t version = 3) {
  GgufWriter w(version);
  w.Set("a.u32", GgufValue::Uint32(7));
  w.Set("a.str", GgufValue::String("hello"));
  const int32_t arr[] = {1, 2, 3};
  w.Set("a.arr", GgufValue::Int32Array(arr));
  w.Set("a.flag", GgufValue::Bool(true));
  std::vector<float> t0(64), t1(128);
  for (size_t i = 0; i < t0.size(); ++i) t0[i] = static_cast<float>(i) / 8.f;
  for (size_t i = 0; i < t1.size(); ++i) t1[i] = static_cast<float>(i % 7) - 3.f;
  EXPECT_TRUE(w.AddF32Tensor("t0", {2, 32}, t0, GgmlType::kF32).ok());
  EXPECT_TRUE(w.AddF32Tensor("t1", {4, 32}, t1, GgmlType::kQ8_0).ok());
  return w.Serialize();
}

// Offset just past the first occurrence of `needle` (a key or tensor name's bytes).
inline size_t OffsetAfter(const std::string& bytes, const std::string& needle) {
  const size_t at = bytes.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  return at == std::string::npos ? 0 : at + needle.size();
}

template <typename T>
void Patch(std::string& bytes, size_t offset, T value) {
  ASSERT_LE(offset + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// Field offsets inside a tensor info that starts right after its name.
struct TensorInfoFields {
  size_t n_dims, dims, type, offset;
};
inline TensorInfoFields TensorInfoAt(const std::string& bytes, const std::string& name,
                                     uint32_t n_dims) {
  const size_t base = OffsetAfter(bytes, name);
  return {base, base + 4, base + 4 + 8 * n_dims, base + 8 + 8 * n_dims};
}

}  // namespace tandem::testing

namespace tandem::testing {

// Copies a GGUF image through a writer, letting the test drop or change metadata and tensors.
// edit_key(key, value) returns false to drop the entry; edit_tensor(name, shape, type, bytes)
// likewise for tensors.
template <typename EditKey, typename EditTensor>
std::string EditGguf(const std::string& bytes, EditKey edit_key, EditTensor edit_tensor) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(bytes, "edit");
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return "";
  GgufWriter w((*f)->version());
  for (const auto& [key, value] : (*f)->metadata()) {
    GgufValue v = value;
    if (edit_key(key, v)) w.Set(key, std::move(v));
  }
  for (const GgufTensorInfo& t : (*f)->tensors()) {
    const absl::Span<const uint8_t> data = (*f)->TensorData(t);
    std::vector<int64_t> shape = t.Shape();
    GgmlType type = t.type;
    std::string raw(reinterpret_cast<const char*>(data.data()), data.size());
    if (!edit_tensor(t.name, shape, type, raw)) continue;
    const absl::Status s = w.AddTensor(t.name, shape, type, raw);
    EXPECT_TRUE(s.ok()) << s;
  }
  return w.Serialize();
}

inline bool KeepKey(const std::string&, GgufValue&) { return true; }
inline bool KeepTensor(const std::string&, std::vector<int64_t>&, GgmlType&, std::string&) {
  return true;
}

}  // namespace tandem::testing
