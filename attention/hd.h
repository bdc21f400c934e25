// TANDEM_HD marks index math that CUDA kernels and CPU code share: host/device-callable when
// compiled by nvcc, plain functions otherwise. Only header-only, constexpr-friendly code uses it.
#pragma once

#if defined(__CUDACC__)
#define TANDEM_HD __host__ __device__
#else
#define TANDEM_HD
#endif
