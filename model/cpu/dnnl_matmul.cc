#include "model/cpu/dnnl_matmul.h"

#include <map>
#include <tuple>

#include "model/cpu/dnnl_common.h"

namespace tandem::cpu {
namespace {

using dnnl::memory;
using Tag = dnnl::memory::format_tag;
using DType = dnnl::memory::data_type;

struct Prepared {
  dnnl::matmul primitive;
  memory::desc scratchpad;
};

// Shapes repeat across layers and heads of a step (callers round them up to few sizes), so a
// small per-thread map is enough; it is bounded to keep odd workloads from growing it forever.
constexpr size_t kMaxCached = 256;

}  // namespace

absl::Status MatMul(int64_t m, int64_t k, int64_t n, const float* a, const float* b,
                    bool b_transposed, float* c) {
  if (m <= 0 || n <= 0) return absl::OkStatus();
  using Key = std::tuple<int64_t, int64_t, int64_t, bool>;
  thread_local std::map<Key, Prepared> cache;
  const Key key{m, k, n, b_transposed};
  try {
    auto it = cache.find(key);
    if (it == cache.end()) {
      if (cache.size() >= kMaxCached) cache.clear();
      const memory::desc ad({m, k}, DType::f32, Tag::ab);
      const memory::desc bd({k, n}, DType::f32, b_transposed ? Tag::ba : Tag::ab);
      const memory::desc cd({m, n}, DType::f32, Tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd),
                                            dnnl_internal::UserScratchpad(),
                                            dnnl_internal::CpuEngine());
      it = cache.emplace(key, Prepared{dnnl::matmul(pd), pd.scratchpad_desc()}).first;
    }
    const auto start = std::chrono::steady_clock::now();
    const dnnl::engine& eng = dnnl_internal::CpuEngine();
    memory am({{m, k}, DType::f32, Tag::ab}, eng, const_cast<float*>(a));
    memory bm({{k, n}, DType::f32, b_transposed ? Tag::ba : Tag::ab}, eng, const_cast<float*>(b));
    memory cm({{m, n}, DType::f32, Tag::ab}, eng, c);
    memory sm(it->second.scratchpad, eng,
              dnnl_internal::ThreadScratchpad(it->second.scratchpad.get_size()));
    dnnl::stream& stream = dnnl_internal::ThreadStream();
    it->second.primitive.execute(stream, {{DNNL_ARG_SRC, am},
                                          {DNNL_ARG_WEIGHTS, bm},
                                          {DNNL_ARG_DST, cm},
                                          {DNNL_ARG_SCRATCHPAD, sm}});
    stream.wait();
    dnnl_internal::AddGemmTime(std::chrono::steady_clock::now() - start);
  } catch (const dnnl::error& e) {
    return dnnl_internal::ToStatus(e, "matmul");
  }
  return absl::OkStatus();
}

}  // namespace tandem::cpu
