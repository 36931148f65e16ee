// common/net_address.h against this host's real interfaces and resolver (lo exists everywhere, and
// "localhost" resolves to it), and the rule for a rank's addresses (docs/architecture.md, "Rank
// traffic and the node's address") case by case, with its one-line messages.
#include "common/net_address.h"

#include <unistd.h>

#include <gtest/gtest.h>

namespace eft::net {
namespace {

TEST(NetAddressTest, LoopbackAddresses) {
  for (const char* a : {"127.0.0.1", "127.0.1.1", "127.255.255.254", "::1", "::ffff:127.0.0.1", "localhost"}) {
    EXPECT_TRUE(IsLoopback(a)) << a;
  }
  for (const char* a : {"10.0.0.1", "192.168.1.127", "128.0.0.1", "::", "::2", "fe80::1", "::ffff:10.0.0.1", "",
                        "node1", "127.0.0.1.example.org"}) {
    EXPECT_FALSE(IsLoopback(a)) << a;
  }
}

TEST(NetAddressTest, NumericAddressesAreTheirCanonicalSelves) {
  EXPECT_EQ(*ResolveNumeric("10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(*ResolveNumeric("0:0:0:0:0:0:0:1"), "::1");
  EXPECT_EQ(*ResolveNodeAddress("192.0.2.7"), "192.0.2.7") << "a numeric address is not looked up";
}

TEST(NetAddressTest, NamesResolveAndUnknownOnesSaySo) {
  auto localhost = ResolveNumeric("localhost");
  ASSERT_TRUE(localhost.ok()) << localhost.status();
  EXPECT_TRUE(IsLoopback(*localhost)) << *localhost;

  auto unknown = ResolveNumeric("no-such-host.invalid");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("host name no-such-host.invalid does not resolve"), std::string::npos)
      << unknown.status();
  auto neither = ResolveNodeAddress("no-such-host.invalid");
  ASSERT_FALSE(neither.ok());
  EXPECT_NE(neither.status().message().find(
                "no-such-host.invalid is not a network interface of this host, and host name no-such-host.invalid "
                "does not resolve"),
            std::string::npos)
      << neither.status();
  EXPECT_FALSE(ResolveNumeric("").ok());
  EXPECT_FALSE(ResolveNodeAddress("").ok());
}

// lo is 127.0.0.1 with the subnet 127.0.0.0/8 on every Linux host.
TEST(NetAddressTest, InterfacesAndTheirAddresses) {
  EXPECT_EQ(*AddressOfInterface("lo"), "127.0.0.1");
  EXPECT_EQ(*ResolveNodeAddress("lo"), "127.0.0.1") << "an interface name is that interface's address";
  EXPECT_EQ(AddressOfInterface("no-such-if0").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*InterfaceOf("127.0.0.1"), "lo");
  EXPECT_EQ(*InterfaceOf("127.0.1.1"), "lo") << "within lo's subnet: what a host name often maps to";
  EXPECT_EQ(InterfaceOf("203.0.113.254").status().code(), StatusCode::kNotFound)
      << "TEST-NET-3 (RFC 5737), on no interface here";
  EXPECT_EQ(InterfaceOf("node1").status().code(), StatusCode::kInvalidArgument);
}

TEST(NetAddressTest, TheNetworkStackIsTheKernelsAndTheNamespaces) {
  const std::string id = NetworkStackId();
  ASSERT_FALSE(id.empty()) << "/proc/sys/kernel/random/boot_id and /proc/self/ns/net";
  EXPECT_EQ(id, NetworkStackId()) << "stable";
  const size_t slash = id.find('/');
  ASSERT_NE(slash, std::string::npos) << id;
  const std::string inode = id.substr(slash + 1);
  EXPECT_TRUE(!inode.empty() && inode.find_first_not_of("0123456789") == std::string::npos)
      << "the namespace's inode number: " << id;
}

// A rank of a job on three nodes with two ranks each, on node1.
RankAddresses Rank(std::string node_address, std::string master, std::optional<bool> share) {
  RankAddresses r;
  r.world = 6;
  r.local_world = 2;
  r.node_name = "node1";
  r.node_address = std::move(node_address);
  r.master_addr = master;
  r.master_is_loopback = IsLoopback(master);
  r.nodes_share_loopback = share;
  return r;
}

TEST(RankAddressesTest, OneNodeUsesLoopbackFreely) {
  RankAddresses r = Rank("127.0.1.1", "10.0.0.2", false);
  r.world = 2;
  EXPECT_TRUE(CheckRankAddresses(r).ok()) << "every rank on this node";
}

TEST(RankAddressesTest, RealAddressesAreFine) {
  for (std::optional<bool> share : {std::optional<bool>(), std::optional<bool>(true), std::optional<bool>(false)}) {
    EXPECT_TRUE(CheckRankAddresses(Rank("10.0.0.1", "10.0.0.2", share)).ok());
  }
}

// Several workers on one host, all given --address 127.0.0.1 (the tests, the demo), or some with a
// real address: the controller says they share one network stack.
TEST(RankAddressesTest, AClusterOnOneHostTalksOverLoopback) {
  EXPECT_TRUE(CheckRankAddresses(Rank("127.0.0.1", "127.0.0.1", true)).ok());
  EXPECT_TRUE(CheckRankAddresses(Rank("127.0.0.1", "10.0.0.2", true)).ok());
  EXPECT_TRUE(CheckRankAddresses(Rank("10.0.0.1", "127.0.0.1", true)).ok());
  EXPECT_TRUE(CheckRankAddresses(Rank("127.0.0.1", "127.0.0.1", std::nullopt)).ok())
      << "not known: both loopback is a cluster on one host as far as addresses tell";
}

// The case: node1's name resolves to 127.0.1.1, the other workers have real addresses.
TEST(RankAddressesTest, ALoopbackNodeAddressAmongRealOnesIsRefused) {
  Status s = CheckRankAddresses(Rank("127.0.1.1", "10.0.0.2", false));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "node address 127.0.1.1 (node1) is a loopback address, but this job's ranks span 3 nodes that are not all "
            "on this host: start eft-worker on node1 with --address (or --data-address) set to an address the other "
            "nodes reach");
  // Rank 0 on node1 too: MASTER_ADDR is node1's address; its own ranks name node1 all the same.
  EXPECT_EQ(CheckRankAddresses(Rank("127.0.1.1", "127.0.1.1", false)).message(), s.message());
  // What the controller did not say (an older one): the addresses disagree.
  Status unknown = CheckRankAddresses(Rank("127.0.1.1", "10.0.0.2", std::nullopt));
  EXPECT_EQ(unknown.message(),
            "node address 127.0.1.1 (node1) is a loopback address, but this job's ranks span 3 nodes and MASTER_ADDR "
            "10.0.0.2 is on another host: start eft-worker on node1 with --address (or --data-address) set to an "
            "address the other nodes reach");
}

// Rank 0's node is the one with the loopback address; this rank's node is fine.
TEST(RankAddressesTest, ALoopbackMasterForARankOnAnotherHostIsRefused) {
  for (std::optional<bool> share : {std::optional<bool>(false), std::optional<bool>()}) {
    Status s = CheckRankAddresses(Rank("10.0.0.1", "127.0.1.1", share));
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.message(),
              "MASTER_ADDR 127.0.1.1 is a loopback address, but this job's ranks span 3 nodes and this one (node1, "
              "10.0.0.1) is not on rank 0's host: start eft-worker on rank 0's node with --address (or "
              "--data-address) set to an address the other nodes reach");
  }
}

// Every worker's name resolves to loopback but they are on different hosts: the addresses agree,
// only the network stacks tell.
TEST(RankAddressesTest, LoopbackEverywhereOnSeveralHostsIsRefused) {
  EXPECT_EQ(CheckRankAddresses(Rank("127.0.1.1", "127.0.1.1", false)).code(), StatusCode::kFailedPrecondition);
}

// No launcher address (torchrun, Slurm): what the host name resolves to, when Gloo would bind it.
TEST(RankAddressesTest, WithoutANodeAddressTheHostNamesIsChecked) {
  RankAddresses r = Rank("", "127.0.0.1", std::nullopt);
  EXPECT_TRUE(CheckRankAddresses(r).ok()) << "MASTER_ADDR on loopback: a local run, bound to loopback";
  r = Rank("", "10.0.0.2", std::nullopt);
  EXPECT_TRUE(CheckRankAddresses(r).ok()) << "the collectives pick their interface themselves";
  r.node_address = "127.0.1.1";
  r.node_address_from_host_name = true;
  Status s = CheckRankAddresses(r);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "this host's name node1 resolves to 127.0.1.1, a loopback address, which Gloo would bind, but this job's "
            "ranks span 3 nodes and MASTER_ADDR 10.0.0.2 is on another host: map node1 to an address the other nodes "
            "reach (/etc/hosts) or set GLOO_SOCKET_IFNAME to the interface that reaches them (under eft-worker: "
            "--address or --data-address)");
}

}  // namespace
}  // namespace eft::net
