// Page-aligned, zero-filled benchmark memory, optionally backed by transparent huge pages.
//
// Huge pages matter for the decode benchmark: KV blocks are scattered over the pool, and with
// 4 KiB pages nearly every block costs TLB misses. The read-bandwidth buffer and the KV pool use
// the same setting so the ratio compares like with like. Owns its memory; not thread-safe.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace tandem::bench {

class BenchBuffer {
 public:
  BenchBuffer() = default;
  BenchBuffer(size_t bytes, bool huge_pages) : bytes_(bytes) {
    constexpr size_t kHugePage = size_t{2} << 20;
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    data_.reset(
        static_cast<std::byte*>(std::aligned_alloc(kHugePage, rounded == 0 ? kHugePage : rounded)));
    // Advice before the first touch, so the kernel can back the range with huge pages.
    if (huge_pages && data_ != nullptr) madvise(data_.get(), rounded, MADV_HUGEPAGE);
    if (data_ != nullptr) std::memset(data_.get(), 0, rounded);
  }

  std::byte* data() const { return data_.get(); }
  size_t size() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t bytes_ = 0;
};

}  // namespace tandem::bench
