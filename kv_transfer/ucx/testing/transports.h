// Test/benchmark support: the UCX settings that pin each transport Tandem supports, so both
// processes of a two-process run use the same one (docs/kv_transfer.md explains the choice).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tandem::testing {

// kSharedMemoryAndTcp is what processes on one host get with UCX's default transports: pools are
// mapped over shared memory, and TCP (which detects a failed peer) carries the connection set-up.
enum class Transport { kSharedMemory, kTcp, kSharedMemoryAndTcp };

std::string TransportName(Transport t);  // "SharedMemory" / "Tcp" / "SharedMemoryAndTcp"

// UCX settings, names without the UCX_ prefix (UcxOptions::config form):
//   shared memory: TLS=sm,self;  TCP over loopback: TLS=tcp, NET_DEVICES=lo;
//   both: TLS=sm,tcp, NET_DEVICES=lo.
std::vector<std::pair<std::string, std::string>> UcxSettings(Transport t);

// The same as environment variables for a child process: {"UCX_TLS", "tcp"}, ...
std::vector<std::pair<std::string, std::string>> UcxEnvironment(Transport t);

}  // namespace tandem::testing
