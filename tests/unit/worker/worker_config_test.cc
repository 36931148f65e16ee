#include "worker/worker_config.h"

#include <cstdlib>

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

}  // namespace
}  // namespace eft::worker
