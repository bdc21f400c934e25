#include "kv_transfer/ucx/testing/transports.h"

namespace tandem::testing {

std::string TransportName(Transport t) {
  switch (t) {
    case Transport::kTcp:
      return "Tcp";
    case Transport::kSharedMemoryAndTcp:
      return "SharedMemoryAndTcp";
    case Transport::kSharedMemory:
      break;
  }
  return "SharedMemory";
}

std::vector<std::pair<std::string, std::string>> UcxSettings(Transport t) {
  if (t == Transport::kTcp) return {{"TLS", "tcp"}, {"NET_DEVICES", "lo"}};
  if (t == Transport::kSharedMemoryAndTcp) return {{"TLS", "sm,tcp"}, {"NET_DEVICES", "lo"}};
  return {{"TLS", "sm,self"}};
}

std::vector<std::pair<std::string, std::string>> UcxEnvironment(Transport t) {
  std::vector<std::pair<std::string, std::string>> env;
  for (const auto& [name, value] : UcxSettings(t)) env.emplace_back("UCX_" + name, value);
  return env;
}

}  // namespace tandem::testing
