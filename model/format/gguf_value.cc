#include "model/format/gguf_value.h"

#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem {
namespace {

bool IsInteger(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Reads one integer of type t (REQUIRES IsInteger(t)); false when a uint64 exceeds INT64_MAX.
bool LoadInt(GgufValueType t, const char* p, int64_t* out) {
  switch (t) {
    case GgufValueType::kUint8:
      *out = Load<uint8_t>(p);
      return true;
    case GgufValueType::kInt8:
      *out = Load<int8_t>(p);
      return true;
    case GgufValueType::kUint16:
      *out = Load<uint16_t>(p);
      return true;
    case GgufValueType::kInt16:
      *out = Load<int16_t>(p);
      return true;
    case GgufValueType::kUint32:
      *out = Load<uint32_t>(p);
      return true;
    case GgufValueType::kInt32:
      *out = Load<int32_t>(p);
      return true;
    case GgufValueType::kInt64:
      *out = Load<int64_t>(p);
      return true;
    case GgufValueType::kUint64: {
      const uint64_t v = Load<uint64_t>(p);
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      *out = static_cast<int64_t>(v);
      return true;
    }
    default:
      return false;
  }
}

std::string ScalarString(GgufValueType t, const char* p) {
  int64_t i;
  switch (t) {
    case GgufValueType::kFloat32:
      return absl::StrCat(Load<float>(p));
    case GgufValueType::kFloat64:
      return absl::StrCat(Load<double>(p));
    case GgufValueType::kBool:
      return *p ? "true" : "false";
    case GgufValueType::kUint64:
      return absl::StrCat(Load<uint64_t>(p));
    default:
      return LoadInt(t, p, &i) ? absl::StrCat(i) : "?";
  }
}

}  // namespace

absl::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "UINT8";
    case GgufValueType::kInt8:
      return "INT8";
    case GgufValueType::kUint16:
      return "UINT16";
    case GgufValueType::kInt16:
      return "INT16";
    case GgufValueType::kUint32:
      return "UINT32";
    case GgufValueType::kInt32:
      return "INT32";
    case GgufValueType::kFloat32:
      return "FLOAT32";
    case GgufValueType::kBool:
      return "BOOL";
    case GgufValueType::kString:
      return "STRING";
    case GgufValueType::kArray:
      return "ARRAY";
    case GgufValueType::kUint64:
      return "UINT64";
    case GgufValueType::kInt64:
      return "INT64";
    case GgufValueType::kFloat64:
      return "FLOAT64";
  }
  return "UNKNOWN";
}

int GgufScalarBytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

GgufValue GgufValue::Scalar(GgufValueType type, const void* data) {
  GgufValue v;
  v.type_ = type;
  std::memcpy(&v.bits_, data, static_cast<size_t>(GgufScalarBytes(type)));
  return v;
}

GgufValue GgufValue::Uint8(uint8_t x) { return Scalar(GgufValueType::kUint8, &x); }
GgufValue GgufValue::Int8(int8_t x) { return Scalar(GgufValueType::kInt8, &x); }
GgufValue GgufValue::Uint16(uint16_t x) { return Scalar(GgufValueType::kUint16, &x); }
GgufValue GgufValue::Int16(int16_t x) { return Scalar(GgufValueType::kInt16, &x); }
GgufValue GgufValue::Uint32(uint32_t x) { return Scalar(GgufValueType::kUint32, &x); }
GgufValue GgufValue::Int32(int32_t x) { return Scalar(GgufValueType::kInt32, &x); }
GgufValue GgufValue::Uint64(uint64_t x) { return Scalar(GgufValueType::kUint64, &x); }
GgufValue GgufValue::Int64(int64_t x) { return Scalar(GgufValueType::kInt64, &x); }
GgufValue GgufValue::Float32(float x) { return Scalar(GgufValueType::kFloat32, &x); }
GgufValue GgufValue::Float64(double x) { return Scalar(GgufValueType::kFloat64, &x); }
GgufValue GgufValue::Bool(bool x) {
  const uint8_t b = x ? 1 : 0;
  return Scalar(GgufValueType::kBool, &b);
}

GgufValue GgufValue::String(std::string x) {
  GgufValue v;
  v.type_ = GgufValueType::kString;
  v.bytes_ = std::move(x);
  return v;
}

GgufValue GgufValue::StringArray(std::vector<std::string> x) {
  GgufValue v;
  v.type_ = GgufValueType::kArray;
  v.element_type_ = GgufValueType::kString;
  v.count_ = x.size();
  v.strings_ = std::move(x);
  return v;
}

GgufValue GgufValue::NumericArrayFromWire(GgufValueType element_type, uint64_t count,
                                          std::string raw) {
  GgufValue v;
  v.type_ = GgufValueType::kArray;
  v.element_type_ = element_type;
  v.count_ = count;
  v.bytes_ = std::move(raw);
  return v;
}

GgufValue GgufValue::Int32Array(absl::Span<const int32_t> x) {
  return NumericArrayFromWire(GgufValueType::kInt32, x.size(),
                              std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
}

GgufValue GgufValue::Uint32Array(absl::Span<const uint32_t> x) {
  return NumericArrayFromWire(GgufValueType::kUint32, x.size(),
                              std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
}

GgufValue GgufValue::Float32Array(absl::Span<const float> x) {
  return NumericArrayFromWire(GgufValueType::kFloat32, x.size(),
                              std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
}

GgufValue GgufValue::ArrayOfArrays(std::vector<GgufValue> x) {
  GgufValue v;
  v.type_ = GgufValueType::kArray;
  v.element_type_ = GgufValueType::kArray;
  v.count_ = x.size();
  v.arrays_ = std::move(x);
  return v;
}

GgufValue GgufValue::ScalarFromWire(GgufValueType type, uint64_t bits) {
  GgufValue v;
  v.type_ = type;
  v.bits_ = bits;
  return v;
}

absl::Status GgufValue::WrongType(absl::string_view expected) const {
  std::string actual(GgufValueTypeName(type_));
  if (type_ == GgufValueType::kArray) {
    absl::StrAppend(&actual, " of ", GgufValueTypeName(element_type_));
  }
  return absl::InvalidArgumentError(absl::StrCat("has type ", actual, ", expected ", expected));
}

absl::StatusOr<int64_t> GgufValue::AsInt() const {
  if (!IsInteger(type_)) return WrongType("an integer");
  int64_t v;
  if (!LoadInt(type_, reinterpret_cast<const char*>(&bits_), &v)) {
    return absl::OutOfRangeError(absl::StrCat("value ", bits_, " does not fit in int64"));
  }
  return v;
}

absl::StatusOr<double> GgufValue::AsFloat() const {
  if (type_ == GgufValueType::kFloat32) return Load<float>(reinterpret_cast<const char*>(&bits_));
  if (type_ == GgufValueType::kFloat64) return Load<double>(reinterpret_cast<const char*>(&bits_));
  return WrongType("FLOAT32 or FLOAT64");
}

absl::StatusOr<bool> GgufValue::AsBool() const {
  if (type_ != GgufValueType::kBool) return WrongType("BOOL");
  return bits_ != 0;
}

absl::StatusOr<absl::string_view> GgufValue::AsString() const {
  if (type_ != GgufValueType::kString) return WrongType("STRING");
  return absl::string_view(bytes_);
}

absl::StatusOr<std::vector<int64_t>> GgufValue::AsIntArray() const {
  if (type_ != GgufValueType::kArray || !IsInteger(element_type_)) {
    return WrongType("ARRAY of integers");
  }
  const int width = GgufScalarBytes(element_type_);
  std::vector<int64_t> out(count_);
  for (uint64_t i = 0; i < count_; ++i) {
    if (!LoadInt(element_type_, bytes_.data() + i * width, &out[i])) {
      return absl::OutOfRangeError(absl::StrCat("array element ", i, " does not fit in int64"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<float>> GgufValue::AsFloatArray() const {
  if (type_ != GgufValueType::kArray ||
      (element_type_ != GgufValueType::kFloat32 && element_type_ != GgufValueType::kFloat64)) {
    return WrongType("ARRAY of FLOAT32 or FLOAT64");
  }
  std::vector<float> out(count_);
  for (uint64_t i = 0; i < count_; ++i) {
    out[i] = element_type_ == GgufValueType::kFloat32
                 ? Load<float>(bytes_.data() + 4 * i)
                 : static_cast<float>(Load<double>(bytes_.data() + 8 * i));
  }
  return out;
}

absl::StatusOr<absl::Span<const std::string>> GgufValue::AsStringArray() const {
  if (type_ != GgufValueType::kArray || element_type_ != GgufValueType::kString) {
    return WrongType("ARRAY of STRING");
  }
  return absl::MakeConstSpan(strings_);
}

std::string GgufValue::DebugString() const {
  constexpr uint64_t kShown = 4;
  switch (type_) {
    case GgufValueType::kString:
      return absl::StrCat("\"", bytes_.substr(0, 80), bytes_.size() > 80 ? "...\"" : "\"");
    case GgufValueType::kArray: {
      std::vector<std::string> parts;
      for (uint64_t i = 0; i < count_ && i < kShown; ++i) {
        if (element_type_ == GgufValueType::kString) {
          parts.push_back(absl::StrCat("\"", strings_[i], "\""));
        } else if (element_type_ == GgufValueType::kArray) {
          parts.push_back(arrays_[i].DebugString());
        } else {
          parts.push_back(
              ScalarString(element_type_, bytes_.data() + i * GgufScalarBytes(element_type_)));
        }
      }
      if (count_ > kShown) parts.push_back(absl::StrCat("... (", count_, " elements)"));
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
    default:
      return ScalarString(type_, reinterpret_cast<const char*>(&bits_));
  }
}

}  // namespace tandem
