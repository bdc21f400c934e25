#include "serving/advertise_address.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem {

absl::string_view ListenHost(absl::string_view listen) {
  const size_t colon = listen.rfind(':');
  if (colon == absl::string_view::npos) return listen;
  // "::1" without brackets and without a port: an IPv6 host, not host:port.
  if (listen.front() != '[' && listen.find(':') != colon) return listen;
  return listen.substr(0, colon);
}

bool IsWildcardHost(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" || host == "*" ||
         host == "[::0]" || host == "::0";
}

absl::StatusOr<std::string> AdvertisedAddress(absl::string_view listen, int bound_port,
                                              absl::string_view advertise) {
  if (!advertise.empty()) return std::string(advertise);
  const absl::string_view host = ListenHost(listen);
  if (IsWildcardHost(host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", listen, " is a wildcard address, which peers cannot dial; pass --advertise=",
        "HOST:", bound_port, " with an address the router and the other nodes reach this node at"));
  }
  return absl::StrCat(host, ":", bound_port);
}

}  // namespace tandem
