#include "serving/advertise_address.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(AdvertisedAddress, ExplicitAdvertiseWins) {
  absl::StatusOr<std::string> a = AdvertisedAddress("0.0.0.0:0", 4242, "10.0.0.5:4242");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "10.0.0.5:4242");
}

TEST(AdvertisedAddress, ListenHostGetsTheBoundPort) {
  absl::StatusOr<std::string> a = AdvertisedAddress("127.0.0.1:0", 4242, "");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "127.0.0.1:4242");
  a = AdvertisedAddress("[::1]:0", 7, "");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "[::1]:7");
  a = AdvertisedAddress("prefill-3.example:50051", 50051, "");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "prefill-3.example:50051");
}

TEST(AdvertisedAddress, WildcardWithoutAdvertiseIsRefusedNamingTheFlag) {
  for (const char* listen : {"0.0.0.0:50051", "[::]:50051", ":50051", "[::0]:1"}) {
    const absl::StatusOr<std::string> a = AdvertisedAddress(listen, 50051, "");
    ASSERT_FALSE(a.ok()) << listen;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << listen;
    EXPECT_NE(a.status().message().find("--advertise"), std::string::npos) << a.status();
    EXPECT_NE(a.status().message().find(listen), std::string::npos) << a.status();
  }
}

TEST(ListenHost, SplitsHostFromPort) {
  EXPECT_EQ(ListenHost("1.2.3.4:5"), "1.2.3.4");
  EXPECT_EQ(ListenHost("[::]:5"), "[::]");
  EXPECT_EQ(ListenHost("::1"), "::1");
  EXPECT_EQ(ListenHost("host"), "host");
  EXPECT_TRUE(IsWildcardHost(ListenHost("0.0.0.0:1")));
  EXPECT_FALSE(IsWildcardHost(ListenHost("10.0.0.1:1")));
}

}  // namespace
}  // namespace tandem
