// TLS material of one Tandem process and the gRPC credentials made from it (docs/security.md).
//
// A server process runs TLS when it is given a certificate and its key (--tls_cert, --tls_key):
// its servers speak TLS with that certificate and its outgoing gRPC channels (router -> nodes,
// decode -> prefill, node -> router heartbeats) speak TLS and present the same certificate as
// their client certificate. A client-only program (the `tandem` CLI, tandem-bench) speaks TLS when
// given --tls_ca or a certificate; the certificate is then optional (needed only where the server
// requires one). --tls_ca is the CA that peers are checked against:
// clients verify the server's certificate with it (without it: the system's roots), and servers
// verify client certificates with it (ClientCertPolicy says whether one is required).
//
// Everything is read and checked once, at start-up, so a wrong path or a key that belongs to
// another certificate stops the process with a precise error instead of failing handshakes later.
//
// Thread-safety: TlsConfig is an immutable value; the functions are thread-safe.
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tandem {

// Paths as given on the command line; empty = not given.
struct TlsFiles {
  std::string cert;  // PEM certificate chain of this process (leaf first)
  std::string key;   // PEM private key of that certificate
  std::string ca;    // PEM CA certificate(s) that peers' certificates must chain to
};

struct TlsConfig {
  TlsFiles files;        // the paths the PEM below came from (the HTTP server reads paths)
  std::string cert_pem;  // empty: no TLS
  std::string key_pem;
  std::string ca_pem;  // empty: verify servers with the system roots, request no client cert
  bool enabled() const { return !cert_pem.empty() || !ca_pem.empty(); }
  bool verifies_peers() const { return !ca_pem.empty(); }
};

enum class TlsRole { kServer, kClient };

// Reads and checks the files. No files: a disabled config (plaintext). INVALID_ARGUMENT naming
// the flag for: a certificate without a key or the reverse, (kServer) --tls_ca without a
// certificate;
// NOT_FOUND for a missing file; PERMISSION_DENIED / INTERNAL for one that cannot be read;
// INVALID_ARGUMENT for a file that holds no PEM certificate / key, or a key that does not belong
// to the certificate.
[[nodiscard]] absl::StatusOr<TlsConfig> LoadTlsConfig(const TlsFiles& files, TlsRole role);

// How a TLS server treats client certificates (only with a CA: without one none is requested).
enum class ClientCertPolicy {
  kRequire,          // nodes: a client without a certificate signed by the CA is refused
  kVerifyIfPresent,  // router: public clients need none (API keys); one presented is verified
};

// Insecure credentials when `config` is disabled. Servers: REQUIRES config.cert_pem (kServer).
std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(const TlsConfig& config,
                                                               ClientCertPolicy policy);
std::shared_ptr<grpc::ChannelCredentials> GrpcChannelCredentials(const TlsConfig& config);

// "https" when `config` is enabled, else "http" (for log lines and printed URLs).
const char* HttpScheme(const TlsConfig& config);

}  // namespace tandem
