// Test/benchmark support: the UCX settings that pin each transport Tandem supports, so both
// processes of a two-process run use the same one (docs/kv_transfer.md explains the choice).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tandem::testing {

enum class Transport { kSharedMemory, kTcp };

std::string TransportName(Transport t);  // "SharedMemory" / "Tcp"

// UCX settings, names without the UCX_ prefix (UcxOptions::config form):
//   shared memory: TLS=sm,self;  TCP over loopback: TLS=tcp, NET_DEVICES=lo.
std::vector<std::pair<std::string, std::string>> UcxSettings(Transport t);

// The same as environment variables for a child process: {"UCX_TLS", "tcp"}, ...
std::vector<std::pair<std::string, std::string>> UcxEnvironment(Transport t);

}  // namespace tandem::testing
