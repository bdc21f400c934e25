// llamacpp-dequant-check: Tandem's Dequantize (model/format/dequant.cc) against ggml's own
// to_float, element for element, on every quantised tensor of a GGUF file — the independent check
// of the block layouts (bench/peer/dequant_check.sh builds it against the sdist's ggml).
//
//   llamacpp-dequant-check MODEL.gguf     # exit 0 when every tensor is bit-identical
#include <cstdint>
#include <cstdio>
#include <vector>

#include "ggml.h"
#include "gguf.h"
#include "model/format/dequant.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: llamacpp-dequant-check MODEL.gguf\n");
    return 2;
  }
  ggml_context* ctx = nullptr;
  gguf_init_params p{false, &ctx};
  gguf_context* g = gguf_init_from_file(argv[1], p);
  if (g == nullptr) {
    std::fprintf(stderr, "llamacpp-dequant-check: cannot read %s\n", argv[1]);
    return 1;
  }
  int bad = 0, checked = 0;
  for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
    const char* name = gguf_get_tensor_name(g, i);
    ggml_tensor* t = ggml_get_tensor(ctx, name);
    if (t->type == GGML_TYPE_F32) continue;
    const int64_t n = ggml_nelements(t);
    std::vector<float> a(n), b(n);
    ggml_get_type_traits(t->type)->to_float(t->data, a.data(), n);
    auto s = tandem::Dequantize(static_cast<tandem::GgmlType>(t->type),
                                absl::MakeConstSpan((const uint8_t*)t->data, ggml_nbytes(t)),
                                absl::MakeSpan(b));
    if (!s.ok()) {
      std::printf("%s: %s\n", name, s.ToString().c_str());
      ++bad;
      continue;
    }
    int64_t diff = 0;
    for (int64_t j = 0; j < n; ++j)
      if (a[j] != b[j]) ++diff;
    ++checked;
    if (diff) {
      ++bad;
      std::printf("%s (%s): %lld of %lld differ, e.g. ggml %g tandem %g\n", name,
                  ggml_type_name(t->type), (long long)diff, (long long)n, a[0], b[0]);
    }
  }
  gguf_free(g);
  ggml_free(ctx);
  std::printf("checked %d tensors, %d differ\n", checked, bad);
  return bad != 0;
}
