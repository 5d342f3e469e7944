// The slot network's layout is a contract with the guest image (docs/guest.md) and with the
// jailer's ip and nftables setup: these values may change only together with both.
#include "common/slot_network.h"

#include <gtest/gtest.h>

namespace deskbox::slot_network {
namespace {

TEST(SlotNetworkTest, GuestContract) {
  EXPECT_STREQ(kGuestIPv4, "10.88.0.2");
  EXPECT_STREQ(kGuestIPv6, "fd88:de5b::2");
  EXPECT_STREQ(kHostIPv4, "10.88.0.1");
  EXPECT_STREQ(kHostIPv6, "fd88:de5b::1");
  EXPECT_STREQ(kNet4, ("10.88.0.0/" + std::to_string(kPrefixLength4)).c_str());
  EXPECT_STREQ(kNet6, ("fd88:de5b::/" + std::to_string(kPrefixLength6)).c_str());
  EXPECT_EQ(kGuestRfbPort, 5900);
  EXPECT_EQ(kGuestCdpPort, 9222);
}

TEST(SlotNetworkTest, HostPortForms) {
  EXPECT_EQ(GuestHostPort(kGuestRfbPort), "10.88.0.2:5900");
  EXPECT_EQ(GuestCdpHostPort(), "10.88.0.2:9222");
  EXPECT_EQ(GuestHostPort(1), "10.88.0.2:1");
}

}  // namespace
}  // namespace deskbox::slot_network
