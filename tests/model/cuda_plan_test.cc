// The CUDA backend's pure planning, on any machine: options parsing, the cuBLASLt epilogue /
// layout / workspace plan of a linear layer, decode-graph batch buckets, keys, and the bounded
// graph cache (eviction order, byte bound, invalidation).
#include <set>

#include "gtest/gtest.h"
#include "model/cuda/cuda_backend_options.h"
#include "model/cuda/decode_graph_plan.h"
#include "model/cuda/gemm_plan.h"

namespace tandem::gpu {
namespace {

TEST(CudaBackendOptionsTest, DefaultsAreTheOldPath) {
  absl::StatusOr<CudaBackendOptions> o = ParseCudaBackendOptions(nullptr, nullptr);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->activations, CudaActivations::kF32);
  EXPECT_FALSE(o->graphs);
  o = ParseCudaBackendOptions("", "");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->activations, CudaActivations::kF32);
  EXPECT_FALSE(o->graphs);
}

TEST(CudaBackendOptionsTest, ParsesTheDocumentedValues) {
  absl::StatusOr<CudaBackendOptions> o = ParseCudaBackendOptions("bf16", "on");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->activations, CudaActivations::kBF16);
  EXPECT_TRUE(o->graphs);
  EXPECT_EQ(CudaActivationsName(o->activations), "bf16");
  o = ParseCudaBackendOptions("f32", "off");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->activations, CudaActivations::kF32);
  EXPECT_FALSE(o->graphs);
}

TEST(CudaBackendOptionsTest, RejectsOtherValuesNamingTheVariable) {
  absl::StatusOr<CudaBackendOptions> o = ParseCudaBackendOptions("fp16", nullptr);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("TANDEM_CUDA_ACTIVATIONS"), std::string::npos);
  EXPECT_NE(o.status().message().find("fp16"), std::string::npos);
  o = ParseCudaBackendOptions(nullptr, "1");
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("TANDEM_CUDA_GRAPHS"), std::string::npos);
}

GemmRequest Req(int64_t m, int64_t n, int64_t k) {
  GemmRequest r;
  r.m = m;
  r.n = n;
  r.k = k;
  return r;
}

TEST(GemmPlanTest, ColumnMajorLayoutOfARowMajorLinear) {
  GemmRequest r = Req(3, 4096, 2048);
  r.out = GemmDType::kBF16;
  absl::StatusOr<GemmPlan> p = PlanGemm(r);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->lt);
  EXPECT_EQ(p->rows, 4096);  // D = yᵀ: n rows
  EXPECT_EQ(p->cols, 3);     // m columns
  EXPECT_EQ(p->depth, 2048);
  EXPECT_EQ(p->lda, 2048);
  EXPECT_EQ(p->ldb, 2048);
  EXPECT_EQ(p->ldd, 4096);
  EXPECT_EQ(p->d_type, GemmDType::kBF16);
  EXPECT_EQ(p->epilogue, GemmEpilogue::kDefault);
  EXPECT_EQ(p->beta, 0.f);
  EXPECT_TRUE(p->why.empty());
}

TEST(GemmPlanTest, BiasFusesAsAnEpilogueInTheOutputDtype) {
  // Qwen2's QKV projections carry a bias.
  for (GemmDType out : {GemmDType::kF32, GemmDType::kBF16}) {
    GemmRequest r = Req(1, 896, 896);
    r.out = out;
    r.bias = true;
    absl::StatusOr<GemmPlan> p = PlanGemm(r);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->lt);
    EXPECT_EQ(p->epilogue, GemmEpilogue::kBias);
    EXPECT_FALSE(p->bias_kernel);
    EXPECT_EQ(p->bias_type, out);
  }
}

TEST(GemmPlanTest, ResidualAddIsBetaOne) {
  GemmRequest r = Req(8, 2048, 8192);
  r.accumulate = true;
  r.out = GemmDType::kBF16;
  absl::StatusOr<GemmPlan> p = PlanGemm(r);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->lt);
  EXPECT_EQ(p->beta, 1.f);
  EXPECT_EQ(p->epilogue, GemmEpilogue::kDefault);
}

TEST(GemmPlanTest, ActivationEpilogues) {
  struct Case {
    GemmActivation act;
    bool bias;
    GemmEpilogue epilogue;
    GemmActivation kernel;
  };
  for (const Case& c :
       {Case{GemmActivation::kRelu, false, GemmEpilogue::kRelu, GemmActivation::kNone},
        Case{GemmActivation::kRelu, true, GemmEpilogue::kReluBias, GemmActivation::kNone},
        Case{GemmActivation::kGelu, false, GemmEpilogue::kGelu, GemmActivation::kNone},
        Case{GemmActivation::kGelu, true, GemmEpilogue::kGeluBias, GemmActivation::kNone},
        Case{GemmActivation::kSilu, false, GemmEpilogue::kDefault, GemmActivation::kSilu},
        Case{GemmActivation::kSilu, true, GemmEpilogue::kBias, GemmActivation::kSilu}}) {
    GemmRequest r = Req(2, 512, 256);
    r.activation = c.act;
    r.bias = c.bias;
    absl::StatusOr<GemmPlan> p = PlanGemm(r);
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->lt);
    EXPECT_EQ(p->epilogue, c.epilogue) << static_cast<int>(c.act) << " bias " << c.bias;
    EXPECT_EQ(p->activation_kernel, c.kernel);
    EXPECT_EQ(p->why.empty(), c.kernel == GemmActivation::kNone);
  }
}

TEST(GemmPlanTest, UnalignedShapesFallBackWithKernelsAndAReason) {
  // SmolLM2-135M: k = 576 is fine, but an odd k or n is not 16-byte rows.
  GemmRequest r = Req(4, 100, 36);  // 36 bf16 = 72 bytes
  r.bias = true;
  r.activation = GemmActivation::kGelu;
  absl::StatusOr<GemmPlan> p = PlanGemm(r);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->lt);
  EXPECT_TRUE(p->bias_kernel);
  EXPECT_EQ(p->activation_kernel, GemmActivation::kGelu);
  EXPECT_EQ(p->workspace_bytes, 0);
  EXPECT_NE(p->why.find("k = 36"), std::string::npos) << p->why;

  r = Req(4, 6, 64);  // f32 rows of 24 bytes
  p = PlanGemm(r);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->lt);
  EXPECT_NE(p->why.find("n = 6"), std::string::npos) << p->why;
  r.out = GemmDType::kBF16;
  r.n = 12;  // bf16 rows of 24 bytes
  EXPECT_FALSE(PlanGemm(r)->lt);
  r.n = 8;  // 16 bytes
  EXPECT_TRUE(PlanGemm(r)->lt);

  r = Req(4, 64, 64);
  r.pointer_alignment = 8;
  p = PlanGemm(r);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->lt);
  EXPECT_NE(p->why.find("aligned to 8"), std::string::npos);
}

TEST(GemmPlanTest, WorkspaceFollowsTheArchitecture) {
  GemmRequest r = Req(1, 64, 64);
  r.sm_major = 9;
  EXPECT_EQ(PlanGemm(r)->workspace_bytes, 32 << 20);
  r.sm_major = 10;
  EXPECT_EQ(PlanGemm(r)->workspace_bytes, 32 << 20);
  r.sm_major = 8;
  EXPECT_EQ(PlanGemm(r)->workspace_bytes, 4 << 20);
  EXPECT_EQ(GemmWorkspaceBytes(8), 4 << 20);
}

TEST(GemmPlanTest, RejectsBadRequestsNamingTheField) {
  struct Case {
    GemmRequest r;
    const char* field;
  };
  GemmRequest acc = Req(1, 64, 64);
  acc.accumulate = true;
  acc.activation = GemmActivation::kRelu;
  GemmRequest old = Req(1, 64, 64);
  old.sm_major = 7;
  for (const Case& c : {Case{Req(0, 64, 64), "m = 0"}, Case{Req(1, 0, 64), "n = 0"},
                        Case{Req(1, 64, int64_t{1} << 31), "k = 2147483648"},
                        Case{acc, "accumulate"}, Case{old, "sm_major = 7"}}) {
    absl::StatusOr<GemmPlan> p = PlanGemm(c.r);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(p.status().message().find(c.field), std::string::npos) << p.status();
  }
}

TEST(DecodeBucketsTest, Ladder) {
  EXPECT_EQ(*DecodeBatchBuckets(1), (std::vector<int32_t>{1}));
  EXPECT_EQ(*DecodeBatchBuckets(2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(*DecodeBatchBuckets(3), (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(*DecodeBatchBuckets(4), (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(*DecodeBatchBuckets(5), (std::vector<int32_t>{1, 2, 4, 8}));
  EXPECT_EQ(*DecodeBatchBuckets(8), (std::vector<int32_t>{1, 2, 4, 8}));
  EXPECT_EQ(*DecodeBatchBuckets(30), (std::vector<int32_t>{1, 2, 4, 8, 16, 24, 32}));
  const std::vector<int32_t> b64 = *DecodeBatchBuckets(64);
  EXPECT_EQ(b64.size(), 11u);
  EXPECT_EQ(b64.back(), 64);
  EXPECT_EQ(DecodeBatchBuckets(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeBatchBuckets(4097).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DecodeBucketsTest, EveryBatchGetsTheSmallestBucketThatHoldsIt) {
  const std::vector<int32_t> b = *DecodeBatchBuckets(64);
  for (int64_t rows = 1; rows <= 64; ++rows) {
    const std::optional<int32_t> got = ChooseBucket(b, rows);
    ASSERT_TRUE(got.has_value()) << rows;
    EXPECT_GE(*got, rows);
    // No smaller bucket holds it.
    for (int32_t s : b) {
      if (s < *got) {
        EXPECT_LT(s, rows);
      }
    }
    // Padding stays bounded: at most 7 extra rows, and never more than the rows themselves.
    EXPECT_LE(*got - rows, std::min<int64_t>(7, rows - 1)) << rows;
  }
  EXPECT_EQ(ChooseBucket(b, 3), 4);
  EXPECT_EQ(ChooseBucket(b, 9), 16);
  EXPECT_FALSE(ChooseBucket(b, 65).has_value());
  EXPECT_FALSE(ChooseBucket(b, 0).has_value());
  EXPECT_FALSE(ChooseBucket(b, -1).has_value());
}

TEST(PieceSignatureTest, OrderAndEveryWordCount) {
  auto sig = [](std::initializer_list<std::initializer_list<int64_t>> ops) {
    PieceSignature s;
    for (auto op : ops) s.Add(op);
    return s.value();
  };
  const uint64_t base = sig({{1, 4, 0x1000}, {2, 4, 0x2000}});
  EXPECT_EQ(base, sig({{1, 4, 0x1000}, {2, 4, 0x2000}})) << "deterministic";
  EXPECT_NE(base, sig({{2, 4, 0x2000}, {1, 4, 0x1000}})) << "order";
  EXPECT_NE(base, sig({{1, 4, 0x1000}, {2, 4, 0x2008}})) << "a pointer";
  EXPECT_NE(base, sig({{1, 5, 0x1000}, {2, 4, 0x2000}})) << "a size";
  EXPECT_NE(base, sig({{1, 4, 0x1000}, {2, 4, 0x2000}, {3}})) << "one more op";
  EXPECT_NE(sig({{1, 4}, {0x1000}}), sig({{1, 4, 0x1000}})) << "op boundaries";
  PieceSignature s;
  s.Add({7});
  s.Add({8, 9});
  EXPECT_EQ(s.ops(), 2);
}

// (The second argument stands for the piece's signature.)
DecodeGraphKey Key(int32_t bucket, int64_t signature, uint64_t generation = 0) {
  return DecodeGraphKey{bucket, 0, generation, static_cast<uint64_t>(signature)};
}

TEST(DecodeGraphCacheTest, KeysDifferInEveryField) {
  const DecodeGraphKey base = Key(4, 8);
  DecodeGraphCache cache(16, 1 << 20);
  ASSERT_TRUE(cache.Insert(base, 10).ok());
  DecodeGraphKey k = base;
  k.batch_bucket = 8;
  EXPECT_FALSE(cache.Find(k).has_value());
  k = base;
  k.signature = 9;
  EXPECT_FALSE(cache.Find(k).has_value());
  k = base;
  k.activations = 1;
  EXPECT_FALSE(cache.Find(k).has_value());
  k = base;
  k.layout_generation = 1;
  EXPECT_FALSE(cache.Find(k).has_value());
  EXPECT_TRUE(cache.Find(base).has_value());
}

TEST(DecodeGraphCacheTest, WarmUpBeforeCapture) {
  DecodeGraphCache cache(4, 1 << 20);
  EXPECT_FALSE(cache.warm(Key(1, 1)));
  EXPECT_TRUE(cache.NoteEager(Key(1, 1)));
  EXPECT_TRUE(cache.warm(Key(1, 1)));
  EXPECT_FALSE(cache.warm(Key(2, 1)));
  // A key of another generation never warms up.
  EXPECT_FALSE(cache.NoteEager(Key(1, 1, 7)));
  EXPECT_FALSE(cache.warm(Key(1, 1, 7)));
}

TEST(DecodeGraphCacheTest, EvictsLeastRecentlyUsedBeyondTheCount) {
  DecodeGraphCache cache(3, 1 << 20);
  const uint64_t a = cache.Insert(Key(1, 1), 100)->id;
  const uint64_t b = cache.Insert(Key(2, 1), 100)->id;
  const uint64_t c = cache.Insert(Key(4, 1), 100)->id;
  EXPECT_EQ(cache.Find(Key(1, 1)), a);  // a is now the most recent; b the least
  absl::StatusOr<DecodeGraphCache::Admission> d = cache.Insert(Key(8, 1), 100);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->evicted, std::vector<uint64_t>{b});
  EXPECT_EQ(cache.size(), 3);
  EXPECT_FALSE(cache.Find(Key(2, 1)).has_value());
  EXPECT_EQ(cache.Find(Key(4, 1)), c);
  std::set<uint64_t> ids = {a, b, c, d->id};
  EXPECT_EQ(ids.size(), 4u) << "ids are never reused";
}

TEST(DecodeGraphCacheTest, BytesStayWithinTheBudget) {
  DecodeGraphCache cache(100, 1000);
  ASSERT_TRUE(cache.Insert(Key(1, 1), 400).ok());
  ASSERT_TRUE(cache.Insert(Key(2, 1), 400).ok());
  absl::StatusOr<DecodeGraphCache::Admission> big = cache.Insert(Key(4, 1), 700);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->evicted.size(), 2u);
  EXPECT_EQ(cache.bytes(), 700);
  EXPECT_LE(cache.bytes(), 1000);
  EXPECT_EQ(cache.Insert(Key(8, 1), 1001).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.bytes(), 700) << "a refused graph evicts nothing";
  EXPECT_EQ(cache.Insert(Key(4, 1), 10).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DecodeGraphCacheTest, InvalidationDropsEverythingAndStaleKeys) {
  DecodeGraphCache cache(8, 1 << 20);
  const uint64_t a = cache.Insert(Key(1, 1), 10)->id;
  const uint64_t b = cache.Insert(Key(2, 4), 10)->id;
  cache.NoteEager(Key(4, 4));
  std::vector<uint64_t> dropped = cache.InvalidateAll();
  std::sort(dropped.begin(), dropped.end());
  EXPECT_EQ(dropped, (std::vector<uint64_t>{a, b}));
  EXPECT_EQ(cache.size(), 0);
  EXPECT_EQ(cache.bytes(), 0);
  EXPECT_EQ(cache.generation(), 1u);
  EXPECT_FALSE(cache.warm(Key(4, 4)));
  EXPECT_FALSE(cache.warm(Key(4, 4, 1)));
  // Keys of the old generation cannot come back.
  EXPECT_EQ(cache.Insert(Key(1, 1, 0), 10).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(cache.Insert(Key(1, 1, 1), 10).ok());
}

}  // namespace
}  // namespace tandem::gpu
