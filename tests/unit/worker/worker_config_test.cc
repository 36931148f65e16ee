#include "worker/worker_config.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include "common/daemon_settings.h"
#include "worker/snapshot_store.h"

namespace eft::worker {
namespace {

// Restores CUDA_VISIBLE_DEVICES after each test.
class WorkerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    had_ = v != nullptr;
    if (had_) saved_ = v;
  }
  void TearDown() override {
    if (had_) {
      ::setenv("CUDA_VISIBLE_DEVICES", saved_.c_str(), 1);
    } else {
      ::unsetenv("CUDA_VISIBLE_DEVICES");
    }
  }
  bool had_ = false;
  std::string saved_;
};

TEST_F(WorkerConfigTest, SlotsFollowCudaVisibleDevices) {
  ::setenv("CUDA_VISIBLE_DEVICES", "3,5,7", 1);
  EXPECT_EQ(DiscoverGpus(), (std::vector<std::string>{"3", "5", "7"}));
  WorkerConfig c;
  ASSERT_TRUE(FinalizeWorkerConfig(&c).ok());
  EXPECT_EQ(c.slots, 3);
  EXPECT_EQ(c.gpu_ids, (std::vector<std::string>{"3", "5", "7"}));

  WorkerConfig two;
  two.slots = 2;
  ASSERT_TRUE(FinalizeWorkerConfig(&two).ok());
  EXPECT_EQ(two.gpu_ids, (std::vector<std::string>{"3", "5"})) << "the first N visible GPUs";

  WorkerConfig too_many;
  too_many.slots = 4;
  Status s = FinalizeWorkerConfig(&too_many);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("only 3 GPUs are visible"), std::string::npos) << s;
}

TEST_F(WorkerConfigTest, NoGpusMeansOneCpuSlotUnlessToldOtherwise) {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_TRUE(DiscoverGpus().empty());
  WorkerConfig c;
  ASSERT_TRUE(FinalizeWorkerConfig(&c).ok());
  EXPECT_EQ(c.slots, 1);
  EXPECT_TRUE(c.gpu_ids.empty());
  WorkerConfig four;
  four.slots = 4;
  ASSERT_TRUE(FinalizeWorkerConfig(&four).ok());
  EXPECT_EQ(four.slots, 4);
  ::setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  EXPECT_TRUE(DiscoverGpus().empty());
}

TEST_F(WorkerConfigTest, DefaultsAndBadNames) {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  WorkerConfig c;
  ASSERT_TRUE(FinalizeWorkerConfig(&c).ok());
  EXPECT_FALSE(c.name.empty()) << "the host name";
  EXPECT_EQ(c.address, c.name);
  EXPECT_EQ(c.work_dir, "/tmp/eft-worker-" + c.name);
  WorkerConfig bad;
  bad.name = "node 1/../x";
  EXPECT_FALSE(FinalizeWorkerConfig(&bad).ok());
}

// The data address (docs/architecture.md, "Rank traffic and the node's address"): an interface name
// is its IPv4 address, a numeric address is itself, a name is resolved, each once, with the interface
// that holds it; one that does not resolve stops the worker with the setting's name.
TEST_F(WorkerConfigTest, TheDataAddressIsResolvedOnceToANumericAddress) {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  WorkerConfig lo;
  lo.address = "192.0.2.10";
  lo.data_address = "lo";
  ASSERT_TRUE(FinalizeWorkerConfig(&lo).ok());
  EXPECT_EQ(lo.node_address, "127.0.0.1") << "lo's IPv4 address";
  EXPECT_EQ(lo.node_interface, "lo");
  EXPECT_EQ(lo.address, "192.0.2.10") << "the address stays as given";
  EXPECT_FALSE(lo.network_stack.empty());

  WorkerConfig numeric;
  numeric.address = "127.0.0.1";
  ASSERT_TRUE(FinalizeWorkerConfig(&numeric).ok());
  EXPECT_EQ(numeric.node_address, "127.0.0.1") << "without --data-address, --address";
  EXPECT_EQ(numeric.node_interface, "lo");

  WorkerConfig named;
  named.data_address = "localhost";
  ASSERT_TRUE(FinalizeWorkerConfig(&named).ok());
  EXPECT_TRUE(named.node_address == "127.0.0.1" || named.node_address == "::1") << named.node_address;

  WorkerConfig elsewhere;
  elsewhere.data_address = "203.0.113.254";  // TEST-NET-3: on no interface here (a NAT'd address)
  ASSERT_TRUE(FinalizeWorkerConfig(&elsewhere).ok());
  EXPECT_EQ(elsewhere.node_address, "203.0.113.254");
  EXPECT_EQ(elsewhere.node_interface, "") << "NCCL then picks its interface itself";

  WorkerConfig unknown;
  unknown.data_address = "no-such-host.invalid";
  Status s = FinalizeWorkerConfig(&unknown);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("--data-address no-such-host.invalid: cannot tell the address rank traffic uses: "
                              "no-such-host.invalid is not a network interface of this host, and host name "
                              "no-such-host.invalid does not resolve",
                              0),
            0u)
      << s;
  WorkerConfig unknown_address;
  unknown_address.address = "no-such-host.invalid";
  EXPECT_EQ(FinalizeWorkerConfig(&unknown_address).message().rfind("--address no-such-host.invalid: ", 0), 0u);
}

TEST_F(WorkerConfigTest, ALoopbackDataAddressIsWarnedAboutInOneLine) {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  WorkerConfig c;
  c.address = "127.0.0.1";
  ASSERT_TRUE(FinalizeWorkerConfig(&c).ok());
  EXPECT_EQ(LoopbackWarning(c),
            "rank traffic address 127.0.0.1 (--address 127.0.0.1) is a loopback address: jobs on this node alone, or "
            "on workers of this host only, work; ranks of jobs that span nodes on other hosts will refuse it. Set "
            "--address (or --data-address) to an address other hosts reach");
  c.data_address = "lo";
  EXPECT_NE(LoopbackWarning(c).find("(--data-address lo)"), std::string::npos);
  WorkerConfig real;
  real.address = "192.0.2.254";
  ASSERT_TRUE(FinalizeWorkerConfig(&real).ok());
  EXPECT_EQ(LoopbackWarning(real), "");
  EXPECT_EQ(LoopbackWarning(WorkerConfig()), "") << "not resolved: nothing to say";
}

// The config file's key, as deploy/config/worker.yaml documents it.
TEST_F(WorkerConfigTest, DataAddressIsAConfigFileKey) {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("eft-worker-data-" + std::to_string(::getpid()) + ".yaml")).string();
  std::ofstream(path) << "controller: 127.0.0.1:1\naddress: 192.0.2.10\ndata_address: lo\n";
  WorkerSettings s;
  DaemonSettings settings(nullptr, "");
  AddWorkerSettings(&settings, &s);
  ASSERT_TRUE(settings.ApplyFile(path).ok());
  std::filesystem::remove(path);
  auto c = ResolveWorkerConfig(s);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data_address, "lo");
  EXPECT_EQ(c->node_address, "127.0.0.1");
}

// Memory snapshots: on by default, in /dev/shm, with a quarter of the memory; the flags change each,
// and --snapshots=false turns them off (no directory: no service, no EFT_SNAPSHOT_DIR).
TEST_F(WorkerConfigTest, SnapshotSettings) {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  auto parse = [](std::vector<std::string> args) -> Result<WorkerConfig> {
    CLI::App app{"eft-worker"};
    WorkerSettings s;
    DaemonSettings settings(&app, "");
    AddWorkerSettings(&settings, &s);
    args.insert(args.begin(), {"eft-worker", "--controller", "127.0.0.1:1", "--name", "n1"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      return Status::InvalidArgument(e.what());
    }
    EFT_RETURN_IF_ERROR(settings.Apply());
    return ResolveWorkerConfig(s);
  };
  auto c = parse({});
  ASSERT_TRUE(c.ok()) << c.status();
  // In memory, and one per work dir: two workers named n1 with other work dirs never share it.
  if (std::filesystem::is_directory("/dev/shm")) {
    EXPECT_EQ(c->snapshot_dir.rfind("/dev/shm/eft-worker-n1-", 0), 0u) << c->snapshot_dir;
    EXPECT_EQ(c->snapshot_dir.size(), std::string("/dev/shm/eft-worker-n1-").size() + 8) << c->snapshot_dir;
    auto other = parse({"--work-dir", "/tmp/eft-worker-elsewhere"});
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_NE(other->snapshot_dir, c->snapshot_dir);
  } else {
    EXPECT_EQ(c->snapshot_dir, c->work_dir + "/snapshots");
  }
  EXPECT_EQ(c->snapshot_budget_bytes, DefaultSnapshotBudget());
  EXPECT_EQ(c->snapshot_port, 0);
  c = parse({"--snapshot-dir", "/tmp/s", "--snapshot-memory-mb", "300", "--snapshot-port", "7123"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->snapshot_dir, "/tmp/s");
  EXPECT_EQ(c->snapshot_budget_bytes, int64_t{300} << 20);
  EXPECT_EQ(c->snapshot_port, 7123);
  c = parse({"--snapshots=false", "--snapshot-dir", "/tmp/s"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->snapshot_dir, "") << "off";
  c = parse({"--snapshots"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->snapshot_dir.empty());
  EXPECT_FALSE(parse({"--snapshot-memory-mb", "-1"}).ok());
}

// The files behind the endpoint: the join token's first non-empty line, the TLS pairing rule and
// unreadable PEM files, each refused with a message naming the setting.
TEST_F(WorkerConfigTest, ResolveReadsTheJoinTokenAndTlsFiles) {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  std::string dir = (std::filesystem::temp_directory_path() / ("eft-worker-settings-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/join") << "\n  s3cret-token  \nsecond line\n";
  std::ofstream(dir + "/empty") << "\n   \n";
  std::ofstream(dir + "/ca.pem") << "PEM";

  WorkerSettings s;
  s.config.name = "n1";
  s.join_token_file = dir + "/join";
  s.tls_ca = dir + "/ca.pem";
  auto c = ResolveWorkerConfig(s);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->endpoint.join_token, "s3cret-token");
  EXPECT_TRUE(c->endpoint.tls.enabled) << "--tls-ca implies TLS";
  EXPECT_EQ(c->endpoint.tls.root_certs_pem, "PEM");
  EXPECT_EQ(c->slots, 1) << "finalized";

  s.join_token_file = dir + "/empty";
  EXPECT_EQ(ResolveWorkerConfig(s).status().message(), "--join-token-file " + dir + "/empty: the file is empty");
  s.join_token_file = "";
  s.tls_cert = dir + "/ca.pem";
  EXPECT_EQ(ResolveWorkerConfig(s).status().message(), "--tls-cert and --tls-key go together");
  s.tls_cert = "";
  s.tls_ca = dir + "/gone.pem";
  EXPECT_EQ(ResolveWorkerConfig(s).status().message(),
            "cannot read the TLS files (cannot read " + dir + "/gone.pem: No such file or directory)");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace eft::worker
