#include "serving/tls_credentials.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

// The whole file, or NOT_FOUND / PERMISSION_DENIED / INTERNAL naming the flag and the path.
absl::StatusOr<std::string> ReadPemFile(const char* flag, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    const int err = errno;
    const std::string what = absl::StrCat(flag, "=", path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(what);
    if (err == EACCES) return absl::PermissionDeniedError(what);
    return absl::InternalError(what);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return absl::InternalError(absl::StrCat(flag, "=", path, ": read failed"));
  return ss.str();
}

std::unique_ptr<BIO, BioFree> MemBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate of `pem`, or nullptr.
std::unique_ptr<X509, X509Free> FirstCertificate(const std::string& pem) {
  auto bio = MemBio(pem);
  return std::unique_ptr<X509, X509Free>(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

}  // namespace

absl::StatusOr<TlsConfig> LoadTlsConfig(const TlsFiles& files, TlsRole role) {
  TlsConfig config;
  config.files = files;
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        files.cert.empty() ? "--tls_key is given without --tls_cert (both or neither)"
                           : "--tls_cert is given without --tls_key (both or neither)");
  }
  if (role == TlsRole::kServer && !files.ca.empty() && files.cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls_ca is given without --tls_cert/--tls_key: a server needs its own certificate to "
        "speak TLS");
  }
  if (!files.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile("--tls_ca", files.ca);
    if (!ca.ok()) return ca.status();
    if (FirstCertificate(*ca) == nullptr) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_ca=", files.ca, ": no PEM certificate in the file"));
    }
    config.ca_pem = *std::move(ca);
  }
  if (files.cert.empty()) return config;
  absl::StatusOr<std::string> cert = ReadPemFile("--tls_cert", files.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile("--tls_key", files.key);
  if (!key.ok()) return key.status();
  std::unique_ptr<X509, X509Free> x509 = FirstCertificate(*cert);
  if (x509 == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_cert=", files.cert, ": no PEM certificate in the file"));
  }
  auto key_bio = MemBio(*key);
  std::unique_ptr<EVP_PKEY, PkeyFree> pkey(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (pkey == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key=", files.key, ": no unencrypted PEM private key in the file"));
  }
  if (X509_check_private_key(x509.get(), pkey.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key=", files.key, " is not the private key of --tls_cert=", files.cert,
                     " (key/certificate mismatch)"));
  }
  config.cert_pem = *std::move(cert);
  config.key_pem = *std::move(key);
  return config;
}

std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(const TlsConfig& config,
                                                               ClientCertPolicy policy) {
  if (config.cert_pem.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      !config.verifies_peers() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
      : policy == ClientCertPolicy::kRequire
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = config.ca_pem;
  options.pem_key_cert_pairs.push_back({config.key_pem, config.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> GrpcChannelCredentials(const TlsConfig& config) {
  if (!config.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = config.ca_pem;  // empty: gRPC's default roots
  options.pem_private_key = config.key_pem;
  options.pem_cert_chain = config.cert_pem;
  return grpc::SslCredentials(options);
}

const char* HttpScheme(const TlsConfig& config) { return config.enabled() ? "https" : "http"; }

}  // namespace tandem
