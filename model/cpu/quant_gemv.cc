#include "model/cpu/quant_gemv.h"

#include <cmath>
#include <vector>

#include "absl/types/span.h"
#include "model/format/dequant.h"

namespace tandem::quant {
namespace internal {

float ApplyEpilogue(Epilogue e, float v, float old_y, float aux) {
  switch (e) {
    case Epilogue::kStore:
      return v;
    case Epilogue::kAccumulate:
      return old_y + v;
    case Epilogue::kSiluMul:
      return v / (1.f + std::exp(-v)) * aux;
  }
  return v;
}

// Dequantises one row at a time with dequant.cc itself, then dots it with every activation row.
void PortableGemv(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(a.w.k));
  for (int64_t n = n_begin; n < n_end; ++n) {
    const absl::Status s =
        Dequantize(a.w.type, absl::MakeConstSpan(a.w.data + n * a.w.row_bytes, a.w.row_bytes),
                   absl::MakeSpan(row));
    (void)s;  // QuantLinear validated the type and row size when it was created.
    for (int64_t i = 0; i < a.m; ++i) {
      const float* x = a.x + i * a.w.k;
      float v = 0.f;
      for (int64_t k = 0; k < a.w.k; ++k) v += row[k] * x[k];
      if (a.bias != nullptr) v += a.bias[n];
      const int64_t at = i * a.w.n + n;
      a.y[at] = ApplyEpilogue(a.epilogue, v, a.y[at], a.aux != nullptr ? a.aux[at] : 0.f);
    }
  }
}

void PortableDequant(const QuantMatrix& w, int64_t n_begin, int64_t n_end, float* out) {
  const absl::Status s = Dequantize(
      w.type, absl::MakeConstSpan(w.data + n_begin * w.row_bytes, (n_end - n_begin) * w.row_bytes),
      absl::MakeSpan(out, (n_end - n_begin) * w.k));
  (void)s;  // QuantLinear validated the type and row size when it was created.
}

}  // namespace internal

bool GemvSupports(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return true;
    default:
      return false;
  }
}

void GemvOnPath(CpuIsa isa, const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  internal::GemvFn fn = nullptr;
  if (isa == CpuIsa::kAvx512) fn = internal::Avx512Gemv(a.w.type);
  if (isa == CpuIsa::kAvx2) fn = internal::Avx2Gemv(a.w.type);
  if (fn == nullptr) fn = &internal::PortableGemv;
  fn(a, n_begin, n_end);
}

void DequantRowsOnPath(CpuIsa isa, const QuantMatrix& w, int64_t n_begin, int64_t n_end,
                       float* out) {
  internal::DequantFn fn = nullptr;
  if (isa == CpuIsa::kAvx512) fn = internal::Avx512Dequant(w.type);
  if (isa == CpuIsa::kAvx2) fn = internal::Avx2Dequant(w.type);
  if (fn == nullptr) fn = &internal::PortableDequant;
  fn(w, n_begin, n_end, out);
}

void DequantRows(const QuantMatrix& w, int64_t n_begin, int64_t n_end, float* out) {
  DequantRowsOnPath(ActiveCpuIsa(), w, n_begin, n_end, out);
}

void Gemv(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  GemvOnPath(ActiveCpuIsa(), a, n_begin, n_end);
}

}  // namespace tandem::quant
