#include "model/format/gguf_file.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/format/parallel_dequant.h"

namespace tandem {
namespace {

template <typename T>
absl::StatusOr<T> Typed(absl::string_view key, absl::StatusOr<T> v) {
  if (v.ok()) return v;
  return absl::Status(v.status().code(),
                      absl::StrCat("metadata key '", key, "' ", v.status().message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::Open(path));
  std::unique_ptr<GgufFile> f(new GgufFile());
  const absl::Span<const uint8_t> bytes = mapping->bytes();
  f->mapping_ = std::move(mapping);
  TANDEM_RETURN_IF_ERROR(f->Init(path, bytes));
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string bytes, std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->owned_ = std::move(bytes);
  const absl::Span<const uint8_t> span(reinterpret_cast<const uint8_t*>(f->owned_.data()),
                                       f->owned_.size());
  TANDEM_RETURN_IF_ERROR(f->Init(std::move(name), span));
  return f;
}

absl::Status GgufFile::Init(std::string path, absl::Span<const uint8_t> bytes) {
  path_ = std::move(path);
  bytes_ = bytes;
  absl::StatusOr<GgufContents> contents = ParseGguf(bytes_);
  if (!contents.ok()) {
    return absl::Status(contents.status().code(),
                        absl::StrCat(path_, ": ", contents.status().message()));
  }
  contents_ = std::move(*contents);
  for (size_t i = 0; i < contents_.metadata.size(); ++i) {
    key_index_.emplace(contents_.metadata[i].first, i);
  }
  for (size_t i = 0; i < contents_.tensors.size(); ++i) {
    tensor_index_.emplace(contents_.tensors[i].name, i);
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(absl::string_view key) const {
  const auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &contents_.metadata[it->second].second;
}

absl::StatusOr<const GgufValue*> GgufFile::Require(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": missing metadata key '", key, "'"));
  }
  return v;
}

absl::StatusOr<absl::string_view> GgufFile::GetString(absl::string_view key) const {
  TANDEM_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  return Typed(key, v->AsString());
}

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  TANDEM_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  return Typed(key, v->AsInt());
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  TANDEM_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  return Typed(key, v->AsFloat());
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  TANDEM_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  return Typed(key, v->AsBool());
}

absl::StatusOr<absl::Span<const std::string>> GgufFile::GetStringArray(
    absl::string_view key) const {
  TANDEM_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  return Typed(key, v->AsStringArray());
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(absl::string_view key) const {
  TANDEM_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  return Typed(key, v->AsIntArray());
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(absl::string_view key) const {
  TANDEM_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  return Typed(key, v->AsFloatArray());
}

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &contents_.tensors[it->second];
}

absl::Span<const uint8_t> GgufFile::TensorData(const GgufTensorInfo& info) const {
  return bytes_.subspan(contents_.data_offset + info.offset, info.nbytes);
}

absl::StatusOr<Tensor> GgufFile::ReadTensor(absl::string_view name) const {
  const GgufTensorInfo* info = FindTensor(name);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": missing tensor '", name, "'"));
  }
  if (!GgmlTypeTraits(info->type).dequantizable) {
    return absl::UnimplementedError(absl::StrCat(path_, ": tensor '", name, "' has type ",
                                                 GgmlTypeName(info->type),
                                                 ", which Tandem cannot dequantise"));
  }
  Tensor t;
  t.shape = info->Shape();
  t.data.resize(static_cast<size_t>(info->numel));
  const absl::Status s = DequantizeParallel(info->type, TensorData(*info), absl::MakeSpan(t.data));
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path_, ": tensor '", name, "': ", s.message()));
  }
  return t;
}

}  // namespace tandem
