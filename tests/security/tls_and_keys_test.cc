// serving/tls_credentials.h and serving/api_keys.h: the start-up checks of certificate files
// (each error names the flag and the file) and the API key file format and comparison.
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "serving/api_keys.h"
#include "serving/tls_credentials.h"
#include "tests/security/test_pki.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

class TlsConfigTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<TestPki> pki = MakeTestPki({"node", "other"});
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = new TestPki(*std::move(pki));
  }
  static void TearDownTestSuite() { delete pki_; }
  static TestPki* pki_;
};
TestPki* TlsConfigTest::pki_ = nullptr;

TEST_F(TlsConfigTest, NoFilesIsPlaintext) {
  absl::StatusOr<TlsConfig> c = LoadTlsConfig({}, TlsRole::kServer);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->enabled());
  EXPECT_STREQ(HttpScheme(*c), "http");
}

TEST_F(TlsConfigTest, LoadsAMatchingPairAndTheCa) {
  absl::StatusOr<TlsConfig> c =
      LoadTlsConfig({pki_->Cert("node"), pki_->Key("node"), pki_->ca}, TlsRole::kServer);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->enabled());
  EXPECT_TRUE(c->verifies_peers());
  EXPECT_THAT(c->cert_pem, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_STREQ(HttpScheme(*c), "https");
}

TEST_F(TlsConfigTest, CertificateWithoutKeyAndTheReverseAreRefused) {
  absl::StatusOr<TlsConfig> c = LoadTlsConfig({pki_->Cert("node"), "", ""}, TlsRole::kServer);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("--tls_cert is given without --tls_key"));
  c = LoadTlsConfig({"", pki_->Key("node"), ""}, TlsRole::kClient);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("--tls_key is given without --tls_cert"));
}

TEST_F(TlsConfigTest, ACaAloneIsAClientConfigButNotAServerOne) {
  absl::StatusOr<TlsConfig> server = LoadTlsConfig({"", "", pki_->ca}, TlsRole::kServer);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("--tls_ca is given without --tls_cert"));
  absl::StatusOr<TlsConfig> client = LoadTlsConfig({"", "", pki_->ca}, TlsRole::kClient);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(client->enabled());
}

TEST_F(TlsConfigTest, AMissingFileIsNotFoundNamingFlagAndPath) {
  const std::string missing = pki_->dir + "/nope.pem";
  absl::StatusOr<TlsConfig> c =
      LoadTlsConfig({pki_->Cert("node"), pki_->Key("node"), missing}, TlsRole::kServer);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("--tls_ca=" + missing + ": cannot open"));
  c = LoadTlsConfig({missing, pki_->Key("node"), ""}, TlsRole::kServer);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("--tls_cert=" + missing));
}

TEST_F(TlsConfigTest, AFileWithoutPemIsRefused) {
  const std::string junk = pki_->dir + "/junk.pem";
  std::ofstream(junk) << "not a certificate\n";
  absl::StatusOr<TlsConfig> c = LoadTlsConfig({junk, pki_->Key("node"), ""}, TlsRole::kServer);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("no PEM certificate"));
  c = LoadTlsConfig({pki_->Cert("node"), junk, ""}, TlsRole::kServer);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("no unencrypted PEM private key"));
}

TEST_F(TlsConfigTest, AKeyOfAnotherCertificateIsAMismatch) {
  absl::StatusOr<TlsConfig> c =
      LoadTlsConfig({pki_->Cert("node"), pki_->Key("other"), pki_->ca}, TlsRole::kServer);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("key/certificate mismatch"));
}

TEST(ApiKeysTest, ParsesKeysSkippingCommentsAndBlankLines) {
  absl::StatusOr<ApiKeys> keys =
      ApiKeys::Parse("# team A\nsk-alpha-1\n\n   sk-beta-2  \n# sk-commented\n", "keys.txt");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_TRUE(keys->Accepts("Bearer sk-alpha-1"));
  EXPECT_TRUE(keys->Accepts("bearer   sk-beta-2 "));
  EXPECT_FALSE(keys->Accepts("Bearer sk-commented"));
  EXPECT_FALSE(keys->Accepts("Bearer sk-alpha-"));
  EXPECT_FALSE(keys->Accepts("Bearer sk-alpha-12"));
  EXPECT_FALSE(keys->Accepts("sk-alpha-1"));  // no scheme
  EXPECT_FALSE(keys->Accepts("Basic sk-alpha-1"));
  EXPECT_FALSE(keys->Accepts("Bearer "));
  EXPECT_FALSE(keys->Accepts(""));
}

TEST(ApiKeysTest, ABadLineIsRefusedByNumberWithoutEchoingIt) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Parse("good-key\nsecret-XYZ with-a-space\n", "keys.txt");
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(keys.status().message(), HasSubstr("keys.txt line 2"));
  EXPECT_THAT(std::string(keys.status().message()), ::testing::Not(HasSubstr("XYZ")));
}

TEST(ApiKeysTest, AFileWithoutKeysIsRefused) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Parse("# nothing here\n\n", "keys.txt");
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(keys.status().message(), HasSubstr("holds no key"));
}

TEST(ApiKeysTest, AMissingFileIsNotFound) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Load("/nonexistent/tandem-keys.txt");
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(keys.status().message(), HasSubstr("--api_keys_file=/nonexistent/tandem-keys.txt"));
}

TEST(ApiKeysTest, BearerTokenParsing) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("  BEARER  abc  "), "abc");
  EXPECT_EQ(BearerToken("Bearerabc"), std::nullopt);
  EXPECT_EQ(BearerToken("Token abc"), std::nullopt);
}

}  // namespace
}  // namespace tandem::testing
