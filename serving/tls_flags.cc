#include "serving/tls_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate of this process: its gRPC (and the router's HTTP) servers speak TLS, "
          "and it is the client certificate of its outgoing calls (needs --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA that peers' certificates must chain to: clients verify servers with it; nodes "
          "then require client certificates signed by it (mutual TLS), the router verifies those "
          "presented");

namespace tandem {

TlsFiles TlsFilesFromFlags() {
  return TlsFiles{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                  absl::GetFlag(FLAGS_tls_ca)};
}

}  // namespace tandem
