// Memory behind one rank's KV pool. The engine only needs a base pointer and a size; where the
// memory comes from is the server's choice: plain backend memory for a combined instance, memory
// a KV transport allocated on prefill/decode instances so peers can read it one-sidedly
// (docs/design.md#pools-and-ucx). Here, below both engine/ and kv_transfer/, so neither includes
// the other.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"

namespace tandem {

class KvPoolMemory {
 public:
  virtual ~KvPoolMemory() = default;
  virtual void* base() const = 0;
  virtual int64_t bytes() const = 0;
};

// Allocates `bytes` of pool memory for global rank `rank`. Called on that rank's thread.
using KvPoolAllocator =
    std::function<absl::StatusOr<std::unique_ptr<KvPoolMemory>>(int32_t rank, int64_t bytes)>;

}  // namespace tandem
