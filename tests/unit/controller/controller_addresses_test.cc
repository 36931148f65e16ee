// Where rank traffic goes, the controller's part (docs/architecture.md, "Rank traffic and the node's
// address"): each node's data address and network stack as its worker registers them, kept across a
// controller restart; MASTER_ADDR is the rank-0 node's data address (its address for an older worker);
// every rank is told whether all nodes of its attempt share one network stack.
#include "tests/unit/controller/controller_test_fixture.h"

namespace eft::controller {
namespace {

class ControllerAddressesTest : public ControllerTest {
 protected:
  // A worker of this version: its numeric data address and its network stack.
  v1::RegisterResponse RegisterAt(const std::string& node, const std::string& data_address,
                                  const std::string& network_stack) {
    v1::RegisterRequest req;
    req.set_node_name(node);
    req.set_address(node + ".example.org");
    req.set_data_address(data_address);
    req.set_network_stack(network_stack);
    req.set_slots(1);
    const std::string inc = node + "-inc1";
    if (auto it = incarnations_.find(node); it != incarnations_.end()) req.set_previous_incarnation(it->second);
    incarnations_[node] = inc;
    req.set_incarnation(inc);
    auto resp = c_->Register(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::RegisterResponse();
  }

  std::map<std::string, v1::Node> Nodes() {
    std::map<std::string, v1::Node> out;
    const v1::ListNodesResponse all = c_->ListNodes();
    for (const auto& n : all.nodes()) out[n.name()] = n;
    return out;
  }
};

TEST_F(ControllerAddressesTest, MasterAddrIsTheRankZeroNodesDataAddress) {
  RegisterAt("n1", "10.0.1.1", "boot-a/4026531840");
  RegisterAt("n2", "10.0.1.2", "boot-b/4026531840");
  const std::string id = Submit(Spec("two", 2, 2));
  c_->Tick();
  auto ranks = StartRanks({"n1", "n2"});
  ASSERT_EQ(ranks.size(), 2u);
  const std::string rank0 = ranks["n1"].key().rank() == 0 ? "n1" : "n2";
  const std::string expected = rank0 == "n1" ? "10.0.1.1" : "10.0.1.2";
  for (const auto& [node, a] : ranks) {
    EXPECT_EQ(a.master_addr(), expected) << node << ": the data address, not " << rank0 << ".example.org";
    ASSERT_TRUE(a.has_nodes_share_loopback()) << node;
    EXPECT_FALSE(a.nodes_share_loopback()) << "two hosts";
  }
  EXPECT_EQ(Job(id).attempts(0).master_addr(), expected);
  auto nodes = Nodes();
  EXPECT_EQ(nodes["n1"].address(), "n1.example.org");
  EXPECT_EQ(nodes["n1"].data_address(), "10.0.1.1");
}

// Several workers on one host (one kernel, one network namespace), as the tests and the demo run them.
TEST_F(ControllerAddressesTest, NodesInOneNetworkStackMayShareLoopback) {
  RegisterAt("n1", "127.0.0.1", "boot-a/4026531840");
  RegisterAt("n2", "127.0.0.1", "boot-a/4026531840");
  Submit(Spec("local", 2, 2));
  c_->Tick();
  for (const auto& [node, a] : StartRanks({"n1", "n2"})) {
    EXPECT_EQ(a.master_addr(), "127.0.0.1");
    ASSERT_TRUE(a.has_nodes_share_loopback()) << node;
    EXPECT_TRUE(a.nodes_share_loopback()) << node;
  }
}

// An older worker sends neither: its address is MASTER_ADDR, and whether loopback is shared is not known.
TEST_F(ControllerAddressesTest, AnOlderWorkersAddressIsUsedAndSharingIsNotKnown) {
  Register("n1");  // address n1.addr, no data address, no network stack
  RegisterAt("n2", "10.0.1.2", "boot-b/4026531840");
  Submit(Spec("mixed", 2, 2));
  c_->Tick();
  auto ranks = StartRanks({"n1", "n2"});
  ASSERT_EQ(ranks.size(), 2u);
  const bool n1_first = ranks["n1"].key().rank() == 0;
  for (const auto& [node, a] : ranks) {
    EXPECT_EQ(a.master_addr(), n1_first ? "n1.addr" : "10.0.1.2") << node;
    EXPECT_FALSE(a.has_nodes_share_loopback()) << node;
  }
  EXPECT_EQ(Nodes()["n1"].data_address(), "");
}

TEST_F(ControllerAddressesTest, TheDataAddressSurvivesARestartAndFollowsTheWorker) {
  RegisterAt("n1", "10.0.1.1", "boot-a/4026531840");
  Restart();
  EXPECT_EQ(Nodes()["n1"].data_address(), "10.0.1.1") << "stored with the node";
  RegisterAt("n1", "10.0.2.1", "boot-a/4026531840");  // restarted with another --data-address
  EXPECT_EQ(Nodes()["n1"].data_address(), "10.0.2.1");
  Restart();
  EXPECT_EQ(Nodes()["n1"].data_address(), "10.0.2.1");
  // And whether nodes share loopback is known again from the stored stacks: a job placed after the
  // nodes re-register gets the same answer as before.
  RegisterAt("n1", "127.0.0.1", "boot-a/1");
  RegisterAt("n2", "127.0.0.1", "boot-a/1");
  Submit(Spec("after", 2, 2));
  c_->Tick();
  for (const auto& [node, a] : StartRanks({"n1", "n2"})) EXPECT_TRUE(a.nodes_share_loopback()) << node;
}

}  // namespace
}  // namespace eft::controller
