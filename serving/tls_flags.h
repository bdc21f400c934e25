// --tls_cert, --tls_key, --tls_ca: accepted by tandem-router, tandem-prefill, tandem-decode and
// the `tandem` CLI (docs/security.md). Defined once here so every program reads them alike.
#pragma once

#include "serving/tls_credentials.h"

namespace tandem {

TlsFiles TlsFilesFromFlags();

}  // namespace tandem
