#include "tests/security/test_pki.h"

#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tandem::testing {
namespace {

absl::Status Run(const std::string& dir, const std::string& command) {
  const std::string log = dir + "/openssl.log";
  if (std::system((command + " >>" + log + " 2>&1").c_str()) != 0) {
    return absl::InternalError(absl::StrCat("failed: ", command, "\n", ReadTextFile(log)));
  }
  return absl::OkStatus();
}

constexpr char kEc[] = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

absl::Status MakeCa(const std::string& dir, const std::string& name) {
  return Run(dir, absl::StrCat(TANDEM_OPENSSL_BIN, " req -x509", kEc, " -keyout ", dir, "/", name,
                               ".key -out ", dir, "/", name, ".pem -days 2 -subj /CN=", name,
                               " -addext basicConstraints=critical,CA:TRUE",
                               " -addext keyUsage=critical,keyCertSign,cRLSign"));
}

absl::Status MakeLeaf(const std::string& dir, const std::string& ca, const std::string& name) {
  const std::string base = absl::StrCat(dir, "/", name);
  if (absl::Status s = Run(dir, absl::StrCat(TANDEM_OPENSSL_BIN, " req", kEc, " -keyout ", base,
                                             ".key -out ", base, ".csr -subj /CN=", name));
      !s.ok()) {
    return s;
  }
  return Run(dir, absl::StrCat(TANDEM_OPENSSL_BIN, " x509 -req -in ", base, ".csr -CA ", dir, "/",
                               ca, ".pem -CAkey ", dir, "/", ca, ".key -CAcreateserial -days 2",
                               " -extfile ", dir, "/ext.cnf -out ", base, ".pem"));
}

}  // namespace

std::string ReadTextFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

absl::StatusOr<TestPki> MakeTestPki(const std::vector<std::string>& names) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tandem-pki-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  TestPki pki;
  pki.dir = templ;
  pki.ca = pki.Cert("ca");
  {
    std::ofstream ext(pki.dir + "/ext.cnf");
    ext << "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\n"
           "extendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n";
  }
  if (absl::Status s = MakeCa(pki.dir, "ca"); !s.ok()) return s;
  if (absl::Status s = MakeCa(pki.dir, "other_ca"); !s.ok()) return s;
  for (const std::string& name : names) {
    if (absl::Status s = MakeLeaf(pki.dir, "ca", name); !s.ok()) return s;
  }
  if (absl::Status s = MakeLeaf(pki.dir, "other_ca", "stranger"); !s.ok()) return s;
  return pki;
}

}  // namespace tandem::testing
