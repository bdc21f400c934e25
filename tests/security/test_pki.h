// A throwaway PKI for the security tests, made with the openssl command line (as
// deploy/cluster.sh tls=1 does): a CA, certificates it signs for each requested name (serving and
// client use, for 127.0.0.1 / ::1 / localhost), and a second, unrelated CA with a "stranger"
// certificate, so tests can present a certificate the cluster must not trust.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::testing {

struct TestPki {
  std::string dir;
  std::string ca;  // PEM of the cluster's CA
  std::string Cert(const std::string& name) const { return dir + "/" + name + ".pem"; }
  std::string Key(const std::string& name) const { return dir + "/" + name + ".key"; }
  // Signed by another CA ("stranger.pem" / "stranger.key").
  std::string stranger_cert() const { return Cert("stranger"); }
  std::string stranger_key() const { return Key("stranger"); }
};

// In a fresh temp dir; INTERNAL with openssl's output when a command fails.
absl::StatusOr<TestPki> MakeTestPki(const std::vector<std::string>& names);

// The whole file ("" when unreadable).
std::string ReadTextFile(const std::string& path);

}  // namespace tandem::testing
