#include "attention/cpu/attention_kernel.h"

namespace tandem::attention_cpu {

const KernelTable& SelectKernels(CpuIsa isa, int32_t head_dim) {
  if (isa == CpuIsa::kAvx512 && head_dim % Avx512Kernels().lanes == 0) return Avx512Kernels();
  if (isa != CpuIsa::kPortable && head_dim % Avx2Kernels().lanes == 0) return Avx2Kernels();
  return PortableKernels();
}

}  // namespace tandem::attention_cpu
