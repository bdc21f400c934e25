#include "serving/grpc_status.h"

#include <string>

#include "nlohmann/json.hpp"

namespace tandem {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  nlohmann::json payloads = nlohmann::json::object();
  status.ForEachPayload([&payloads](absl::string_view url, const absl::Cord& payload) {
    payloads[std::string(url)] = std::string(payload);
  });
  std::string details;
  if (!payloads.empty()) {
    details = payloads.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      details);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  if (status.error_details().empty()) return out;
  // Details that are not ours (another server's) are ignored, not an error of their own.
  const nlohmann::json payloads =
      nlohmann::json::parse(status.error_details(), nullptr, /*allow_exceptions=*/false);
  if (!payloads.is_object()) return out;
  for (const auto& [url, payload] : payloads.items()) {
    if (payload.is_string()) out.SetPayload(url, absl::Cord(payload.get<std::string>()));
  }
  return out;
}

}  // namespace tandem
