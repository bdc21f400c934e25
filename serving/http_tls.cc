#include "serving/http_tls.h"

#include <openssl/err.h>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

// The first queued OpenSSL error, or `fallback`; the queue is cleared.
std::string OpenSslError(const char* fallback) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return fallback;
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

}  // namespace

absl::StatusOr<SslCtxPtr> LoadServerTls(const std::string& cert_file, const std::string& key_file) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  auto refuse = [&](const char* what) {
    return absl::InvalidArgumentError(absl::StrCat("HTTPS: cannot load certificate ", cert_file,
                                                   " with key ", key_file, ": ",
                                                   OpenSslError(what)));
  };
  if (ctx == nullptr) return refuse("no SSL context");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert_file.c_str()) != 1) {
    return refuse("unreadable certificate");
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return refuse("unreadable key");
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) return refuse("key does not match");
  return ctx;
}

}  // namespace tandem
