// gemm_choice_bench: why oneDNN (docs/design.md#model-and-compute). For the shapes of
// the real model's projections it times y[m][n] = x[m][k]·Wᵀ with
//   (a) Tandem's DnnlLinear (oneDNN matmul, weights packed once, primitives cached per m), and
//   (b) OpenBLAS cblas_sgemm on the same row-major weights (built only when OpenBLAS is found),
// cycling over enough distinct weight matrices that they stream from DRAM as in a real forward.
// Prints GFLOP/s and weight GB/s per (shape, m); last line RESULT onednn_vs_openblas_decode=<x>
// (oneDNN ÷ OpenBLAS weight GB/s at m = 1), or onednn_decode_weight_gbps when OpenBLAS is absent.
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/parallel_for.h"
#include "model/cpu/dnnl_linear.h"

#if defined(TANDEM_BENCH_OPENBLAS)
#include <cblas.h>
#endif

ABSL_FLAG(int32_t, matrices, 48, "distinct weight matrices per shape (> L3 in total)");
ABSL_FLAG(int32_t, iters, 3, "passes over the matrices per measurement");

namespace {

struct Shape {
  const char* name;
  int64_t n, k;
};

double Seconds(const std::function<void()>& f, int iters) {
  f();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int mats = absl::GetFlag(FLAGS_matrices), iters = absl::GetFlag(FLAGS_iters);
  const Shape shapes[] = {{"ffn gate/up 1536x576", 1536, 576},
                          {"ffn down 576x1536", 576, 1536},
                          {"attn q/o 576x576", 576, 576}};
  std::printf("threads %d; %d matrices per shape\n", tandem::ThreadsForThisThread(), mats);
  std::printf("%-22s %5s %12s %12s %12s %12s\n", "shape", "m", "oneDNN GF/s", "oneDNN GB/s",
              "OpenBLAS GF/s", "OpenBLAS GB/s");
  double dnnl_m1 = 0, blas_m1 = 0;
  for (const Shape& s : shapes) {
    std::vector<std::vector<float>> w(mats, std::vector<float>(s.n * s.k));
    for (int i = 0; i < mats; ++i) {
      for (size_t j = 0; j < w[i].size(); ++j)
        w[i][j] = static_cast<float>((i * 7 + j) % 13) * 0.01f;
    }
    std::vector<std::unique_ptr<tandem::DnnlLinear>> ops;
    for (int i = 0; i < mats; ++i)
      ops.push_back(std::move(tandem::DnnlLinear::Create(w[i].data(), s.n, s.k, nullptr)).value());
    for (int64_t m : {1, 16, 512}) {
      std::vector<float> x(m * s.k, 0.5f), y(m * s.n);
      const double flops = 2.0 * m * s.n * s.k * mats, bytes = 4.0 * s.n * s.k * mats;
      const double td = Seconds(
          [&] {
            for (auto& op : ops) (void)op->Forward(x.data(), m, y.data());
          },
          iters);
      double tb = 0;
#if defined(TANDEM_BENCH_OPENBLAS)
      openblas_set_num_threads(tandem::ThreadsForThisThread());
      tb = Seconds(
          [&] {
            for (int i = 0; i < mats; ++i) {
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, s.n, s.k, 1.f, x.data(), s.k,
                          w[i].data(), s.k, 0.f, y.data(), s.n);
            }
          },
          iters);
#endif
      std::printf("%-22s %5ld %12.1f %12.2f %12.1f %12.2f\n", s.name, static_cast<long>(m),
                  flops / td / 1e9, bytes / td / 1e9, tb > 0 ? flops / tb / 1e9 : 0.0,
                  tb > 0 ? bytes / tb / 1e9 : 0.0);
      if (m == 1) {
        dnnl_m1 += bytes / td / 1e9;
        if (tb > 0) blas_m1 += bytes / tb / 1e9;
      }
    }
  }
  if (blas_m1 > 0) {
    std::printf("RESULT onednn_vs_openblas_decode=%.2f\n", dnnl_m1 / blas_m1);
  } else {
    std::printf("RESULT onednn_decode_weight_gbps=%.2f\n", dnnl_m1 / 3);
  }
  return 0;
}
