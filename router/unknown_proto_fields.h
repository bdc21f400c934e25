// The gRPC side of "no request field is silently ignored": a Router.Generate request carrying a
// field this router's schema does not know (a newer client asking for something this build
// cannot do: protobuf keeps such fields as unknown fields and would otherwise ignore them) is
// refused rather than run without it. The HTTP API ignores unknown JSON fields instead (as vLLM
// does, logging each name once), because JSON clients send extra fields routinely; a protobuf
// field a client sets is always one it means.
//
// Pure (protobuf reflection only); thread-safe.
#pragma once

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace tandem {

// INVALID_ARGUMENT naming the message and field number of the first unknown field in `message`
// or any message nested in it ("GenerateRequest.sampling has field number 17, which this router
// does not know: ..."); OK when there is none.
[[nodiscard]] absl::Status RefuseUnknownFields(const google::protobuf::Message& message);

}  // namespace tandem
