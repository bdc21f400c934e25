// Fuzz target: the KV handle a prefill instance returns and a decode instance trusts
// (serialized tandem.v1.KvHandle): its KvLayout through the one proto conversion
// (proto/convert/kv_layout_proto.h) for every instance role. An accepted layout must convert
// back to the same layout, and its rank placement must stay inside the layout's heads.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "attention/parallel_layout.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/convert/kv_layout_proto.h"
#include "tandem/v1/common.pb.h"
#include "tests/fuzz/fuzz_check.h"

// Parsing hostile bytes makes protobuf log every invalid UTF-8 string; the status is what counts.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  v1::KvHandle handle;
  if (!handle.ParseFromArray(data, static_cast<int>(size))) return 0;
  for (InstanceRole role :
       {InstanceRole::kPrefill, InstanceRole::kDecode, InstanceRole::kCombined}) {
    absl::StatusOr<KvLayout> layout = FromProto(handle.layout(), role);
    if (!layout.ok()) {
      TANDEM_FUZZ_CHECK(layout.status().code() == absl::StatusCode::kInvalidArgument);
      continue;
    }
    absl::StatusOr<KvLayout> back = FromProto(ToProto(*layout), role);
    TANDEM_FUZZ_CHECK(back.ok());
    TANDEM_FUZZ_CHECK(*back == *layout);  // every field (kv/kv_layout.h)
    // Placement of the first ranks (a valid layout may have many; they are all alike).
    for (int32_t rank = 0; rank < std::min(layout->world(), 1024); ++rank) {
      const RankPlacement place = PlaceRank(layout->parallel, layout->dims, rank);
      TANDEM_FUZZ_CHECK(place.kv_head_begin >= 0 && place.kv_head_count >= 1 &&
                        place.kv_head_begin + place.kv_head_count <= layout->dims.num_kv_heads);
    }
  }
  return 0;
}
