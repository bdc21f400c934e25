// Why a generation ended: the one finish-reason type of Tandem, shared by the engines, the nodes
// and the router (tandem.v1.FinishReason is its wire form; proto/convert/finish_reason_proto.h
// converts). Pure.
#pragma once

#include <cstdint>
#include <string_view>

namespace tandem {

enum class FinishReason : uint8_t {
  kStop,       // a stop token was generated
  kLength,     // the token budget was spent
  kCancelled,  // the caller cancelled (never reaches a client as a finish)
  kError,      // the engine failed the request (never reaches a client as a finish)
};

// "stop", "length", "cancelled", "error". The router's GenerateFinal.finish_reason carries the
// name, so clients read "stop" or "length".
constexpr std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

}  // namespace tandem
