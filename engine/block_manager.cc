#include "engine/block_manager.h"

#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace tandem {

BlockManager::BlockManager(int32_t num_blocks)
    : num_blocks_(num_blocks), refcount_(num_blocks, 0), generation_(num_blocks, 0) {
  for (int32_t b = 0; b < num_blocks; ++b) free_.insert(free_.end(), b);
}

absl::StatusOr<std::vector<int32_t>> BlockManager::Allocate(int32_t count) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("negative block count ", count));
  absl::MutexLock lock(&mu_);
  if (static_cast<int64_t>(free_.size()) < count) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: need ", count, " blocks, ",
                                                     free_.size(), " of ", num_blocks_, " free"));
  }
  std::vector<int32_t> out;
  out.reserve(count);
  for (int32_t i = 0; i < count; ++i) {
    const int32_t b = *free_.begin();
    free_.erase(free_.begin());
    refcount_[b] = 1;
    out.push_back(b);
  }
  return out;
}

absl::Status BlockManager::Extend(std::vector<int32_t>* table, int32_t total) {
  const int32_t have = static_cast<int32_t>(table->size());
  if (have >= total) return absl::OkStatus();
  absl::StatusOr<std::vector<int32_t>> more = Allocate(total - have);
  if (!more.ok()) return more.status();
  table->insert(table->end(), more->begin(), more->end());
  return absl::OkStatus();
}

absl::Status BlockManager::CheckAllocated(absl::Span<const int32_t> blocks, bool releasing) const {
  std::map<int32_t, int32_t> uses;
  for (int32_t b : blocks) {
    if (b < 0 || b >= num_blocks_) {
      return absl::InvalidArgumentError(
          absl::StrCat("block id ", b, " outside [0, ", num_blocks_, ")"));
    }
    if (refcount_[b] == 0 || (releasing && ++uses[b] > refcount_[b])) {
      return absl::InvalidArgumentError(
          absl::StrCat("block ", b, " is not allocated (refcount ", refcount_[b], ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status BlockManager::Free(absl::Span<const int32_t> blocks) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckAllocated(blocks, /*releasing=*/true); !s.ok()) {
    ++free_errors_;
    const std::string line =
        absl::StrCat("tandem: BlockManager::Free of ", blocks.size(), " blocks failed (error ",
                     free_errors_, "): ", s.message(), "\n");
    std::fwrite(line.data(), 1, line.size(), stderr);
    return s;
  }
  for (int32_t b : blocks) {
    if (--refcount_[b] == 0) {
      ++generation_[b];
      free_.insert(b);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint32_t>> BlockManager::Generations(
    absl::Span<const int32_t> blocks) const {
  absl::MutexLock lock(&mu_);
  std::vector<uint32_t> out;
  out.reserve(blocks.size());
  for (int32_t b : blocks) {
    if (b < 0 || b >= num_blocks_) {
      return absl::InvalidArgumentError(
          absl::StrCat("block id ", b, " outside [0, ", num_blocks_, ")"));
    }
    out.push_back(generation_[b]);
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> BlockManager::FreedSince(
    absl::Span<const int32_t> blocks, absl::Span<const uint32_t> generations) const {
  if (blocks.size() != generations.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(blocks.size(), " blocks but ", generations.size(), " generations"));
  }
  absl::MutexLock lock(&mu_);
  std::vector<int32_t> freed;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int32_t b = blocks[i];
    if (b < 0 || b >= num_blocks_) {
      return absl::InvalidArgumentError(
          absl::StrCat("block id ", b, " outside [0, ", num_blocks_, ")"));
    }
    if (generation_[b] != generations[i]) freed.push_back(b);
  }
  return freed;
}

void BlockManager::Release(absl::Span<const int32_t> blocks) {
  // Free counts and logs a failure; there is nothing more a cleanup path can do with it.
  Free(blocks).IgnoreError();
}

int64_t BlockManager::free_errors() const {
  absl::MutexLock lock(&mu_);
  return free_errors_;
}

absl::Status BlockManager::AddRef(absl::Span<const int32_t> blocks) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckAllocated(blocks, /*releasing=*/false); !s.ok()) return s;
  for (int32_t b : blocks) ++refcount_[b];
  return absl::OkStatus();
}

int32_t BlockManager::RefCount(int32_t block) const {
  absl::MutexLock lock(&mu_);
  return block < 0 || block >= num_blocks_ ? 0 : refcount_[block];
}

int32_t BlockManager::CountSoleReferences(absl::Span<const int32_t> blocks) const {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  for (int32_t b : blocks) n += b >= 0 && b < num_blocks_ && refcount_[b] == 1 ? 1 : 0;
  return n;
}

bool BlockManager::AwaitFree(int32_t count, absl::Time deadline,
                             const CancellationToken* stop) const {
  // A cancellation only has to release mu_ once: the Await below re-evaluates its condition.
  // Declared before the lock, so it is unregistered after the lock is released.
  CancelCallback wake;
  if (stop != nullptr) wake = stop->OnCancel([this] { absl::MutexLock lock(&mu_); });
  absl::MutexLock lock(&mu_);
  const auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int64_t>(free_.size()) >= count;
  };
  const auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return enough() || (stop != nullptr && stop->cancelled());
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  return enough();
}

int32_t BlockManager::free_blocks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(free_.size());
}

}  // namespace tandem
