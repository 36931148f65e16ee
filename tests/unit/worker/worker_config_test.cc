#include "worker/worker_config.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

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
