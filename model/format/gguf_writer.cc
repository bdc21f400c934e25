#include "model/format/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/format/dequant.h"
#include "model/format/gguf_parse.h"
#include "model/format/mapped_file.h"

namespace tandem {
namespace {

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void PutString(std::string& out, absl::string_view s) {
  Put<uint64_t>(out, s.size());
  out.append(s.data(), s.size());
}

void PutValueBody(std::string& out, const GgufValue& v) {
  switch (v.type()) {
    case GgufValueType::kString:
      PutString(out, v.raw());
      return;
    case GgufValueType::kArray:
      Put<uint32_t>(out, static_cast<uint32_t>(v.element_type()));
      Put<uint64_t>(out, v.size());
      if (v.element_type() == GgufValueType::kString) {
        for (const std::string& s : v.strings()) PutString(out, s);
      } else if (v.element_type() == GgufValueType::kArray) {
        for (const GgufValue& a : v.arrays()) {
          Put<uint32_t>(out, static_cast<uint32_t>(GgufValueType::kArray));
          PutValueBody(out, a);
        }
      } else {
        out.append(v.raw());
      }
      return;
    default: {
      const uint64_t bits = v.scalar_bits();
      out.append(reinterpret_cast<const char*>(&bits),
                 static_cast<size_t>(GgufScalarBytes(v.type())));
    }
  }
}

uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

GgufWriter::GgufWriter(uint32_t version, uint32_t alignment)
    : version_(version), alignment_(alignment) {
  if (alignment_ != kGgufDefaultAlignment) {
    Set("general.alignment", GgufValue::Uint32(alignment_));
  }
}

void GgufWriter::Set(std::string key, GgufValue value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

absl::Status GgufWriter::AddTensor(std::string name, std::vector<int64_t> shape, GgmlType type,
                                   std::string data) {
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return absl::InvalidArgumentError("duplicate tensor '" + name + "'");
  }
  if (shape.empty() || shape.size() > kGgufMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has ", shape.size(), " dimensions (1..4 allowed)"));
  }
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d <= 0) return absl::InvalidArgumentError("tensor '" + name + "' has a non-positive dim");
    numel *= d;
  }
  if (shape.back() % GgmlTypeTraits(type).block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' rows of ", shape.back(),
                                                   " are not whole ", GgmlTypeName(type),
                                                   " blocks"));
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t bytes, GgmlByteSize(type, numel));
  if (bytes != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' needs ", bytes, " bytes, got ", data.size()));
  }
  tensors_.push_back({std::move(name), std::move(shape), type, std::move(data)});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddF32Tensor(std::string name, std::vector<int64_t> shape,
                                      absl::Span<const float> values, GgmlType type) {
  TANDEM_ASSIGN_OR_RETURN(std::string data, Quantize(type, values));
  return AddTensor(std::move(name), std::move(shape), type, std::move(data));
}

void GgufWriter::Emit(absl::FunctionRef<void(absl::string_view)> sink) const {
  std::string head;
  Put<uint32_t>(head, kGgufMagic);
  Put<uint32_t>(head, version_);
  Put<uint64_t>(head, tensors_.size());
  Put<uint64_t>(head, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    PutString(head, key);
    Put<uint32_t>(head, static_cast<uint32_t>(value.type()));
    PutValueBody(head, value);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    PutString(head, t.name);
    Put<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) {
      Put<uint64_t>(head, static_cast<uint64_t>(*it));
    }
    Put<uint32_t>(head, static_cast<uint32_t>(t.type));
    Put<uint64_t>(head, offset);
    offset = AlignUp(offset + t.data.size(), alignment_);
  }
  head.resize(AlignUp(head.size(), alignment_), '\0');
  sink(head);
  const std::string padding(alignment_, '\0');
  for (const PendingTensor& t : tensors_) {
    sink(t.data);
    sink(absl::string_view(padding).substr(0, AlignUp(t.data.size(), alignment_) - t.data.size()));
  }
}

std::string GgufWriter::Serialize() const {
  std::string out;
  Emit([&out](absl::string_view part) { out.append(part.data(), part.size()); });
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
    if (f == nullptr) return ErrnoStatus(errno, "create " + tmp);
    bool ok = true;
    Emit([&](absl::string_view part) {
      if (ok && !part.empty())
        ok = std::fwrite(part.data(), 1, part.size(), f.get()) == part.size();
    });
    if (!ok || std::fflush(f.get()) != 0) {
      const int err = errno;
      std::remove(tmp.c_str());
      return ErrnoStatus(err, "write " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return ErrnoStatus(err, "rename " + tmp + " to " + path);
  }
  return absl::OkStatus();
}

}  // namespace tandem
