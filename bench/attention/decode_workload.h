// A decode-step attention workload for benchmarking: `seqs` sequences of `tokens` cached tokens,
// one query row each at the last position, over a pool of `layers` layers with shuffled block
// ids (as a block allocator hands them out). Owns its pool and inputs.
//
// Every layer holds its own KV, and the benchmark attends the layers in turn, so a layer's bytes
// come back only after all other layers' bytes went through the cache: with a working set far
// above the last-level cache the kernel is measured from DRAM.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "attention/cpu/paged_attention.h"
#include "bench/attention/bench_buffer.h"
#include "bench/attention/bench_clock.h"

namespace tandem::bench {

struct DecodeShape {
  int32_t seqs = 16;
  int64_t tokens = 4096;
  int32_t kv_heads = 8;
  int32_t head_dim = 128;
  int32_t gqa = 4;
  int32_t block_size = 16;
  int32_t layers = 3;
  KvDType dtype = KvDType::kF32;
  bool huge_pages = false;  // back the pool with transparent huge pages
};

class DecodeWorkload {
 public:
  // Allocates and fills the pool (PoolBytes of memory). INVALID_ARGUMENT for a shape the
  // attention rejects.
  static absl::StatusOr<std::unique_ptr<DecodeWorkload>> Create(const DecodeShape& shape);
  DecodeWorkload(const DecodeWorkload&) = delete;
  DecodeWorkload& operator=(const DecodeWorkload&) = delete;

  // K and V bytes one layer's attention reads.
  int64_t KvBytesPerLayer() const;
  int64_t PoolBytes() const { return static_cast<int64_t>(pool_bytes_.size()); }
  // Runs the decode attention of `layer`; returns seconds on `clock`.
  double TimedAttention(int32_t layer, BenchClock clock);
  // Output checksum, to show the work was done.
  double Checksum() const;

 private:
  explicit DecodeWorkload(const DecodeShape& shape);
  AttentionRows Rows() const;

  DecodeShape shape_;
  BenchBuffer pool_bytes_;
  KvPoolView pool_;
  std::vector<int32_t> table_ids_;
  std::vector<int64_t> table_offsets_;
  std::vector<int32_t> request_;
  std::vector<int64_t> position_;
  std::vector<float> q_, out_, lse_;
};

}  // namespace tandem::bench
