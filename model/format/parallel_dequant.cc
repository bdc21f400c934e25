#include "model/format/parallel_dequant.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "common/parallel_for.h"
#include "model/format/dequant.h"

namespace tandem {
namespace {

// ~256K elements per chunk: large enough to amortise scheduling, small enough to balance.
constexpr int64_t kChunkElements = 1 << 18;

struct Chunk {
  const DequantJob* job;
  int64_t first_block, blocks;
};

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

}  // namespace

absl::Status DequantizeAll(absl::Span<const DequantJob> jobs) {
  std::vector<Chunk> chunks;
  for (const DequantJob& job : jobs) {
    const GgmlTypeInfo& info = GgmlTypeTraits(job.type);
    const int64_t n = Numel(job.shape);
    const absl::Status valid = ValidateDequantize(job.type, n, job.src.size());
    if (!valid.ok()) return valid;
    const int64_t blocks = n / info.block_size;
    const int64_t per_chunk = std::max<int64_t>(1, kChunkElements / info.block_size);
    for (int64_t b = 0; b < blocks; b += per_chunk) {
      chunks.push_back({&job, b, std::min(per_chunk, blocks - b)});
    }
  }
  ParallelFor(static_cast<int64_t>(jobs.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      jobs[i].dst->shape = jobs[i].shape;
      jobs[i].dst->data.resize(static_cast<size_t>(Numel(jobs[i].shape)));
    }
  });
  std::atomic<bool> failed{false};
  ParallelFor(static_cast<int64_t>(chunks.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Chunk& c = chunks[i];
      const GgmlTypeInfo& info = GgmlTypeTraits(c.job->type);
      const absl::Status s = Dequantize(
          c.job->type,
          c.job->src.subspan(c.first_block * info.block_bytes, c.blocks * info.block_bytes),
          absl::MakeSpan(c.job->dst->data)
              .subspan(c.first_block * info.block_size, c.blocks * info.block_size));
      if (!s.ok()) failed = true;
    }
  });
  if (failed) return absl::InternalError("dequantisation of a chunk failed after validation");
  return absl::OkStatus();
}

absl::Status DequantizeParallel(GgmlType type, absl::Span<const uint8_t> src,
                                absl::Span<float> dst) {
  const GgmlTypeInfo& info = GgmlTypeTraits(type);
  const int64_t n = static_cast<int64_t>(dst.size());
  // Validate once up front; the chunks below are then consistent by construction.
  const absl::Status valid = ValidateDequantize(type, n, src.size());
  if (!valid.ok()) return valid;
  const int64_t blocks = n / info.block_size;
  const int64_t grain = std::max<int64_t>(1, kChunkElements / 4 / info.block_size);
  std::atomic<bool> failed{false};
  ParallelFor(blocks, grain, [&](int64_t begin, int64_t end) {
    const absl::Status s =
        Dequantize(type, src.subspan(begin * info.block_bytes, (end - begin) * info.block_bytes),
                   dst.subspan(begin * info.block_size, (end - begin) * info.block_size));
    if (!s.ok()) failed = true;
  });
  if (failed) return absl::InternalError("dequantisation of a chunk failed after validation");
  return absl::OkStatus();
}

}  // namespace tandem
