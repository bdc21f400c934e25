#include "model/format/gguf_parse.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/format/byte_reader.h"

namespace tandem {
namespace {

// Nested arrays deeper than this are rejected (no real file nests at all; the bound keeps a
// hostile file from recursing the stack away).
constexpr int kMaxArrayDepth = 8;

// Smallest possible encodings, used to reject counts the remaining bytes cannot hold.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset

absl::Status WithContext(const absl::Status& s, absl::string_view context) {
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

absl::StatusOr<GgufValueType> ReadValueType(ByteReader& r, absl::string_view what) {
  TANDEM_ASSIGN_OR_RETURN(const uint32_t raw, r.Read<uint32_t>(what));
  if (raw >= kGgufValueTypeCount) {
    return absl::InvalidArgumentError(absl::StrCat("unknown value type ", raw));
  }
  return static_cast<GgufValueType>(raw);
}

absl::StatusOr<GgufValue> ReadValue(ByteReader& r, GgufValueType type, int depth);

absl::StatusOr<GgufValue> ReadArray(ByteReader& r, int depth) {
  if (depth >= kMaxArrayDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("arrays nested deeper than ", kMaxArrayDepth, " levels"));
  }
  TANDEM_ASSIGN_OR_RETURN(const GgufValueType elem, ReadValueType(r, "array element type"));
  const uint64_t at = r.offset();
  TANDEM_ASSIGN_OR_RETURN(const uint64_t count, r.Read<uint64_t>("array length"));
  const uint64_t min_elem = elem == GgufValueType::kString  ? 8
                            : elem == GgufValueType::kArray ? 12
                                                            : GgufScalarBytes(elem);
  if (count > r.remaining() / min_elem) {
    return absl::InvalidArgumentError(
        absl::StrCat("array length ", count, " of ", GgufValueTypeName(elem), " at offset ", at,
                     " cannot fit in the ", r.remaining(), " bytes left in the file"));
  }
  if (elem == GgufValueType::kString) {
    std::vector<std::string> strings;
    strings.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      TANDEM_ASSIGN_OR_RETURN(std::string s, r.ReadString("array string"));
      strings.push_back(std::move(s));
    }
    return GgufValue::StringArray(std::move(strings));
  }
  if (elem == GgufValueType::kArray) {
    std::vector<GgufValue> arrays;
    arrays.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      TANDEM_ASSIGN_OR_RETURN(const GgufValueType inner, ReadValueType(r, "nested array type"));
      if (inner != GgufValueType::kArray) {
        return absl::InvalidArgumentError("nested array element is not an array");
      }
      TANDEM_ASSIGN_OR_RETURN(GgufValue v, ReadArray(r, depth + 1));
      arrays.push_back(std::move(v));
    }
    return GgufValue::ArrayOfArrays(std::move(arrays));
  }
  TANDEM_ASSIGN_OR_RETURN(absl::Span<const uint8_t> raw, r.Take(count * min_elem, "array data"));
  return GgufValue::NumericArrayFromWire(
      elem, count, std::string(reinterpret_cast<const char*>(raw.data()), raw.size()));
}

absl::StatusOr<GgufValue> ReadValue(ByteReader& r, GgufValueType type, int depth) {
  if (type == GgufValueType::kString) {
    TANDEM_ASSIGN_OR_RETURN(std::string s, r.ReadString("string value"));
    return GgufValue::String(std::move(s));
  }
  if (type == GgufValueType::kArray) return ReadArray(r, depth);
  TANDEM_ASSIGN_OR_RETURN(absl::Span<const uint8_t> raw,
                          r.Take(GgufScalarBytes(type), "scalar value"));
  uint64_t bits = 0;
  std::memcpy(&bits, raw.data(), raw.size());
  if (type == GgufValueType::kBool && bits > 1) {
    return absl::InvalidArgumentError(absl::StrCat("bool value ", bits, " is neither 0 nor 1"));
  }
  return GgufValue::ScalarFromWire(type, bits);
}

absl::Status ReadHeader(ByteReader& r, GgufContents& out, uint64_t& tensor_count,
                        uint64_t& kv_count) {
  TANDEM_ASSIGN_OR_RETURN(const uint32_t magic, r.Read<uint32_t>("GGUF magic"));
  if (magic != kGgufMagic) {
    return absl::InvalidArgumentError(absl::StrCat("not a GGUF file: bad magic 0x",
                                                   absl::Hex(magic, absl::kZeroPad8),
                                                   " (expected \"GGUF\")"));
  }
  TANDEM_ASSIGN_OR_RETURN(out.version, r.Read<uint32_t>("GGUF version"));
  if (out.version != 2 && out.version != 3) {
    return absl::UnimplementedError(absl::StrCat("unsupported GGUF version ", out.version,
                                                 " (supported: 2, 3; big-endian files are not "
                                                 "supported)"));
  }
  TANDEM_ASSIGN_OR_RETURN(tensor_count, r.Read<uint64_t>("tensor count"));
  TANDEM_ASSIGN_OR_RETURN(kv_count, r.Read<uint64_t>("metadata count"));
  if (kv_count > r.remaining() / kMinKvBytes) {
    return absl::InvalidArgumentError(absl::StrCat("metadata count ", kv_count,
                                                   " is impossible: only ", r.remaining(),
                                                   " bytes follow the header"));
  }
  return absl::OkStatus();
}

absl::Status ReadMetadata(ByteReader& r, uint64_t kv_count, GgufContents& out) {
  absl::flat_hash_set<std::string> seen;
  out.metadata.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string where = absl::StrCat("metadata entry #", i);
    absl::StatusOr<std::string> key = r.ReadString("metadata key");
    if (!key.ok()) return WithContext(key.status(), where);
    const std::string context = absl::StrCat(where, " ('", *key, "')");
    absl::StatusOr<GgufValueType> type = ReadValueType(r, "metadata value type");
    if (!type.ok()) return WithContext(type.status(), context);
    absl::StatusOr<GgufValue> value = ReadValue(r, *type, 0);
    if (!value.ok()) return WithContext(value.status(), context);
    if (!seen.insert(*key).second) {
      return absl::InvalidArgumentError(absl::StrCat(context, ": duplicate metadata key"));
    }
    out.metadata.emplace_back(std::move(*key), std::move(*value));
  }
  for (const auto& [key, value] : out.metadata) {
    if (key != "general.alignment") continue;
    if (value.type() != GgufValueType::kUint32) {
      return absl::InvalidArgumentError(absl::StrCat("general.alignment ", value.DebugString(),
                                                     " has type ", GgufValueTypeName(value.type()),
                                                     ", expected UINT32"));
    }
    out.alignment = value.scalar_bits();
    if (out.alignment == 0 || (out.alignment & (out.alignment - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("general.alignment must be a nonzero power of two, got ", out.alignment));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GgufTensorInfo> ReadTensorInfo(ByteReader& r) {
  GgufTensorInfo t;
  TANDEM_ASSIGN_OR_RETURN(t.name, r.ReadString("tensor name"));
  auto fail = [&t](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': ", parts...));
  };
  absl::StatusOr<uint32_t> n_dims = r.Read<uint32_t>("tensor dimension count");
  if (!n_dims.ok()) return WithContext(n_dims.status(), absl::StrCat("tensor '", t.name, "'"));
  if (*n_dims == 0 || *n_dims > kGgufMaxDims) {
    return fail(*n_dims, " dimensions (GGUF allows 1..", kGgufMaxDims, ")");
  }
  t.numel = 1;
  for (uint32_t d = 0; d < *n_dims; ++d) {
    absl::StatusOr<uint64_t> dim = r.Read<uint64_t>("tensor dimension");
    if (!dim.ok()) return WithContext(dim.status(), absl::StrCat("tensor '", t.name, "'"));
    if (*dim == 0 || *dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return fail("dimension ", d, " is ", *dim, " (must be positive)");
    }
    if (static_cast<int64_t>(*dim) > std::numeric_limits<int64_t>::max() / t.numel) {
      return fail("element count overflows int64");
    }
    t.numel *= static_cast<int64_t>(*dim);
    t.dims.push_back(static_cast<int64_t>(*dim));
  }
  absl::StatusOr<uint32_t> type = r.Read<uint32_t>("tensor type");
  if (!type.ok()) return WithContext(type.status(), absl::StrCat("tensor '", t.name, "'"));
  const GgmlTypeInfo* info = FindGgmlType(*type);
  if (info == nullptr) return fail("unknown tensor type id ", *type);
  t.type = info->type;
  if (t.dims[0] % info->block_size != 0) {
    return fail("row length ", t.dims[0], " is not a multiple of the ", info->name, " block size ",
                info->block_size);
  }
  absl::StatusOr<int64_t> nbytes = GgmlByteSize(t.type, t.numel);
  if (!nbytes.ok()) return fail(nbytes.status().message());
  t.nbytes = static_cast<uint64_t>(*nbytes);
  absl::StatusOr<uint64_t> offset = r.Read<uint64_t>("tensor data offset");
  if (!offset.ok()) return WithContext(offset.status(), absl::StrCat("tensor '", t.name, "'"));
  t.offset = *offset;
  return t;
}

absl::Status CheckTensorExtents(GgufContents& out, uint64_t file_size) {
  for (const GgufTensorInfo& t : out.tensors) {
    if (t.offset % out.alignment != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "': data offset ", t.offset,
                       " is not a multiple of the alignment ", out.alignment));
    }
    const uint64_t available = file_size > out.data_offset ? file_size - out.data_offset : 0;
    if (t.offset > available || t.nbytes > available - t.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "': data [", t.offset, ", ", t.offset + t.nbytes,
                       ") of the data section at file offset ", out.data_offset,
                       " extends past the end of the file (", file_size, " bytes)"));
    }
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : out.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (a.offset + a.nbytes > b.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors '", a.name, "' and '", b.name, "' overlap in the data section"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GgufContents> ParseGguf(absl::Span<const uint8_t> file) {
  ByteReader r(file);
  GgufContents out;
  uint64_t tensor_count = 0, kv_count = 0;
  TANDEM_RETURN_IF_ERROR(ReadHeader(r, out, tensor_count, kv_count));
  TANDEM_RETURN_IF_ERROR(ReadMetadata(r, kv_count, out));
  if (tensor_count > r.remaining() / kMinTensorInfoBytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor count ", tensor_count,
                                                   " is impossible: only ", r.remaining(),
                                                   " bytes follow the metadata"));
  }
  absl::flat_hash_set<std::string> names;
  out.tensors.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    absl::StatusOr<GgufTensorInfo> t = ReadTensorInfo(r);
    if (!t.ok()) return WithContext(t.status(), absl::StrCat("tensor info #", i));
    if (!names.insert(t->name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", t->name, "'"));
    }
    out.tensors.push_back(std::move(*t));
  }
  out.data_offset = (r.offset() + out.alignment - 1) / out.alignment * out.alignment;
  TANDEM_RETURN_IF_ERROR(CheckTensorExtents(out, r.size()));
  return out;
}

}  // namespace tandem
