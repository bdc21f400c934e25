// A linear layer whose weight stays in its file's block format (quant_gemv.h lists the types):
// y[m][n] = x[m][k]·Wᵀ + b with W [n][k] as GGML blocks, resident at the file's size.
//
// Two paths, chosen by m:
//   * m <= SmallBatchLimit() (decode): the quantised GEMV kernels, or from 6 rows on the vector
//     paths' panel kernels (quant_panel_gemm.h: each weight dequantised once per call into an
//     f32 panel, then register-tiled FMAs), n split over the calling thread's OpenMP team
//     (common/parallel_for.h), each output row's epilogue applied as it is stored;
//   * larger m (prefill): W is dequantised tile by tile (rows of at most ~4 MiB of f32, reused
//     from a per-thread buffer) with model/format/dequant.cc and each tile goes through a oneDNN
//     GEMM with the epilogue as post-ops (DnnlLinear::PlainGemm). Dequantising costs O(n·k) per
//     call against the GEMM's O(m·n·k), so above the crossover it is a few percent.
// Both compute with the exact dequantised weights; they differ from each other and from a GEMM on
// the dequantised matrix only in f32 summation order.
//
// Thread-safety: immutable after Create; Forward and DequantizeRows may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/backend.h"
#include "model/cpu/dnnl_linear.h"
#include "model/cpu/quant_gemv.h"
#include "model/format/ggml_types.h"

namespace tandem {

class QuantLinear final : public LinearOp {
 public:
  // rows: n rows of k elements of `type`, whole blocks (k a multiple of the block size), packed
  // back to back; bias [n] or nullptr. Copies both. InvalidArgument for a bad shape,
  // Unimplemented for a type without kernels.
  static absl::StatusOr<std::unique_ptr<QuantLinear>> Create(GgmlType type, const uint8_t* rows,
                                                             int64_t n, int64_t k,
                                                             const float* bias);
  ~QuantLinear() override;
  QuantLinear(const QuantLinear&) = delete;
  QuantLinear& operator=(const QuantLinear&) = delete;

  int64_t n() const override { return n_; }
  int64_t k() const override { return k_; }
  GgmlType type() const { return type_; }
  int64_t row_bytes() const { return row_bytes_; }
  // Bytes held: the rows (Q4_0/Q4_1/Q8_0/Q5_0/Q5_1 in quant::PackRows' layout, f32 scales:
  // +20% for Q4_1, +6% for Q8_0, +15% for Q5_0, +22% for Q5_1 over the file) plus the bias.
  int64_t resident_bytes() const override;

  absl::Status Forward(const float* x, int64_t m, float* y,
                       DnnlLinear::Epilogue epilogue = DnnlLinear::Epilogue::kStore,
                       const float* aux = nullptr) const;

  // Several GEMV-path products sharing x in one parallel pass over the union of their 32-row
  // tiles (one thread hand-off instead of one per matrix): jobs[j].y = x·W_jᵀ + b_j with its
  // epilogue. REQUIRES m <= SmallBatchLimit(); no job's aux is another job's y.
  struct Job {
    const QuantLinear* op = nullptr;
    float* y = nullptr;
    DnnlLinear::Epilogue epilogue = DnnlLinear::Epilogue::kStore;
    const float* aux = nullptr;
  };
  static absl::Status ForwardMany(absl::Span<const Job> jobs, const float* x, int64_t m);
  // up = x·W_upᵀ + b and out = silu(x·W_gateᵀ + b) ⊙ up in one parallel pass: each thread
  // computes a tile of up, then the same tile of out from it. Results are bit-identical to
  // Forward(up) followed by Forward(gate, kSiluMul). REQUIRES m <= SmallBatchLimit(), equal n
  // and k; out aliases neither x nor up.
  static absl::Status ForwardGated(const QuantLinear& gate, const QuantLinear& up_op,
                                   const float* x, int64_t m, float* up, float* out);

  // out[i] = row ids[i] of W, dequantised ([count][k] floats): an embedding lookup in a
  // quantised table. InvalidArgument for an id outside [0, n).
  absl::Status DequantizeRows(const int32_t* ids, int64_t count, float* out) const;

  // The largest m that takes the GEMV path (process-wide; benchmarks and tests move it to
  // measure or pin either path). Default: kDefaultSmallBatchLimit.
  static constexpr int64_t kDefaultSmallBatchLimit = 48;

  // Seconds all Forward calls spent dequantising tiles for the large-batch path since the last
  // reset (process-wide; the benchmark counts it with the GEMM time).
  static double DequantSeconds();
  static void ResetDequantSeconds();
  static int64_t SmallBatchLimit();
  static void SetSmallBatchLimit(int64_t m);

 private:
  QuantLinear() = default;
  quant::GemvArgs GemvArgsFor(const float* x, int64_t m, float* y, DnnlLinear::Epilogue epilogue,
                              const float* aux) const;
  absl::Status ForwardTiled(const float* x, int64_t m, float* y, DnnlLinear::Epilogue epilogue,
                            const float* aux) const;

  GgmlType type_ = GgmlType::kF32;
  int64_t n_ = 0, k_ = 0, row_bytes_ = 0;
  bool packed_ = false;        // rows in quant::PackRows' layout (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1)
  uint8_t* blocks_ = nullptr;  // [n][row_bytes], owned (aligned_alloc)
  std::vector<float> bias_;
};

}  // namespace tandem
