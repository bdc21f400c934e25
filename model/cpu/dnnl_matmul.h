// c[m][n] = a[m][k] · b for activation-by-activation products (attention's QKᵀ and PV), through
// oneDNN with primitives cached per shape on the calling thread. b is [k][n] row-major, or
// [n][k] row-major when b_transposed (then c = a·bᵀ). All matrices dense and 64-byte friendly.
// Time inside oneDNN is counted with the linear layers' (dnnl_common.h).
//
// Thread-safety: reentrant; each thread keeps its own primitive cache.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace tandem::cpu {

absl::Status MatMul(int64_t m, int64_t k, int64_t n, const float* a, const float* b,
                    bool b_transposed, float* c);

}  // namespace tandem::cpu
