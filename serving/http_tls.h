// The OpenSSL server context of serving/http_server.h's HTTPS: the PEM certificate chain and
// private key files given to HttpServerOptions (checked to belong together), TLS 1.2 or later,
// no client certificate requested.
//
// Thread-safety: LoadServerTls is thread-safe; the context is shared read-only by connections.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tandem {

struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;

// INVALID_ARGUMENT naming both files when either cannot be loaded or they do not match.
[[nodiscard]] absl::StatusOr<SslCtxPtr> LoadServerTls(const std::string& cert_file,
                                                      const std::string& key_file);

}  // namespace tandem
