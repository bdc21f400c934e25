// FlashInferCudaTest: a CudaTest (skips with the reason without a usable GPU) that also skips,
// visibly, when FlashInfer was not built into the binary — its headers were absent at configure
// time (deploy/fetch-flashinfer.sh; docs/gpu.md#flashinfer). Subclasses that need more set-up
// call FlashInferCudaTest::SetUp() first and return if IsSkipped().
#pragma once

#include "attention/cuda/flashinfer/flashinfer_attention.h"
#include "gtest/gtest.h"
#include "tests/attention/cuda/cuda_test_util.h"

namespace tandem::testing {

class FlashInferCudaTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    if (!gpu::FlashInferBuilt()) {
      GTEST_SKIP() << "FlashInfer not built into this binary (deploy/fetch-flashinfer.sh)";
    }
  }
};

}  // namespace tandem::testing
