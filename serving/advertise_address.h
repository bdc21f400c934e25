// The address a node hands out to the router and to its peers (heartbeats, KV handles, transfer
// metadata). Pure.
//
// --advertise wins when given. Otherwise the node advertises its --listen host with the port the
// server bound, which is only meaningful when that host is one other machines can dial: a
// wildcard (0.0.0.0, [::], empty host) would be handed out as "0.0.0.0:PORT" and every peer
// would dial itself, so it is refused with an error naming --advertise.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem {

// True for "0.0.0.0", "::", "[::]", "*" and an empty host.
bool IsWildcardHost(absl::string_view host);

// The host part of "host:port" / "[v6]:port" (brackets kept), or the whole string without ':'.
absl::string_view ListenHost(absl::string_view listen);

// The advertised "host:port". INVALID_ARGUMENT when `advertise` is empty and `listen`'s host is
// a wildcard.
absl::StatusOr<std::string> AdvertisedAddress(absl::string_view listen, int bound_port,
                                              absl::string_view advertise);

}  // namespace tandem
