// The quantised linear layers (model/cpu/quant_gemv.h, quant_linear.h) against the reference they
// must equal: dequantise W with model/format/dequant.cc, then y = x·Wᵀ + b in double. Every
// supported type, odd shapes (n not a multiple of the kernel's 32-row tile, K not a multiple of
// 32 for the one-element-block types F16/BF16, several blocks and super-blocks otherwise; for
// Q4_0/Q4_1 every mix of the packed layout's 4-, 2- and 1-block lane groups: 1, 3 = 2+1,
// 5 = 4+1, 7 = 4+2+1 and 18 = 4·4+2 blocks; the 5-bit types Q5_0, Q5_1, Q5_K too, packed Q5_0/
// Q5_1 with 3-block groups whole and ending in 1 or 2 blocks: 1, 3, 5, 7, 18 blocks; K-quants
// at 1, 2 and 3 super-blocks),
// M = 1..33, each epilogue, and each ISA path this CPU has (portable, AVX2, AVX-512).
//
// Tolerance: f32 products of the same exact weights, summed in another order:
// |y − ref| <= 1e-5 · Σ_j |w_j·x_j| (+ what the epilogue scales it by). A wrong nibble order,
// scale index or block stride is off by the size of a weight, orders of magnitude more.
#include "model/cpu/quant_linear.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "attention/cpu/cpu_isa.h"
#include "common/parallel_for.h"
#include "gtest/gtest.h"
#include "model/cpu/quant_gemv.h"
#include "model/cpu/quant_panel_gemm.h"
#include "model/format/dequant.h"
#include "model/format/half.h"

namespace tandem {
namespace {

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void PutF16(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

// n rows of k elements of `type`: random quants, sane f16 scales (random bytes there could be
// NaN or huge), random F16/BF16 values.
std::vector<uint8_t> RandomRows(GgmlType type, int64_t n, int64_t k, uint64_t seed) {
  const int64_t row_bytes = *GgmlByteSize(type, k);
  std::vector<uint8_t> out(n * row_bytes);
  std::mt19937_64 rng(seed);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> u(0.001f, 0.05f), v(-1.f, 1.f);
  const GgmlTypeInfo& info = GgmlTypeTraits(type);
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* row = out.data() + r * row_bytes;
    for (int64_t b = 0; b < k / info.block_size; ++b) {
      uint8_t* blk = row + b * info.block_bytes;
      switch (type) {
        case GgmlType::kQ8_0:
        case GgmlType::kQ4_0:
        case GgmlType::kQ5_0:
          PutF16(blk, u(rng) * (rng() % 2 ? 1 : -1));
          break;
        case GgmlType::kQ4_1:
        case GgmlType::kQ5_1:
        case GgmlType::kQ4_K:
        case GgmlType::kQ5_K:
          PutF16(blk, u(rng));
          PutF16(blk + 2, v(rng) * 0.1f);
          break;
        case GgmlType::kQ6_K:
          PutF16(blk + 208, u(rng) * 0.1f);
          break;
        case GgmlType::kF16:
          PutF16(blk, v(rng));
          break;
        case GgmlType::kBF16: {
          const uint16_t h = F32ToBf16(v(rng));
          std::memcpy(blk, &h, 2);
          break;
        }
        default:
          break;
      }
    }
  }
  return out;
}

struct Case {
  GgmlType type;
  int64_t n, k;
};

std::vector<Case> Cases() {
  return {
      {GgmlType::kQ8_0, 37, 96},  {GgmlType::kQ4_0, 45, 160}, {GgmlType::kQ4_1, 33, 96},
      {GgmlType::kQ4_1, 70, 32},  {GgmlType::kQ4_1, 37, 224}, {GgmlType::kQ4_0, 19, 576},
      {GgmlType::kQ4_K, 35, 512}, {GgmlType::kQ6_K, 39, 512}, {GgmlType::kQ6_K, 5, 256},
      {GgmlType::kF16, 37, 77},   {GgmlType::kF16, 9, 64},    {GgmlType::kBF16, 41, 45},
      {GgmlType::kBF16, 3, 7},    {GgmlType::kQ5_0, 35, 96},  {GgmlType::kQ5_0, 3, 32},
      {GgmlType::kQ5_1, 37, 160}, {GgmlType::kQ5_K, 33, 512}, {GgmlType::kQ5_K, 4, 256},
      {GgmlType::kQ4_K, 3, 256},  {GgmlType::kQ4_K, 33, 768}, {GgmlType::kQ6_K, 33, 768},
      {GgmlType::kQ5_0, 19, 576}, {GgmlType::kQ5_1, 9, 224},  {GgmlType::kQ5_1, 5, 32},
      {GgmlType::kQ5_K, 9, 768},
  };
}

std::vector<CpuIsa> Paths() {
  std::vector<CpuIsa> out = {CpuIsa::kPortable};
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (CpuSupports(isa)) out.push_back(isa);
  }
  return out;
}

// The matrix in the file's layout, and for Q4_0/Q4_1/Q8_0/Q5_0/Q5_1 also in the kernels' packed
// layout
// (quant::PackRows; the packed copies live as long as the process: small test matrices).
std::vector<quant::QuantMatrix> Layouts(const Case& c, const std::vector<uint8_t>& rows) {
  std::vector<quant::QuantMatrix> out = {
      {c.type, rows.data(), c.n, c.k, *GgmlByteSize(c.type, c.k), false}};
  if (quant::PackSupports(c.type)) {
    static auto* keep = new std::vector<std::vector<uint8_t>>();
    keep->push_back(quant::PackRows(c.type, rows.data(), c.n, c.k));
    out.push_back(
        {c.type, keep->back().data(), c.n, c.k, quant::PackedRowBytes(c.type, c.k), true});
  }
  return out;
}

// Pins the smallest batch the vector paths give to the panel kernels (quant_panel_gemm.h) for
// one scope: 1 sends every batch there, kNever none.
class PanelMinRowsScope {
 public:
  static constexpr int64_t kNever = int64_t{1} << 40;
  explicit PanelMinRowsScope(int64_t m) : saved_(quant::internal::PanelMinRows()) {
    quant::internal::SetPanelMinRows(m);
  }
  ~PanelMinRowsScope() { quant::internal::SetPanelMinRows(saved_); }
  PanelMinRowsScope(const PanelMinRowsScope&) = delete;
  PanelMinRowsScope& operator=(const PanelMinRowsScope&) = delete;

 private:
  int64_t saved_;
};

double Silu(double v) { return v / (1.0 + std::exp(-v)); }

// Checks y against the double reference for every element; returns the number of mismatches.
int CheckAgainstReference(const std::vector<float>& w, const Case& c, int64_t m,
                          const std::vector<float>& x, const float* bias, quant::Epilogue e,
                          const std::vector<float>& y0, const std::vector<float>& aux,
                          const std::vector<float>& y) {
  int bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double v = 0, mag = 0;
      for (int64_t t = 0; t < c.k; ++t) {
        const double p = static_cast<double>(w[j * c.k + t]) * x[i * c.k + t];
        v += p;
        mag += std::fabs(p);
      }
      if (bias != nullptr) {
        v += bias[j];
        mag += std::fabs(bias[j]);
      }
      const int64_t at = i * c.n + j;
      double ref = v, tol = 1e-5 * mag + 1e-6;
      if (e == quant::Epilogue::kAccumulate) {
        ref = y0[at] + v;
        tol += 1e-6 * std::fabs(y0[at]);
      } else if (e == quant::Epilogue::kSiluMul) {
        ref = Silu(v) * aux[at];
        tol = tol * (1.0 + std::fabs(aux[at])) * 1.2 + 1e-6 * std::fabs(ref);
      }
      if (std::fabs(y[at] - ref) > tol && bad++ < 3) {
        ADD_FAILURE() << "y[" << i << "][" << j << "] = " << y[at] << ", reference " << ref
                      << " (tolerance " << tol << ")";
      }
    }
  }
  return bad;
}

TEST(QuantGemvTest, EveryPathTypeAndEpilogueMatchesTheDequantisedReference) {
  // Every batch size through the GEMV kernels, then through the panel kernels.
  for (int64_t panel_min_rows : {PanelMinRowsScope::kNever, int64_t{1}}) {
    const PanelMinRowsScope panel(panel_min_rows);
    for (const Case& c : Cases()) {
      const std::vector<uint8_t> rows = RandomRows(c.type, c.n, c.k, c.n * 31 + c.k);
      std::vector<float> w(c.n * c.k);
      ASSERT_TRUE(Dequantize(c.type, absl::MakeConstSpan(rows), absl::MakeSpan(w)).ok());
      const std::vector<float> bias = Random(c.n, 3);
      for (const quant::QuantMatrix& wm : Layouts(c, rows)) {
        for (CpuIsa isa : Paths()) {
          for (int64_t m = 1; m <= 33; ++m) {
            const std::vector<float> x = Random(m * c.k, m);
            const std::vector<float> aux = Random(m * c.n, 7, 2.f);
            const std::vector<float> y0 = Random(m * c.n, 5);
            for (quant::Epilogue e : {quant::Epilogue::kStore, quant::Epilogue::kAccumulate,
                                      quant::Epilogue::kSiluMul}) {
              SCOPED_TRACE(std::string(GgmlTypeName(c.type)) + " n=" + std::to_string(c.n) +
                           " k=" + std::to_string(c.k) + " m=" + std::to_string(m) +
                           " path=" + CpuIsaName(isa) + (wm.packed ? " packed" : "") +
                           " epilogue=" + std::to_string(static_cast<int>(e)) +
                           (panel_min_rows == 1 ? " panel" : " gemv"));
              std::vector<float> y = y0;
              quant::GemvArgs a;
              a.w = wm;
              a.x = x.data();
              a.m = m;
              a.bias = m % 2 ? bias.data() : nullptr;
              a.y = y.data();
              a.epilogue = e;
              a.aux = aux.data();
              // Two pieces, split inside the kernel's 32-row tile, as two threads would.
              const int64_t cut = c.n / 3;
              quant::GemvOnPath(isa, a, 0, cut);
              quant::GemvOnPath(isa, a, cut, c.n);
              ASSERT_EQ(CheckAgainstReference(w, c, m, x, a.bias, e, y0, aux, y), 0);
            }
          }
        }
      }
    }
  }
}

// Every GEMV kernel (the panel kernels below) sums each output in an order set by its own weight
// row and activation row alone — the AVX2 path's factored ones (packed Q4_0/Q4_1/Q8_0,
// quant_gemv_avx2_factored.h; Q4_K, Q5_K, Q6_K, packed Q5_0/Q5_1: quant_gemv_avx2_q4k.h, _q5k.h,
// _q6k.h, _q5.h), the AVX-512 K-quant ones (quant_gemv_avx512_kquants.h) and the AVX-512 table
// kernels, including a tile's last rows (n = 9, 19, 35, 37: not multiples of the 4-row blocks) — so
// an activation row gives the same bits whether it is computed alone (m = 1) or inside a batch of
// 13 (blocks of 8 or 4, 2 and 1 activation rows), and with the activations' magnitudes spread over
// 2^±60 (the factored kernels' power-of-two prescaling of x must stay exact).
TEST(QuantGemvTest, VectorKernelsGiveEveryRowTheSameBitsAloneAndInABatch) {
  const PanelMinRowsScope gemv_only(PanelMinRowsScope::kNever);
  const int64_t m = 13;
  const Case cases[] = {
      {GgmlType::kQ4_1, 37, 224}, {GgmlType::kQ4_0, 19, 576}, {GgmlType::kQ4_1, 9, 96},
      {GgmlType::kQ8_0, 37, 96},  {GgmlType::kQ4_K, 35, 768}, {GgmlType::kQ6_K, 35, 768},
      {GgmlType::kQ6_K, 5, 256},  {GgmlType::kQ5_0, 19, 576}, {GgmlType::kQ5_1, 37, 224},
      {GgmlType::kQ5_0, 9, 160},  {GgmlType::kQ5_K, 33, 768}};
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    for (const Case& c : cases) {
      if (!CpuSupports(isa)) continue;
      SCOPED_TRACE(std::string(GgmlTypeName(c.type)) + " k=" + std::to_string(c.k) +
                   " path=" + CpuIsaName(isa));
      const std::vector<uint8_t> rows = RandomRows(c.type, c.n, c.k, c.k + 1);
      const quant::QuantMatrix wm = Layouts(c, rows).back();  // packed where the type packs
      ASSERT_EQ(wm.packed, quant::PackSupports(c.type));
      std::vector<float> x = Random(m * c.k, 21);
      for (size_t t = 0; t < x.size(); ++t) x[t] = std::ldexp(x[t], static_cast<int>(t % 121) - 60);
      std::vector<float> batch(m * c.n);
      quant::GemvArgs a;
      a.w = wm;
      a.x = x.data();
      a.m = m;
      a.y = batch.data();
      quant::GemvOnPath(isa, a, 0, c.n);
      std::vector<float> w(c.n * c.k);
      ASSERT_TRUE(Dequantize(c.type, absl::MakeConstSpan(rows), absl::MakeSpan(w)).ok());
      ASSERT_EQ(
          CheckAgainstReference(w, c, m, x, nullptr, quant::Epilogue::kStore, batch, batch, batch),
          0);
      for (int64_t i = 0; i < m; ++i) {
        std::vector<float> alone(c.n);
        a.x = x.data() + i * c.k;
        a.m = 1;
        a.y = alone.data();
        quant::GemvOnPath(isa, a, 0, c.n);
        for (int64_t j = 0; j < c.n; ++j) {
          ASSERT_EQ(alone[j], batch[i * c.n + j]) << "row " << i << " output " << j;
        }
      }
    }
  }
}

// The panel kernels (quant_panel_gemm.h) sum each output in an order set by its own weight row
// and activation row alone, too: a row computed alone (m = 1) has the same bits as inside batches
// of 6, 8, 13 and 16 (different blocks of activation rows: 3 + 3, 4 + 4, 6 + 4 + 3, …), with the
// outputs split at a point inside a panel, as two threads would, and for every type (the weights
// come from each type's own dequantiser). The default threshold sends decode batches of
// kDefaultPanelMinRows and more here, so a sequence gets the same bits in any such batch.
TEST(QuantGemvTest, PanelKernelsGiveEveryRowTheSameBitsAloneAndInAnyBatch) {
  const PanelMinRowsScope panel_always(1);
  const Case cases[] = {{GgmlType::kQ4_1, 37, 224}, {GgmlType::kQ4_0, 19, 576},
                        {GgmlType::kQ8_0, 37, 96},  {GgmlType::kQ4_K, 35, 768},
                        {GgmlType::kQ6_K, 29, 512}, {GgmlType::kQ5_0, 19, 576},
                        {GgmlType::kQ5_1, 37, 224}, {GgmlType::kQ5_K, 33, 768},
                        {GgmlType::kF16, 26, 64},   {GgmlType::kBF16, 14, 96}};
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!CpuSupports(isa)) continue;
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(GgmlTypeName(c.type)) + " k=" + std::to_string(c.k) +
                   " path=" + CpuIsaName(isa));
      const std::vector<uint8_t> rows = RandomRows(c.type, c.n, c.k, c.k + 7);
      const quant::QuantMatrix wm = Layouts(c, rows).back();  // packed where the type packs
      std::vector<float> w(c.n * c.k);
      ASSERT_TRUE(Dequantize(c.type, absl::MakeConstSpan(rows), absl::MakeSpan(w)).ok());
      const int64_t max_m = 16;
      std::vector<float> x = Random(max_m * c.k, 23);
      for (size_t t = 0; t < x.size(); ++t) x[t] = std::ldexp(x[t], static_cast<int>(t % 121) - 60);
      const std::vector<float> bias = Random(c.n, 5);
      auto run = [&](const float* xs, int64_t m, float* y) {
        quant::GemvArgs a;
        a.w = wm;
        a.x = xs;
        a.m = m;
        a.bias = bias.data();
        a.y = y;
        const int64_t cut = c.n / 3;
        quant::GemvOnPath(isa, a, 0, cut);
        quant::GemvOnPath(isa, a, cut, c.n);
      };
      std::vector<float> alone(max_m * c.n);
      for (int64_t i = 0; i < max_m; ++i) run(x.data() + i * c.k, 1, alone.data() + i * c.n);
      ASSERT_EQ(CheckAgainstReference(w, c, max_m, x, bias.data(), quant::Epilogue::kStore, alone,
                                      alone, alone),
                0);
      for (int64_t m : {6, 8, 13, 16}) {
        std::vector<float> batch(m * c.n);
        run(x.data() + (max_m - m) * c.k, m, batch.data());  // the batch's last m rows
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < c.n; ++j) {
            ASSERT_EQ(batch[i * c.n + j], alone[(max_m - m + i) * c.n + j])
                << "m=" << m << " row " << i << " output " << j;
          }
        }
      }
    }
  }
}

// Every type the GEMV supports has its own kernel on both vector paths (GemvOnPath falls back
// to the portable code for a type a path lacks, which the reference test alone would not see).
TEST(QuantGemvTest, EveryTypeHasVectorKernels) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(GgmlTypeName(c.type));
    EXPECT_NE(quant::internal::Avx2Gemv(c.type, false), nullptr);
    EXPECT_NE(quant::internal::Avx512Gemv(c.type, false), nullptr);
    EXPECT_NE(quant::internal::Avx2Dequant(c.type, false), nullptr);
    EXPECT_NE(quant::internal::Avx512Dequant(c.type, false), nullptr);
    if (quant::PackSupports(c.type)) {
      EXPECT_NE(quant::internal::Avx2Gemv(c.type, true), nullptr);
      EXPECT_NE(quant::internal::Avx512Gemv(c.type, true), nullptr);
      EXPECT_NE(quant::internal::Avx2Dequant(c.type, true), nullptr);
      EXPECT_NE(quant::internal::Avx512Dequant(c.type, true), nullptr);
    }
  }
}

// The vectorised dequantisation (the large-batch path's tiles) gives dequant.cc's values exactly
// (compared as floats: Q6_K's d·(S·q) may be −0 where dequant.cc's integer S·q gives +0).
TEST(QuantGemvTest, DequantRowsOnEveryPathIsBitIdenticalToDequantize) {
  for (const Case& c : Cases()) {
    const std::vector<uint8_t> rows = RandomRows(c.type, c.n, c.k, c.n + 5);
    std::vector<float> want(c.n * c.k);
    ASSERT_TRUE(Dequantize(c.type, absl::MakeConstSpan(rows), absl::MakeSpan(want)).ok());
    for (const quant::QuantMatrix& w : Layouts(c, rows)) {
      for (CpuIsa isa : Paths()) {
        SCOPED_TRACE(std::string(GgmlTypeName(c.type)) + " path=" + CpuIsaName(isa) +
                     (w.packed ? " packed" : ""));
        std::vector<float> got(c.n * c.k, -1.f);
        const int64_t cut = c.n / 2;
        quant::DequantRowsOnPath(isa, w, 0, cut, got.data());
        quant::DequantRowsOnPath(isa, w, cut, c.n, got.data() + cut * c.k);
        for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
      }
    }
  }
}

// Same weights, same x: every path computes the same exactly-dequantised weights, so the paths
// agree to f32 summation noise (much tighter than the reference tolerance's scale).
TEST(QuantGemvTest, PathsAgreeWithEachOther) {
  const Case c{GgmlType::kQ4_1, 64, 576};
  const std::vector<uint8_t> rows = RandomRows(c.type, c.n, c.k, 11);
  const std::vector<float> x = Random(4 * c.k, 12);
  std::vector<std::vector<float>> ys;
  for (CpuIsa isa : Paths()) {
    std::vector<float> y(4 * c.n);
    quant::GemvArgs a;
    a.w = quant::QuantMatrix{c.type, rows.data(), c.n, c.k, *GgmlByteSize(c.type, c.k)};
    a.x = x.data();
    a.m = 4;
    a.y = y.data();
    quant::GemvOnPath(isa, a, 0, c.n);
    ys.push_back(y);
  }
  for (size_t p = 1; p < ys.size(); ++p) {
    for (size_t i = 0; i < ys[0].size(); ++i) {
      ASSERT_NEAR(ys[p][i], ys[0][i], 1e-4f * (1.f + std::fabs(ys[0][i]))) << "element " << i;
    }
  }
}

// QuantLinear end to end on both of its paths (the GEMV below the crossover, dequantised tiles
// through oneDNN above it, including a matrix of several tiles), on two threads.
TEST(QuantLinearTest, BothPathsMatchTheReferenceForEveryEpilogue) {
  SetThreadsForThisThread(2);
  const int64_t saved = QuantLinear::SmallBatchLimit();
  for (const Case& c : std::vector<Case>{{GgmlType::kQ4_1, 70, 96},
                                         {GgmlType::kQ4_K, 5000, 256},
                                         {GgmlType::kQ6_K, 33, 256},
                                         {GgmlType::kQ5_0, 40, 576},
                                         {GgmlType::kQ5_1, 36, 224},
                                         {GgmlType::kQ6_K, 40, 1536},
                                         {GgmlType::kQ5_K, 35, 256},
                                         {GgmlType::kBF16, 37, 45}}) {
    const std::vector<uint8_t> rows = RandomRows(c.type, c.n, c.k, 17);
    std::vector<float> w(c.n * c.k);
    ASSERT_TRUE(Dequantize(c.type, absl::MakeConstSpan(rows), absl::MakeSpan(w)).ok());
    const std::vector<float> bias = Random(c.n, 4);
    absl::StatusOr<std::unique_ptr<QuantLinear>> op =
        QuantLinear::Create(c.type, rows.data(), c.n, c.k, bias.data());
    ASSERT_TRUE(op.ok()) << op.status();
    const int64_t row_bytes = quant::PackSupports(c.type) ? quant::PackedRowBytes(c.type, c.k)
                                                          : *GgmlByteSize(c.type, c.k);
    EXPECT_EQ((*op)->resident_bytes(),
              c.n * row_bytes + static_cast<int64_t>(bias.size() * sizeof(float)));
    for (int64_t limit : {int64_t{64}, int64_t{0}}) {
      QuantLinear::SetSmallBatchLimit(limit);
      for (int64_t m : {1, 7, 40}) {
        const std::vector<float> x = Random(m * c.k, m + 100);
        const std::vector<float> aux = Random(m * c.n, 8, 2.f);
        const std::vector<float> y0 = Random(m * c.n, 9);
        for (DnnlLinear::Epilogue e :
             {DnnlLinear::Epilogue::kStore, DnnlLinear::Epilogue::kAccumulate,
              DnnlLinear::Epilogue::kSiluMul}) {
          SCOPED_TRACE(std::string(GgmlTypeName(c.type)) + " n=" + std::to_string(c.n) +
                       " m=" + std::to_string(m) + " limit=" + std::to_string(limit) +
                       " epilogue=" + std::to_string(static_cast<int>(e)));
          std::vector<float> y = y0;
          ASSERT_TRUE((*op)->Forward(x.data(), m, y.data(), e, aux.data()).ok());
          const quant::Epilogue qe = e == DnnlLinear::Epilogue::kStore ? quant::Epilogue::kStore
                                     : e == DnnlLinear::Epilogue::kAccumulate
                                         ? quant::Epilogue::kAccumulate
                                         : quant::Epilogue::kSiluMul;
          ASSERT_EQ(CheckAgainstReference(w, c, m, x, bias.data(), qe, y0, aux, y), 0);
        }
      }
    }
  }
  QuantLinear::SetSmallBatchLimit(saved);
}

// ForwardMany (Q, K, V in one pass) and ForwardGated (up, then SiLU(gate)·up per tile) split
// the same 32-row tiles over the threads as separate Forward calls, so they give the same bits.
TEST(QuantLinearTest, ForwardManyAndGatedEqualSeparateCalls) {
  SetThreadsForThisThread(2);
  const int64_t k = 224;
  std::vector<std::unique_ptr<QuantLinear>> ops;
  for (auto [type, n] : std::vector<std::pair<GgmlType, int64_t>>{{GgmlType::kQ4_1, 70},
                                                                  {GgmlType::kQ8_0, 33},
                                                                  {GgmlType::kQ4_0, 96},
                                                                  {GgmlType::kQ4_1, 96}}) {
    const std::vector<uint8_t> rows = RandomRows(type, n, k, n + 3);
    const std::vector<float> bias = Random(n, 4);
    absl::StatusOr<std::unique_ptr<QuantLinear>> op =
        QuantLinear::Create(type, rows.data(), n, k, n == 33 ? bias.data() : nullptr);
    ASSERT_TRUE(op.ok()) << op.status();
    ops.push_back(std::move(op).value());
  }
  for (int64_t m : {1, 5, 16}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    const std::vector<float> x = Random(m * k, m + 200);
    std::vector<std::vector<float>> want(3), got(3);
    std::vector<QuantLinear::Job> jobs;
    for (int j = 0; j < 3; ++j) {
      want[j].assign(m * ops[j]->n(), 0.f);
      got[j].assign(m * ops[j]->n(), -1.f);
      ASSERT_TRUE(ops[j]->Forward(x.data(), m, want[j].data()).ok());
      jobs.push_back(QuantLinear::Job{ops[j].get(), got[j].data()});
    }
    ASSERT_TRUE(QuantLinear::ForwardMany(jobs, x.data(), m).ok());
    for (int j = 0; j < 3; ++j) ASSERT_EQ(got[j], want[j]) << "matrix " << j;

    const QuantLinear& gate = *ops[2];
    const QuantLinear& up_op = *ops[3];
    std::vector<float> up_want(m * 96), out_want(m * 96), up_got(m * 96), out_got(m * 96);
    ASSERT_TRUE(up_op.Forward(x.data(), m, up_want.data()).ok());
    ASSERT_TRUE(
        gate.Forward(x.data(), m, out_want.data(), DnnlLinear::Epilogue::kSiluMul, up_want.data())
            .ok());
    ASSERT_TRUE(
        QuantLinear::ForwardGated(gate, up_op, x.data(), m, up_got.data(), out_got.data()).ok());
    EXPECT_EQ(up_got, up_want);
    EXPECT_EQ(out_got, out_want);
  }
  std::vector<float> y(1000);
  EXPECT_EQ(
      QuantLinear::ForwardGated(*ops[2], *ops[0], Random(k, 1).data(), 1, y.data(), y.data() + 500)
          .code(),
      absl::StatusCode::kInvalidArgument);  // n 96 vs 70
  EXPECT_EQ(QuantLinear::ForwardMany({QuantLinear::Job{ops[0].get(), y.data()}},
                                     Random(k * 100, 1).data(), 100)
                .code(),
            absl::StatusCode::kInvalidArgument);  // above the GEMV limit
}

TEST(QuantLinearTest, DequantizeRowsIsTheDequantisedTableAndChecksIds) {
  const Case c{GgmlType::kQ8_0, 50, 64};
  const std::vector<uint8_t> rows = RandomRows(c.type, c.n, c.k, 21);
  std::vector<float> w(c.n * c.k);
  ASSERT_TRUE(Dequantize(c.type, absl::MakeConstSpan(rows), absl::MakeSpan(w)).ok());
  absl::StatusOr<std::unique_ptr<QuantLinear>> op =
      QuantLinear::Create(c.type, rows.data(), c.n, c.k, nullptr);
  ASSERT_TRUE(op.ok()) << op.status();
  const std::vector<int32_t> ids = {49, 0, 7, 7};
  std::vector<float> out(ids.size() * c.k);
  ASSERT_TRUE((*op)->DequantizeRows(ids.data(), 4, out.data()).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t t = 0; t < c.k; ++t) ASSERT_EQ(out[i * c.k + t], w[ids[i] * c.k + t]);
  }
  const int32_t bad = 50;
  EXPECT_EQ((*op)->DequantizeRows(&bad, 1, out.data()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(QuantLinearTest, CreateRejectsTypesWithoutKernelsAndPartialBlocks) {
  const std::vector<uint8_t> rows(1024);
  EXPECT_EQ(QuantLinear::Create(GgmlType::kQ2_K, rows.data(), 1, 256, nullptr).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(QuantLinear::Create(GgmlType::kQ4_0, rows.data(), 2, 40, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
