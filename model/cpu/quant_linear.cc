#include "model/cpu/quant_linear.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/parallel_for.h"
#include "model/cpu/cpu_ops.h"

namespace tandem {
namespace {

std::atomic<int64_t> g_small_batch_limit{QuantLinear::kDefaultSmallBatchLimit};
std::atomic<int64_t> g_dequant_nanos{0};

quant::Epilogue ToQuant(DnnlLinear::Epilogue e) {
  switch (e) {
    case DnnlLinear::Epilogue::kStore:
      return quant::Epilogue::kStore;
    case DnnlLinear::Epilogue::kAccumulate:
      return quant::Epilogue::kAccumulate;
    case DnnlLinear::Epilogue::kSiluMul:
      return quant::Epilogue::kSiluMul;
  }
  return quant::Epilogue::kStore;
}

// f32 bytes of one dequantised tile: small enough to stay in L2 next to the GEMM's own blocks,
// large enough that one GEMM call per tile amortises its setup.
constexpr int64_t kTileBytes = int64_t{4} << 20;

}  // namespace

double QuantLinear::DequantSeconds() { return g_dequant_nanos.load() * 1e-9; }
void QuantLinear::ResetDequantSeconds() { g_dequant_nanos.store(0); }

int64_t QuantLinear::SmallBatchLimit() { return g_small_batch_limit.load(); }
void QuantLinear::SetSmallBatchLimit(int64_t m) { g_small_batch_limit.store(m); }

QuantLinear::~QuantLinear() { std::free(blocks_); }

int64_t QuantLinear::resident_bytes() const {
  return n_ * row_bytes_ + static_cast<int64_t>(bias_.size() * sizeof(float));
}

absl::StatusOr<std::unique_ptr<QuantLinear>> QuantLinear::Create(GgmlType type, const uint8_t* rows,
                                                                 int64_t n, int64_t k,
                                                                 const float* bias) {
  if (!quant::GemvSupports(type)) {
    return absl::UnimplementedError(
        absl::StrCat("quantised linear: no kernels for type ", GgmlTypeName(type)));
  }
  if (n <= 0 || k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantised linear: bad shape [", n, "][", k, "]"));
  }
  const absl::StatusOr<int64_t> row_bytes = GgmlByteSize(type, k);
  if (!row_bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("quantised linear: a row of ", k, " elements ",
                                                   "is not whole ", GgmlTypeName(type), " blocks"));
  }
  std::unique_ptr<QuantLinear> op(new QuantLinear());
  op->type_ = type;
  op->n_ = n;
  op->k_ = k;
  op->packed_ = quant::PackSupports(type);
  std::vector<uint8_t> packed;
  if (op->packed_) {
    packed = quant::PackRows(type, rows, n, k);
    rows = packed.data();
  }
  op->row_bytes_ = op->packed_ ? quant::PackedRowBytes(type, k) : *row_bytes;
  const int64_t bytes = n * op->row_bytes_;
  // Large matrices on 2 MiB pages (see CpuBackend::Allocate): the GEMV streams them.
  constexpr int64_t kHuge = int64_t{2} << 20;
  const int64_t align = bytes >= kHuge ? kHuge : 64;
  const int64_t rounded = (bytes + align - 1) / align * align;
  op->blocks_ = static_cast<uint8_t*>(std::aligned_alloc(align, rounded));
  if (op->blocks_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  if (align == kHuge) madvise(op->blocks_, rounded, MADV_HUGEPAGE);
  std::memcpy(op->blocks_, rows, bytes);
  if (bias != nullptr) op->bias_.assign(bias, bias + n);
  return op;
}

absl::Status QuantLinear::Forward(const float* x, int64_t m, float* y,
                                  DnnlLinear::Epilogue epilogue, const float* aux) const {
  if (m <= 0) return absl::OkStatus();
  if (epilogue == DnnlLinear::Epilogue::kSiluMul && (aux == nullptr || aux == y)) {
    return absl::InvalidArgumentError(
        "linear: the SiLU-multiply epilogue needs aux, distinct from y");
  }
  if (m > SmallBatchLimit()) return ForwardTiled(x, m, y, epilogue, aux);
  const quant::GemvArgs a = GemvArgsFor(x, m, y, epilogue, aux);
  // Each thread takes whole 32-row tiles (the kernel's unit); small layers run on fewer threads.
  ParallelFor((n_ + 31) / 32, 1,
              [&](int64_t b, int64_t e) { quant::Gemv(a, b * 32, std::min(e * 32, n_)); });
  return absl::OkStatus();
}

quant::GemvArgs QuantLinear::GemvArgsFor(const float* x, int64_t m, float* y,
                                         DnnlLinear::Epilogue epilogue, const float* aux) const {
  quant::GemvArgs a;
  a.w = quant::QuantMatrix{type_, blocks_, n_, k_, row_bytes_, packed_};
  a.x = x;
  a.m = m;
  a.bias = bias_.empty() ? nullptr : bias_.data();
  a.y = y;
  a.epilogue = ToQuant(epilogue);
  a.aux = aux;
  return a;
}

absl::Status QuantLinear::ForwardMany(absl::Span<const Job> jobs, const float* x, int64_t m) {
  if (m <= 0 || jobs.empty()) return absl::OkStatus();
  if (m > SmallBatchLimit()) {
    return absl::InvalidArgumentError(absl::StrCat("ForwardMany: ", m, " rows is above the GEMV ",
                                                   "limit of ", SmallBatchLimit()));
  }
  std::vector<quant::GemvArgs> args;
  std::vector<int64_t> first_tile = {0};  // job j owns tiles [first_tile[j], first_tile[j + 1])
  for (const Job& j : jobs) {
    if (j.epilogue == DnnlLinear::Epilogue::kSiluMul && (j.aux == nullptr || j.aux == j.y)) {
      return absl::InvalidArgumentError(
          "linear: the SiLU-multiply epilogue needs aux, distinct from y");
    }
    if (j.op->k_ != jobs[0].op->k_) {
      return absl::InvalidArgumentError(
          absl::StrCat("ForwardMany: matrices of ", j.op->k_, " and ", jobs[0].op->k_, " columns"));
    }
    args.push_back(j.op->GemvArgsFor(x, m, j.y, j.epilogue, j.aux));
    first_tile.push_back(first_tile.back() + (j.op->n_ + 31) / 32);
  }
  ParallelFor(first_tile.back(), 1, [&](int64_t b, int64_t e) {
    for (size_t j = 0; j < args.size(); ++j) {
      const int64_t lo = std::max(b, first_tile[j]), hi = std::min(e, first_tile[j + 1]);
      if (lo >= hi) continue;
      const int64_t n = args[j].w.n;
      quant::Gemv(args[j], (lo - first_tile[j]) * 32, std::min((hi - first_tile[j]) * 32, n));
    }
  });
  return absl::OkStatus();
}

absl::Status QuantLinear::ForwardGated(const QuantLinear& gate, const QuantLinear& up_op,
                                       const float* x, int64_t m, float* up, float* out) {
  if (m <= 0) return absl::OkStatus();
  if (m > SmallBatchLimit()) {
    return absl::InvalidArgumentError(absl::StrCat("ForwardGated: ", m, " rows is above the ",
                                                   "GEMV limit of ", SmallBatchLimit()));
  }
  if (gate.n_ != up_op.n_ || gate.k_ != up_op.k_ || out == up) {
    return absl::InvalidArgumentError(absl::StrCat("ForwardGated: gate [", gate.n_, "][", gate.k_,
                                                   "] and up [", up_op.n_, "][", up_op.k_,
                                                   "] differ, or out aliases up"));
  }
  const quant::GemvArgs ua = up_op.GemvArgsFor(x, m, up, DnnlLinear::Epilogue::kStore, nullptr);
  const quant::GemvArgs ga = gate.GemvArgsFor(x, m, out, DnnlLinear::Epilogue::kSiluMul, up);
  const int64_t n = gate.n_;
  ParallelFor((n + 31) / 32, 1, [&](int64_t b, int64_t e) {
    const int64_t lo = b * 32, hi = std::min(e * 32, n);
    quant::Gemv(ua, lo, hi);
    quant::Gemv(ga, lo, hi);  // reads the rows of up this thread just wrote
  });
  return absl::OkStatus();
}

absl::Status QuantLinear::ForwardTiled(const float* x, int64_t m, float* y,
                                       DnnlLinear::Epilogue epilogue, const float* aux) const {
  const int64_t rows_per_tile =
      std::min(n_, std::max<int64_t>(64, kTileBytes / (k_ * static_cast<int64_t>(sizeof(float)))));
  thread_local std::vector<float> tile_buffer;
  tile_buffer.resize(static_cast<size_t>(rows_per_tile * k_));
  // Named outside the parallel loop: inside it, a thread_local would be each worker's own.
  float* const tile = tile_buffer.data();
  for (int64_t t = 0; t < n_; t += rows_per_tile) {
    const int64_t rows = std::min(rows_per_tile, n_ - t);
    const quant::QuantMatrix w{type_, blocks_, n_, k_, row_bytes_, packed_};
    const auto start = std::chrono::steady_clock::now();
    OmpParallelFor(rows, 16, [&](int64_t b, int64_t e) {
      quant::DequantRows(w, t + b, t + e, tile + b * k_);
    });
    g_dequant_nanos.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count(),
                              std::memory_order_relaxed);
    const float* bias = bias_.empty() ? nullptr : bias_.data() + t;
    if (rows == n_) {  // one tile: the GEMM writes y itself, epilogue fused
      const absl::Status s =
          DnnlLinear::PlainGemm(x, m, k_, tile, rows, bias, y, n_, epilogue, aux);
      if (!s.ok()) return s;
      continue;
    }
    // Several tiles: oneDNN's fast kernels want a dense output, so each tile's product goes to
    // a dense buffer and is stored into its columns of y with the epilogue.
    thread_local std::vector<float> out_buffer;
    out_buffer.resize(static_cast<size_t>(m * rows));
    float* const out = out_buffer.data();
    const absl::Status s = DnnlLinear::PlainGemm(x, m, k_, tile, rows, bias, out, rows,
                                                 DnnlLinear::Epilogue::kStore, nullptr);
    if (!s.ok()) return s;
    const quant::Epilogue e = ToQuant(epilogue);
    const CpuIsa isa = ActiveCpuIsa();
    OmpParallelFor(m, 1, [&](int64_t b, int64_t end) {
      for (int64_t i = b; i < end; ++i) {
        float* yi = y + i * n_ + t;
        const float* oi = out + i * rows;
        if (e == quant::Epilogue::kStore) {
          std::memcpy(yi, oi, rows * sizeof(float));
          continue;
        }
        const float* ai = aux != nullptr ? aux + i * n_ + t : nullptr;
        if (e == quant::Epilogue::kSiluMul) {
          // out and y index the same element at j: y[j] = silu(out[j])·aux[j].
          cpu::SiluMulOnPath(isa, oi, ai, 0, rows, yi);
          continue;
        }
        for (int64_t j = 0; j < rows; ++j) {
          yi[j] = quant::internal::ApplyEpilogue(e, oi[j], yi[j], ai != nullptr ? ai[j] : 0.f);
        }
      }
    });
  }
  return absl::OkStatus();
}

absl::Status QuantLinear::DequantizeRows(const int32_t* ids, int64_t count, float* out) const {
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= n_) {
      return absl::InvalidArgumentError(
          absl::StrCat("row id ", ids[i], " outside the table's ", n_, " rows"));
    }
    quant::DequantRows(quant::QuantMatrix{type_, blocks_, n_, k_, row_bytes_, packed_}, ids[i],
                       ids[i] + 1, out + i * k_);
  }
  return absl::OkStatus();
}

}  // namespace tandem
