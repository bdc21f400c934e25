// A GGUF metadata value: a scalar of one of the GGUF value types, a string, or an array
// (of scalars, strings or arrays).
//
// Values keep their exact wire type, so a file read and written back is identical. Numeric
// scalars and numeric arrays are stored as their little-endian wire bytes; typed accessors
// convert on access and fail with InvalidArgument ("has type X, expected Y") on a type
// mismatch. Immutable after construction; safe to share between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

inline constexpr uint32_t kGgufValueTypeCount = 13;

absl::string_view GgufValueTypeName(GgufValueType type);

// Bytes of one scalar of `type` on the wire; 0 for kString and kArray.
int GgufScalarBytes(GgufValueType type);

class GgufValue {
 public:
  static GgufValue Uint8(uint8_t v);
  static GgufValue Int8(int8_t v);
  static GgufValue Uint16(uint16_t v);
  static GgufValue Int16(int16_t v);
  static GgufValue Uint32(uint32_t v);
  static GgufValue Int32(int32_t v);
  static GgufValue Uint64(uint64_t v);
  static GgufValue Int64(int64_t v);
  static GgufValue Float32(float v);
  static GgufValue Float64(double v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  static GgufValue StringArray(std::vector<std::string> v);
  static GgufValue Int32Array(absl::Span<const int32_t> v);
  static GgufValue Uint32Array(absl::Span<const uint32_t> v);
  static GgufValue Float32Array(absl::Span<const float> v);
  // REQUIRES: every element is an array.
  static GgufValue ArrayOfArrays(std::vector<GgufValue> v);

  // Wire-level constructors used by the parser. `bits` holds the scalar's little-endian bytes
  // zero-extended; `raw` holds count · GgufScalarBytes(element_type) bytes.
  static GgufValue ScalarFromWire(GgufValueType type, uint64_t bits);
  static GgufValue NumericArrayFromWire(GgufValueType element_type, uint64_t count,
                                        std::string raw);

  GgufValueType type() const { return type_; }
  // Element type of an array (meaningless for non-arrays).
  GgufValueType element_type() const { return element_type_; }
  // Number of elements of an array; 1 for a scalar or string.
  uint64_t size() const { return type_ == GgufValueType::kArray ? count_ : 1; }

  // Any integer scalar (not bool). Uint64 values above INT64_MAX are rejected.
  absl::StatusOr<int64_t> AsInt() const;
  // kFloat32 or kFloat64.
  absl::StatusOr<double> AsFloat() const;
  absl::StatusOr<bool> AsBool() const;
  absl::StatusOr<absl::string_view> AsString() const;
  // Arrays of any integer element type.
  absl::StatusOr<std::vector<int64_t>> AsIntArray() const;
  // Arrays of kFloat32 or kFloat64 elements.
  absl::StatusOr<std::vector<float>> AsFloatArray() const;
  absl::StatusOr<absl::Span<const std::string>> AsStringArray() const;

  // Wire-level accessors used by the writer.
  uint64_t scalar_bits() const { return bits_; }
  const std::string& raw() const { return bytes_; }  // string bytes, or numeric array bytes
  const std::vector<std::string>& strings() const { return strings_; }
  const std::vector<GgufValue>& arrays() const { return arrays_; }

  // Short human-readable rendering (arrays abbreviated), for logs and error messages.
  std::string DebugString() const;

  friend bool operator==(const GgufValue& a, const GgufValue& b) = default;

 private:
  GgufValue() = default;
  static GgufValue Scalar(GgufValueType type, const void* data);
  absl::Status WrongType(absl::string_view expected) const;

  GgufValueType type_ = GgufValueType::kUint8;
  GgufValueType element_type_ = GgufValueType::kUint8;
  uint64_t bits_ = 0;
  uint64_t count_ = 0;
  std::string bytes_;
  std::vector<std::string> strings_;
  std::vector<GgufValue> arrays_;
};

}  // namespace tandem
