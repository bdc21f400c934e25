// Fuzz target: a GGUF file image as every loader reads it — the header parser (ParseGguf), the
// GgufFile view with its typed metadata getters, tensor reads (dequantisation of every GGML
// type) and the Llama config and weights. Malformed input must give InvalidArgument,
// Unimplemented or NotFound, never a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/format/gguf_file.h"
#include "model/format/gguf_llama.h"
#include "model/format/gguf_parse.h"
#include "tests/fuzz/fuzz_check.h"

namespace tandem {
namespace {

bool DocumentedError(const absl::Status& s) {
  return s.code() == absl::StatusCode::kInvalidArgument ||
         s.code() == absl::StatusCode::kUnimplemented || s.code() == absl::StatusCode::kNotFound;
}

void ReadMetadata(const GgufFile& file) {
  for (const auto& [key, value] : file.metadata()) {
    (void)file.GetString(key);
    (void)file.GetInt(key);
    (void)file.GetFloat(key);
    (void)file.GetBool(key);
    (void)file.GetStringArray(key);
    (void)file.GetIntArray(key);
    (void)file.GetFloatArray(key);
  }
}

void ReadTensors(const GgufFile& file) {
  for (const GgufTensorInfo& info : file.tensors()) {
    const absl::Span<const uint8_t> data = file.TensorData(info);
    TANDEM_FUZZ_CHECK(data.size() == info.nbytes);
    TANDEM_FUZZ_CHECK(data.data() >= file.bytes().data() &&
                      data.data() + data.size() <= file.bytes().data() + file.bytes().size());
    absl::StatusOr<Tensor> tensor = file.ReadTensor(info.name);
    if (tensor.ok()) {
      TANDEM_FUZZ_CHECK(static_cast<int64_t>(tensor->data.size()) == info.numel);
    } else {
      TANDEM_FUZZ_CHECK(DocumentedError(tensor.status()));
    }
  }
}

}  // namespace
}  // namespace tandem

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const absl::StatusOr<GgufContents> contents = ParseGguf(absl::MakeConstSpan(data, size));
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::FromBytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz.gguf");
  if (!contents.ok()) {
    TANDEM_FUZZ_CHECK(contents.status().code() == absl::StatusCode::kInvalidArgument ||
                      contents.status().code() == absl::StatusCode::kUnimplemented);
  }
  if (!file.ok()) {
    TANDEM_FUZZ_CHECK(DocumentedError(file.status()));
    return 0;
  }
  TANDEM_FUZZ_CHECK(contents.ok());
  ReadMetadata(**file);
  ReadTensors(**file);
  if (absl::StatusOr<LlamaConfig> config = ReadGgufLlamaConfig(**file); config.ok()) {
    for (bool keep_quantized : {false, true}) {
      absl::StatusOr<LlamaWeights> weights = LoadGgufLlama(**file, keep_quantized);
      if (!weights.ok()) TANDEM_FUZZ_CHECK(DocumentedError(weights.status()));
    }
  } else {
    TANDEM_FUZZ_CHECK(DocumentedError(config.status()));
  }
  return 0;
}
