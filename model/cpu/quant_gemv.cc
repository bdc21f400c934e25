#include "model/cpu/quant_gemv.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/types/span.h"
#include "model/cpu/cpu_ops.h"
#include "model/cpu/quant_pack_q5.h"
#include "model/cpu/quant_panel_gemm.h"
#include "model/format/dequant.h"
#include "model/format/half.h"

namespace tandem::quant {
namespace {

int64_t QuantBytes(GgmlType type) { return type == GgmlType::kQ8_0 ? 32 : 16; }
int64_t ScaleCount(GgmlType type) { return type == GgmlType::kQ4_1 ? 2 : 1; }

// Byte j of block c's 16 quant bytes in a packed 4-bit row (quant_gemv.h: lane groups).
uint8_t LaneByte(const uint8_t* qs, int64_t blocks, int64_t c, int j) {
  int64_t first = 0;
  int g = 1;
  LaneGroupOf(c, blocks, &first, &g);
  return qs[16 * first + int64_t{g} * j + (c - first)];
}

// Row `row` of a packed matrix as f32, with dequant.cc's arithmetic.
void UnpackRow(GgmlType type, const uint8_t* row, int64_t k, float* out) {
  const int64_t blocks = k / 32;
  const uint8_t* qs = row;
  const float* sc = reinterpret_cast<const float*>(row + blocks * QuantBytes(type));
  for (int64_t b = 0; b < blocks; ++b) {
    float* dst = out + 32 * b;
    if (type == GgmlType::kQ8_0) {
      const int8_t* q = reinterpret_cast<const int8_t*>(qs + 32 * b);
      for (int j = 0; j < 32; ++j) dst[j] = sc[b] * static_cast<float>(q[j]);
    } else if (type == GgmlType::kQ4_0) {
      for (int j = 0; j < 16; ++j) {
        const uint8_t q = LaneByte(qs, blocks, b, j);
        dst[j] = sc[b] * static_cast<float>((q & 0x0f) - 8);
        dst[j + 16] = sc[b] * static_cast<float>((q >> 4) - 8);
      }
    } else {
      const float d = sc[2 * b], m = sc[2 * b + 1];
      for (int j = 0; j < 16; ++j) {
        const uint8_t q = LaneByte(qs, blocks, b, j);
        dst[j] = d * static_cast<float>(q & 0x0f) + m;
        dst[j + 16] = d * static_cast<float>(q >> 4) + m;
      }
    }
  }
}

bool IsQ5(GgmlType type) { return type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1; }

// Row n of w as f32 into out (k floats), from either layout.
void RowToF32(const QuantMatrix& w, int64_t n, float* out) {
  const uint8_t* row = w.data + n * w.row_bytes;
  if (w.packed) {
    if (IsQ5(w.type)) {
      UnpackQ5Row(w.type, row, w.k, out);
    } else {
      UnpackRow(w.type, row, w.k, out);
    }
    return;
  }
  const absl::Status s =
      Dequantize(w.type, absl::MakeConstSpan(row, w.row_bytes), absl::MakeSpan(out, w.k));
  (void)s;  // QuantLinear validated the type and row size when it was created.
}

}  // namespace

bool PackSupports(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ8_0 ||
         IsQ5(type);
}

int64_t PackedRowBytes(GgmlType type, int64_t k) {
  if (IsQ5(type)) return Q5PackedRowBytes(type, k);
  return k / 32 * (QuantBytes(type) + 4 * ScaleCount(type));
}

std::vector<uint8_t> PackRows(GgmlType type, const uint8_t* rows, int64_t n, int64_t k) {
  const int64_t blocks = k / 32;
  const int64_t file_block = GgmlTypeTraits(type).block_bytes;
  if (IsQ5(type)) {  // quant_pack_q5.h
    const int64_t row_bytes = Q5PackedRowBytes(type, k);
    std::vector<uint8_t> out(n * row_bytes);
    for (int64_t r = 0; r < n; ++r) {
      PackQ5Row(type, rows + r * blocks * file_block, k, out.data() + r * row_bytes);
    }
    return out;
  }
  const int64_t qbytes = QuantBytes(type), scales = ScaleCount(type);
  const int64_t row_bytes = PackedRowBytes(type, k);
  std::vector<uint8_t> out(n * row_bytes);
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* src = rows + r * blocks * file_block;
    uint8_t* dst = out.data() + r * row_bytes;
    float* sc = reinterpret_cast<float*>(dst + blocks * qbytes);
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* blk = src + b * file_block;
      if (qbytes == 32) {
        std::memcpy(dst + b * qbytes, blk + 2 * scales, qbytes);
      } else {
        int64_t first = 0;
        int g = 1;
        LaneGroupOf(b, blocks, &first, &g);
        for (int j = 0; j < 16; ++j)
          dst[16 * first + int64_t{g} * j + (b - first)] = blk[2 * scales + j];
      }
      for (int64_t s = 0; s < scales; ++s) {
        uint16_t h;
        std::memcpy(&h, blk + 2 * s, 2);
        sc[b * scales + s] = F16ToF32(h);
      }
    }
  }
  return out;
}

namespace internal {

namespace {
std::atomic<int64_t> g_panel_min_rows{kDefaultPanelMinRows};
}  // namespace
int64_t PanelMinRows() { return g_panel_min_rows.load(std::memory_order_relaxed); }
void SetPanelMinRows(int64_t m) { g_panel_min_rows.store(m, std::memory_order_relaxed); }

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
    RowToF32(a.w, n, row.data());
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
  for (int64_t n = n_begin; n < n_end; ++n) RowToF32(w, n, out + (n - n_begin) * w.k);
}

}  // namespace internal

bool GemvSupports(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
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
  // Several activation rows: decode each weight once into an f32 panel (quant_panel_gemm.h).
  const bool panel = a.m >= internal::PanelMinRows() && internal::PanelSupports(a.w);
  if (isa == CpuIsa::kAvx512) {
    fn = panel ? &internal::Avx512PanelGemm : internal::Avx512Gemv(a.w.type, a.w.packed);
  }
  if (isa == CpuIsa::kAvx2) {
    fn = panel ? &internal::Avx2PanelGemm : internal::Avx2Gemv(a.w.type, a.w.packed);
  }
  if (fn == nullptr) fn = &internal::PortableGemv;
  if (a.epilogue != Epilogue::kSiluMul || isa == CpuIsa::kPortable) {
    fn(a, n_begin, n_end);
    return;
  }
  // SiLU·aux after the kernel, over each activation row's slice of outputs while it is still in
  // cache: a vectorised exp instead of one std::exp per output in the kernels' stores (3 % of a
  // batch-16 decode step on the AVX2 path).
  GemvArgs stored = a;
  stored.epilogue = Epilogue::kStore;
  fn(stored, n_begin, n_end);
  for (int64_t i = 0; i < a.m; ++i) {
    float* y = a.y + i * a.w.n;
    cpu::SiluMulOnPath(isa, y, a.aux + i * a.w.n, n_begin, n_end, y);
  }
}

void DequantRowsOnPath(CpuIsa isa, const QuantMatrix& w, int64_t n_begin, int64_t n_end,
                       float* out) {
  internal::DequantFn fn = nullptr;
  if (isa == CpuIsa::kAvx512) fn = internal::Avx512Dequant(w.type, w.packed);
  if (isa == CpuIsa::kAvx2) fn = internal::Avx2Dequant(w.type, w.packed);
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
