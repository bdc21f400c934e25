#include "kv_transfer/ucx/ucx_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kv_transfer/ucx/ucx_status.h"

namespace tandem {
namespace {

// Unmaps a mapping whose construction failed half-way.
struct MemhDeleter {
  ucp_context_h context;
  void operator()(ucp_mem* memh) const { ucp_mem_unmap(context, memh); }
};

struct RkeyBufferDeleter {
  void operator()(void* buffer) const { ucp_rkey_buffer_release(buffer); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<UcxPool>> UcxPool::Create(std::shared_ptr<UcxContext> context,
                                                         int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("UcxPool bytes must be > 0, got ", bytes));
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = nullptr;
  params.length = static_cast<size_t>(bytes);
  params.flags = UCP_MEM_MAP_ALLOCATE;
  return Map(std::move(context), params, bytes, KvMemoryType::kHost, nullptr);
}

absl::StatusOr<std::unique_ptr<UcxPool>> UcxPool::Register(std::shared_ptr<UcxContext> context,
                                                           std::unique_ptr<KvPoolMemory> memory,
                                                           KvMemoryType type) {
  if (memory == nullptr || memory->base() == nullptr || memory->bytes() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("UcxPool::Register needs memory with a base and bytes > 0, got ",
                     memory == nullptr ? "none" : absl::StrCat(memory->bytes(), " bytes")));
  }
  if (type == KvMemoryType::kCuda && !context->supports_cuda_memory()) {
    return absl::FailedPreconditionError(
        absl::StrCat("UcxPool::Register: this UCX reports no CUDA memory type (memory types: ",
                     context->memory_type_names(),
                     "); device pools need a CUDA-aware UCX (-DTANDEM_UCX_ROOT, docs/gpu.md)"));
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = memory->base();
  params.length = static_cast<size_t>(memory->bytes());
  params.memory_type = type == KvMemoryType::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  const int64_t bytes = memory->bytes();
  return Map(std::move(context), params, bytes, type, std::move(memory));
}

absl::StatusOr<std::unique_ptr<UcxPool>> UcxPool::Map(std::shared_ptr<UcxContext> context,
                                                      const ucp_mem_map_params_t& params,
                                                      int64_t bytes, KvMemoryType type,
                                                      std::unique_ptr<KvPoolMemory> registered) {
  ucp_mem_h raw_memh = nullptr;
  absl::Status status = ToStatus(
      ucp_mem_map(context->get(), &params, &raw_memh),
      absl::StrCat("ucp_mem_map(", registered == nullptr ? "ALLOCATE" : "register", ", ", bytes,
                   " bytes, ", type == KvMemoryType::kCuda ? "cuda" : "host", " memory)"));
  if (!status.ok()) return status;
  std::unique_ptr<ucp_mem, MemhDeleter> memh(raw_memh, MemhDeleter{context->get()});

  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  status = ToStatus(ucp_mem_query(memh.get(), &attr), "ucp_mem_query");
  if (!status.ok()) return status;

  void* raw_rkey = nullptr;
  size_t rkey_size = 0;
  status =
      ToStatus(ucp_rkey_pack(context->get(), memh.get(), &raw_rkey, &rkey_size), "ucp_rkey_pack");
  if (!status.ok()) return status;
  std::unique_ptr<void, RkeyBufferDeleter> rkey(raw_rkey);
  std::string packed(static_cast<const char*>(rkey.get()), rkey_size);

  // UCX may round the length up; only the requested bytes are the pool. A registered pool
  // starts where the registered memory does.
  void* base = registered != nullptr ? registered->base() : attr.address;
  return std::unique_ptr<UcxPool>(new UcxPool(std::move(context), memh.release(), base, bytes,
                                              std::move(packed), type, std::move(registered)));
}

UcxPool::~UcxPool() { ucp_mem_unmap(context_->get(), memh_); }

}  // namespace tandem
