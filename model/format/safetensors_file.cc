#include "model/format/safetensors_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/format/ggml_types.h"
#include "model/format/json_value.h"
#include "model/format/parallel_dequant.h"

namespace tandem {
namespace {

// The safetensors format itself caps the header at 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

int64_t DtypeBytes(absl::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2") {
    return 1;
  }
  return 0;
}

absl::StatusOr<SafetensorsTensor> ParseEntry(const std::string& name, const nlohmann::json& v,
                                             uint64_t data_size) {
  const std::string what = absl::StrCat("tensor '", name, "'");
  if (!v.is_object()) {
    return absl::InvalidArgumentError(what + " is not a JSON object");
  }
  const nlohmann::json& s = v;
  SafetensorsTensor t;
  t.name = name;
  const nlohmann::json* dtype = FindField(s, "dtype");
  const nlohmann::json* shape = FindField(s, "shape");
  const nlohmann::json* offsets = FindField(s, "data_offsets");
  if (dtype == nullptr || shape == nullptr || offsets == nullptr) {
    return absl::InvalidArgumentError(what + " lacks dtype, shape or data_offsets");
  }
  TANDEM_ASSIGN_OR_RETURN(t.dtype, JsonString(*dtype, what + " dtype"));
  const int64_t elem = DtypeBytes(t.dtype);
  if (elem == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has unknown dtype '", t.dtype, "'"));
  }
  if (!shape->is_array() || !offsets->is_array() || offsets->size() != 2 || shape->size() > 8) {
    return absl::InvalidArgumentError(
        what + ": shape must be a list of at most 8 dims and data_offsets a [begin, end] pair");
  }
  int64_t numel = 1;
  for (const nlohmann::json& d : *shape) {
    TANDEM_ASSIGN_OR_RETURN(const int64_t dim, JsonInt(d, what + " dimension"));
    if (dim < 0 || (dim > 0 && numel > std::numeric_limits<int64_t>::max() / elem / dim)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has invalid dimension ", dim));
    }
    numel *= dim;
    t.shape.push_back(dim);
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t begin, JsonInt(offsets->at(0), what + " begin offset"));
  TANDEM_ASSIGN_OR_RETURN(const int64_t end, JsonInt(offsets->at(1), what + " end offset"));
  if (begin < 0 || end < begin || static_cast<uint64_t>(end) > data_size) {
    return absl::InvalidArgumentError(absl::StrCat(what, " data_offsets [", begin, ", ", end,
                                                   ") lie outside the data section of ", data_size,
                                                   " bytes"));
  }
  if (end - begin != numel * elem) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " spans ", end - begin, " bytes but its shape and dtype need ", numel * elem));
  }
  t.begin = static_cast<uint64_t>(begin);
  t.end = static_cast<uint64_t>(end);
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::Open(path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  const absl::Span<const uint8_t> bytes = mapping->bytes();
  f->mapping_ = std::move(mapping);
  TANDEM_RETURN_IF_ERROR(f->Init(path, bytes));
  return f;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(std::string bytes,
                                                                            std::string name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->owned_ = std::move(bytes);
  const absl::Span<const uint8_t> span(reinterpret_cast<const uint8_t*>(f->owned_.data()),
                                       f->owned_.size());
  TANDEM_RETURN_IF_ERROR(f->Init(std::move(name), span));
  return f;
}

absl::Status SafetensorsFile::Init(std::string path, absl::Span<const uint8_t> bytes) {
  path_ = std::move(path);
  bytes_ = bytes;
  auto fail = [this](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", parts...));
  };
  if (bytes_.size() < 8) return fail("truncated safetensors file: ", bytes_.size(), " bytes");
  uint64_t header_size;
  std::memcpy(&header_size, bytes_.data(), 8);
  if (header_size > kMaxHeaderBytes || header_size > bytes_.size() - 8) {
    return fail("safetensors header length ", header_size, " exceeds the file (", bytes_.size(),
                " bytes) or the 100 MB limit");
  }
  data_offset_ = 8 + header_size;
  const absl::string_view json(reinterpret_cast<const char*>(bytes_.data() + 8), header_size);
  absl::StatusOr<nlohmann::json> header = ParseJsonObject(json, "safetensors header");
  if (!header.ok()) return fail(header.status().message());
  const uint64_t data_size = bytes_.size() - data_offset_;
  for (const auto& [name, value] : header->items()) {
    if (name == "__metadata__") continue;
    absl::StatusOr<SafetensorsTensor> t = ParseEntry(name, value, data_size);
    if (!t.ok()) return fail(t.status().message());
    tensors_.push_back(std::move(*t));
  }
  // Object members come back in name order; sort by offset for the data order and the overlap
  // check.
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.name < b.name;
            });
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (i > 0 && tensors_[i - 1].end > tensors_[i].begin) {
      return fail("tensors '", tensors_[i - 1].name, "' and '", tensors_[i].name, "' overlap");
    }
    index_.emplace(tensors_[i].name, i);
  }
  return absl::OkStatus();
}

const SafetensorsTensor* SafetensorsFile::Find(absl::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Span<const uint8_t> SafetensorsFile::TensorData(const SafetensorsTensor& t) const {
  return bytes_.subspan(data_offset_ + t.begin, t.end - t.begin);
}

absl::StatusOr<GgmlType> SafetensorsFile::ConvertibleType(const SafetensorsTensor& t) const {
  if (t.dtype == "F32") return GgmlType::kF32;
  if (t.dtype == "F16") return GgmlType::kF16;
  if (t.dtype == "BF16") return GgmlType::kBF16;
  return absl::UnimplementedError(absl::StrCat(path_, ": tensor '", t.name, "' has dtype ", t.dtype,
                                               " (supported: F32, F16, BF16)"));
}

absl::StatusOr<Tensor> SafetensorsFile::ReadTensor(absl::string_view name) const {
  const SafetensorsTensor* t = Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": missing tensor '", name, "'"));
  }
  TANDEM_ASSIGN_OR_RETURN(const GgmlType type, ConvertibleType(*t));
  Tensor out;
  out.shape = t->shape;
  int64_t numel = 1;
  for (const int64_t d : t->shape) numel *= d;
  out.data.resize(static_cast<size_t>(numel));
  TANDEM_RETURN_IF_ERROR(DequantizeParallel(type, TensorData(*t), absl::MakeSpan(out.data)));
  return out;
}

}  // namespace tandem
