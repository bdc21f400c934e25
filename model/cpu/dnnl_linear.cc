#include "model/cpu/dnnl_linear.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <compare>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "attention/cpu/cpu_isa.h"
#include "common/lru_map.h"

namespace tandem {
namespace {

using dnnl::memory;
using Tag = dnnl::memory::format_tag;
using DType = dnnl::memory::data_type;

// oneDNN's C++ API reports errors by throwing dnnl::error; this file is the only place that
// catches them, turning each into an absl::Status.
absl::Status ToStatus(const dnnl::error& e, const char* what) {
  return absl::InternalError(absl::StrCat("oneDNN ", what, " failed: ", e.what(), " (status ",
                                          static_cast<int>(e.status), ")"));
}

std::atomic<int64_t> g_total_nanos{0};

const dnnl::engine& CpuEngine() {
  static const dnnl::engine* engine = [] {
    // oneDNN keeps its own cache of every primitive created (1,024 by default) besides ours
    // (PlainPrimitives): bounded like ours, so together they hold at most twice our capacity.
    dnnl::set_primitive_cache_capacity(static_cast<int>(DnnlLinear::kPrimitiveCacheCapacity));
    // A path forced by TANDEM_CPU_ISA (attention/cpu/cpu_isa.h) caps oneDNN's JIT to the same
    // instruction set, so a forced-AVX2 run uses no AVX-512 anywhere. The portable path has no
    // oneDNN equivalent; SSE4.1 is the narrowest it offers. This runs before oneDNN's first
    // primitive (every use goes through this engine), as set_max_cpu_isa requires.
    if (const std::optional<CpuIsa> forced = ForcedCpuIsa(); forced.has_value()) {
      const dnnl_cpu_isa_t cap = *forced == CpuIsa::kAvx512 ? dnnl_cpu_isa_avx512_core
                                 : *forced == CpuIsa::kAvx2 ? dnnl_cpu_isa_avx2
                                                            : dnnl_cpu_isa_sse41;
      if (dnnl_set_max_cpu_isa(cap) != dnnl_success) {
        std::fprintf(stderr, "tandem: oneDNN refused the instruction-set cap of TANDEM_CPU_ISA\n");
        std::exit(2);
      }
    }
    return new dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return *engine;
}

// One in-order CPU stream per calling thread (streams are cheap but not free to create).
dnnl::stream& ThreadStream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

// Primitives run with a user-provided scratchpad from the calling thread: Debian's oneDNN is
// built without DNNL_ENABLE_CONCURRENT_EXEC, so in the default "library" mode all primitives
// share one scratchpad and rank threads executing concurrently would corrupt each other's GEMMs.
void* ThreadScratchpad(size_t bytes) {
  thread_local std::vector<char> buffer;
  if (buffer.size() < bytes + 64) buffer.resize(bytes + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buffer.data());
  return reinterpret_cast<void*>((p + 63) & ~uintptr_t{63});
}

dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The attributes of a matmul with `epilogue` on an [m][n] output whose rows are ldy apart.
dnnl::primitive_attr EpilogueAttr(DnnlLinear::Epilogue epilogue, int64_t m, int64_t n,
                                  int64_t ldy) {
  dnnl::primitive_attr attr = UserScratchpad();
  dnnl::post_ops ops;
  switch (epilogue) {
    case DnnlLinear::Epilogue::kStore:
      return attr;
    case DnnlLinear::Epilogue::kAccumulate:
      ops.append_sum(1.f);
      break;
    case DnnlLinear::Epilogue::kSiluMul:
      // swish with alpha 1 is x·sigmoid(x) = silu(x); then the element-wise product with aux.
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_swish, 1.f, 0.f);
      ops.append_binary(dnnl::algorithm::binary_mul,
                        memory::desc({m, n}, DType::f32, memory::dims{ldy, 1}));
      break;
  }
  attr.set_post_ops(ops);
  return attr;
}

// A transient weight is reordered into oneDNN's packed layout before each GEMM: the brgemm
// kernels on packed weights run several times faster than on a plain [n][k] matrix, and the
// reorder is O(n·k) against the GEMM's O(m·n·k). Where the preferred layout is merely the plain
// [k][n] transpose (the AVX2 sgemm, which packs its operands itself), that reorder would only
// transpose the tile: PlainGemm then hands oneDNN the [n][k] tile as it is (direct).
struct Packing {
  memory::desc packed;
  dnnl::reorder reorder;
  memory::desc reorder_scratchpad;
  bool direct = false;
};

struct PlainKey {
  int64_t m, k, n, ldy;
  DnnlLinear::Epilogue epilogue;
  bool bias;
  bool direct;  // weights in the plain [n][k] layout (Packing::direct), else packed
  auto operator<=>(const PlainKey&) const = default;
};

struct PlainPrimitive {
  dnnl::matmul primitive;
  memory::desc scratchpad;
};

absl::Mutex g_plain_mu;
std::map<std::pair<int64_t, int64_t>, Packing>& Packings()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_plain_mu) {
  static auto* cache = new std::map<std::pair<int64_t, int64_t>, Packing>();
  return *cache;
}
// One primitive per distinct shape — for prefill, per distinct number of rows in a step, which
// is unbounded over a node's life (each primitive holds ~25 KB of malloc and ~40 KB of RSS; the
// 30-minute soak's prefill nodes grew ~0.5 MiB a minute with an unbounded map). Shared by every
// weight of that shape, least recently used dropped first.
LruMap<PlainKey, PlainPrimitive>& PlainPrimitives() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_plain_mu) {
  static auto* cache = new LruMap<PlainKey, PlainPrimitive>(DnnlLinear::kPrimitiveCacheCapacity);
  return *cache;
}

absl::StatusOr<Packing> PackingFor(int64_t k, int64_t n) {
  absl::MutexLock lock(&g_plain_mu);
  auto& cache = Packings();
  auto it = cache.find({k, n});
  if (it != cache.end()) return it->second;
  try {
    // As DnnlLinear::Create: the layout oneDNN prefers for m = 64 serves every m.
    const memory::desc src({64, k}, DType::f32, Tag::ab);
    const memory::desc dst({64, n}, DType::f32, Tag::ab);
    const memory::desc any({k, n}, DType::f32, Tag::any);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, any, dst), UserScratchpad(),
                                          CpuEngine());
    const memory::desc plain({k, n}, DType::f32, Tag::ba);
    const dnnl::reorder::primitive_desc rpd(CpuEngine(), plain, CpuEngine(), pd.weights_desc(),
                                            UserScratchpad());
    Packing p{pd.weights_desc(), dnnl::reorder(rpd), rpd.scratchpad_desc(),
              pd.weights_desc() == memory::desc({k, n}, DType::f32, Tag::ab)};
    cache.emplace(std::make_pair(k, n), p);
    return p;
  } catch (const dnnl::error& e) {
    return ToStatus(e, "weight packing creation");
  }
}

absl::StatusOr<PlainPrimitive> PlainPrimitiveFor(const PlainKey& key, const memory::desc& packed) {
  absl::MutexLock lock(&g_plain_mu);
  auto& cache = PlainPrimitives();
  if (std::optional<PlainPrimitive> p = cache.Find(key)) return *std::move(p);
  try {
    const memory::desc src({key.m, key.k}, DType::f32, Tag::ab);
    const memory::desc dst({key.m, key.n}, DType::f32, memory::dims{key.ldy, 1});
    const memory::desc b =
        key.bias ? memory::desc({1, key.n}, DType::f32, Tag::ab) : memory::desc();
    const dnnl::matmul::desc d =
        key.bias ? dnnl::matmul::desc(src, packed, b, dst) : dnnl::matmul::desc(src, packed, dst);
    const dnnl::matmul::primitive_desc pd(d, EpilogueAttr(key.epilogue, key.m, key.n, key.ldy),
                                          CpuEngine());
    PlainPrimitive p{dnnl::matmul(pd), pd.scratchpad_desc()};
    cache.Insert(key, p);
    return p;
  } catch (const dnnl::error& e) {
    return ToStatus(e, "plain matmul creation");
  }
}

// Per calling thread: the packed copy of the current transient weight.
void* ThreadPackedWeights(size_t bytes) {
  thread_local std::vector<char> buffer;
  if (buffer.size() < bytes + 64) buffer.resize(bytes + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buffer.data());
  return reinterpret_cast<void*>((p + 63) & ~uintptr_t{63});
}

}  // namespace

struct DnnlLinear::Impl {
  int64_t n = 0;
  int64_t k = 0;
  const dnnl::engine& engine = CpuEngine();
  memory::desc weights_desc;  // packed layout
  memory weights;
  memory bias;
  bool has_bias = false;
};

DnnlLinear::DnnlLinear(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DnnlLinear::~DnnlLinear() = default;
int64_t DnnlLinear::n() const { return impl_->n; }
int64_t DnnlLinear::k() const { return impl_->k; }

absl::StatusOr<std::unique_ptr<DnnlLinear>> DnnlLinear::Create(const float* w, int64_t n, int64_t k,
                                                               const float* bias) {
  if (n <= 0 || k <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("linear: bad shape [", n, "][", k, "]"));
  }
  auto impl = std::make_unique<Impl>();
  impl->n = n;
  impl->k = k;
  impl->has_bias = bias != nullptr;
  try {
    // oneDNN's preferred weight layout (PackingFor), shared with PlainGemm so both find the
    // same primitives.
    absl::StatusOr<Packing> packing = PackingFor(k, n);
    if (!packing.ok()) return packing.status();
    impl->weights_desc = packing->packed;
    impl->weights = memory(impl->weights_desc, impl->engine);
    memory plain({{k, n}, DType::f32, Tag::ba}, impl->engine, const_cast<float*>(w));
    dnnl::stream& stream = ThreadStream();
    memory scratch(packing->reorder_scratchpad, impl->engine,
                   ThreadScratchpad(packing->reorder_scratchpad.get_size()));
    packing->reorder.execute(
        stream,
        {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, impl->weights}, {DNNL_ARG_SCRATCHPAD, scratch}});
    if (bias != nullptr) {
      impl->bias = memory({{1, n}, DType::f32, Tag::ab}, impl->engine);
      std::copy(bias, bias + n, static_cast<float*>(impl->bias.get_data_handle()));
    }
    stream.wait();
  } catch (const dnnl::error& e) {
    return ToStatus(e, "weight packing");
  }
  return std::unique_ptr<DnnlLinear>(new DnnlLinear(std::move(impl)));
}

absl::Status DnnlLinear::Forward(const float* x, int64_t m, float* y, Epilogue epilogue,
                                 const float* aux) const {
  if (m <= 0) return absl::OkStatus();
  if (epilogue == Epilogue::kSiluMul && (aux == nullptr || aux == y)) {
    return absl::InvalidArgumentError(
        "linear: the SiLU-multiply epilogue needs aux, distinct from y");
  }
  absl::StatusOr<PlainPrimitive> prim =
      PlainPrimitiveFor(PlainKey{m, impl_->k, impl_->n, impl_->n, epilogue, impl_->has_bias, false},
                        impl_->weights_desc);
  if (!prim.ok()) return prim.status();
  const auto start = std::chrono::steady_clock::now();
  try {
    dnnl::stream& stream = ThreadStream();
    memory src({{m, impl_->k}, DType::f32, Tag::ab}, impl_->engine, const_cast<float*>(x));
    memory dst({{m, impl_->n}, DType::f32, Tag::ab}, impl_->engine, y);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, impl_->weights}, {DNNL_ARG_DST, dst}};
    if (impl_->has_bias) args.emplace(DNNL_ARG_BIAS, impl_->bias);
    if (epilogue == Epilogue::kSiluMul) {
      args.emplace(
          DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1,
          memory({{m, impl_->n}, DType::f32, Tag::ab}, impl_->engine, const_cast<float*>(aux)));
    }
    memory scratch(prim->scratchpad, impl_->engine, ThreadScratchpad(prim->scratchpad.get_size()));
    args.emplace(DNNL_ARG_SCRATCHPAD, scratch);
    prim->primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    return ToStatus(e, "matmul");
  }
  g_total_nanos.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count(),
      std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status DnnlLinear::PlainGemm(const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                                   const float* bias, float* y, int64_t ldy, Epilogue epilogue,
                                   const float* aux) {
  if (m <= 0 || n <= 0) return absl::OkStatus();
  if (epilogue == Epilogue::kSiluMul && (aux == nullptr || aux == y)) {
    return absl::InvalidArgumentError(
        "linear: the SiLU-multiply epilogue needs aux, distinct from y");
  }
  absl::StatusOr<Packing> packing = PackingFor(k, n);
  if (!packing.ok()) return packing.status();
  const memory::desc plain_desc({k, n}, DType::f32, Tag::ba);
  absl::StatusOr<PlainPrimitive> prim =
      PlainPrimitiveFor(PlainKey{m, k, n, ldy, epilogue, bias != nullptr, packing->direct},
                        packing->direct ? plain_desc : packing->packed);
  if (!prim.ok()) return prim.status();
  const auto start = std::chrono::steady_clock::now();
  try {
    const dnnl::engine& engine = CpuEngine();
    dnnl::stream& stream = ThreadStream();
    memory plain(plain_desc, engine, const_cast<float*>(w));
    memory packed = plain;
    if (!packing->direct) {
      packed = memory(packing->packed, engine, ThreadPackedWeights(packing->packed.get_size()));
      memory reorder_scratch(packing->reorder_scratchpad, engine,
                             ThreadScratchpad(packing->reorder_scratchpad.get_size()));
      packing->reorder.execute(
          stream,
          {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, packed}, {DNNL_ARG_SCRATCHPAD, reorder_scratch}});
    }
    memory src({{m, k}, DType::f32, Tag::ab}, engine, const_cast<float*>(x));
    memory dst({{m, n}, DType::f32, memory::dims{ldy, 1}}, engine, y);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_DST, dst}};
    if (bias != nullptr) {
      args.emplace(DNNL_ARG_BIAS,
                   memory({{1, n}, DType::f32, Tag::ab}, engine, const_cast<float*>(bias)));
    }
    if (epilogue == Epilogue::kSiluMul) {
      args.emplace(
          DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1,
          memory({{m, n}, DType::f32, memory::dims{ldy, 1}}, engine, const_cast<float*>(aux)));
    }
    memory scratch(prim->scratchpad, engine, ThreadScratchpad(prim->scratchpad.get_size()));
    args.emplace(DNNL_ARG_SCRATCHPAD, scratch);
    prim->primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    return ToStatus(e, "plain matmul");
  }
  g_total_nanos.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count(),
      std::memory_order_relaxed);
  return absl::OkStatus();
}

int64_t DnnlLinear::CachedPrimitives() {
  absl::MutexLock lock(&g_plain_mu);
  return static_cast<int64_t>(PlainPrimitives().size());
}

void DnnlLinear::SetPrimitiveCacheCapacity(int64_t capacity) {
  absl::MutexLock lock(&g_plain_mu);
  PlainPrimitives().set_capacity(static_cast<size_t>(std::max<int64_t>(0, capacity)));
}

double DnnlLinear::TotalSeconds() { return g_total_nanos.load() * 1e-9; }
void DnnlLinear::ResetTotalSeconds() { g_total_nanos.store(0); }

}  // namespace tandem
