// y[m][n] = x[m][k]·Wᵀ + b through oneDNN's matmul (docs/design.md#model-and-compute: chosen by
// measurement over Debian's OpenBLAS, see docs/PERFORMANCE.md "GEMM library").
//
// W is reordered once, at construction, into the blocked layout oneDNN's brgemm kernels want;
// that layout does not depend on m, so one packed copy serves every batch size. Primitives are
// created per distinct shape (m, k, n, epilogue) and cached process-wide, shared by all weights
// of that shape, the least recently used dropped beyond kPrimitiveCacheCapacity (creation is the
// expensive part; execution of a cached primitive streams the packed weights at close to memory
// bandwidth for small m; an unbounded cache grew a prefill node's memory with every new
// number of rows in a step).
//
// Thread-safety: Forward may be called concurrently (ranks sharing weights); the primitive cache
// is guarded. oneDNN uses the calling thread's OpenMP thread count (common/parallel_for.h).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "model/backend.h"

namespace tandem {

class DnnlLinear final : public LinearOp {
 public:
  // w: [n][k] row-major f32; bias: [n] or nullptr. Copies what it needs.
  static absl::StatusOr<std::unique_ptr<DnnlLinear>> Create(const float* w, int64_t n, int64_t k,
                                                            const float* bias);
  ~DnnlLinear() override;
  DnnlLinear(const DnnlLinear&) = delete;
  DnnlLinear& operator=(const DnnlLinear&) = delete;

  int64_t n() const override;
  int64_t k() const override;

  // What the GEMM does with its result before storing it, as oneDNN post-ops: the element-wise
  // work rides on the GEMM's own pass over y instead of a second pass over memory.
  enum class Epilogue {
    kStore,       // y = x·Wᵀ + b
    kAccumulate,  // y += x·Wᵀ + b (a residual add)
    kSiluMul,     // y = silu(x·Wᵀ + b) ⊙ aux, aux [m][n] (SwiGLU's gate projection); y != aux
  };

  absl::Status Forward(const float* x, int64_t m, float* y, Epilogue epilogue = Epilogue::kStore,
                       const float* aux = nullptr) const;

  // Seconds spent inside oneDNN by all Forward calls since the last reset (for the benchmark's
  // "share of time inside the GEMM library"). Process-wide.
  static double TotalSeconds();

  // The process-wide primitive cache: its capacity (entries; each ~25 KB) and how many it holds.
  // 256 covers ~40 distinct row counts of a model's ~6 GEMM shapes. Tests shrink it.
  static constexpr int64_t kPrimitiveCacheCapacity = 256;
  static int64_t CachedPrimitives();
  static void SetPrimitiveCacheCapacity(int64_t capacity);
  static void ResetTotalSeconds();

  // y[m][n] (rows ldy floats apart) = epilogue(x[m][k]·wᵀ + b) for a plain row-major w [n][k]
  // that may change between calls — a tile of a quantised weight dequantised on the fly
  // (quant_linear.h). w is reordered into the packed layout (a per-thread buffer) and then
  // multiplied, as Create + Forward would, without keeping the copy — except where oneDNN's
  // preferred layout is just the [k][n] transpose (its AVX2 sgemm, which packs operands itself):
  // there w is multiplied as it is, with no reorder. aux, for kSiluMul, has y's
  // layout. bias: [n] or nullptr. Primitives are cached per shape; the reorder and the GEMM
  // count in TotalSeconds.
  static absl::Status PlainGemm(const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                                const float* bias, float* y, int64_t ldy, Epilogue epilogue,
                                const float* aux);

 private:
  struct Impl;
  explicit DnnlLinear(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
