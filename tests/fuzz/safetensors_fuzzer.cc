// Fuzz target: a safetensors file image (SafetensorsFile: the u64 header length, the JSON header,
// tensor extents) and the conversion of every tensor to f32. Malformed input must give
// InvalidArgument (or Unimplemented for a dtype that is not converted), never a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/format/safetensors_file.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::FromBytes(
      std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  if (!file.ok()) {
    TANDEM_FUZZ_CHECK(file.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  const SafetensorsFile& f = **file;
  for (const SafetensorsTensor& t : f.tensors()) {
    TANDEM_FUZZ_CHECK(f.Find(t.name) == &t);
    const absl::Span<const uint8_t> bytes = f.TensorData(t);
    TANDEM_FUZZ_CHECK(bytes.size() == t.end - t.begin);
    TANDEM_FUZZ_CHECK(bytes.data() >= f.bytes().data() &&
                      bytes.data() + bytes.size() <= f.bytes().data() + f.bytes().size());
    (void)f.ConvertibleType(t);
    absl::StatusOr<Tensor> tensor = f.ReadTensor(t.name);
    if (!tensor.ok()) {
      TANDEM_FUZZ_CHECK(tensor.status().code() == absl::StatusCode::kUnimplemented ||
                        tensor.status().code() == absl::StatusCode::kInvalidArgument);
    }
  }
  return 0;
}
