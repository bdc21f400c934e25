// llamacpp-quantize: llama.cpp's quantiser (the llama_model_quantize call its llama-quantize tool
// makes) from the libllama that bench/peer/reference_logits.sh builds, so a quantised model comes
// from the same PyPI sdist as the peer it is measured against without building llama.cpp's
// `common` library and its HTTP dependencies.
//
//   llamacpp-quantize IN.gguf OUT.gguf Q4_K_M [THREADS]
//
// Equivalent to `llama-quantize --allow-requantize IN.gguf OUT.gguf Q4_K_M THREADS`: requantising
// an already quantised file is allowed (its tensors are dequantised to f32 first), everything
// else keeps llama.cpp's defaults (the output tensor quantised too, no imatrix).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: llamacpp-quantize IN.gguf OUT.gguf Q4_K_M [THREADS]\n");
    return 2;
  }
  struct Named {
    const char* name;
    llama_ftype ftype;
  };
  const Named kTypes[] = {
      {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S},
      {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M}, {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S},
      {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},     {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
      {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},     {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
  };
  llama_model_quantize_params params = llama_model_quantize_default_params();
  bool found = false;
  for (const Named& t : kTypes) {
    if (std::strcmp(argv[3], t.name) == 0) {
      params.ftype = t.ftype;
      found = true;
    }
  }
  if (!found) {
    std::fprintf(stderr, "llamacpp-quantize: unknown type '%s'\n", argv[3]);
    return 2;
  }
  params.allow_requantize = true;
  if (argc == 5) params.nthread = std::atoi(argv[4]);
  llama_backend_init();
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &params);
  llama_backend_free();
  if (rc != 0) {
    std::fprintf(stderr, "llamacpp-quantize: llama_model_quantize failed (%u)\n", rc);
    return 1;
  }
  return 0;
}
