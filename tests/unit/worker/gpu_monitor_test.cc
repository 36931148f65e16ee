// GPU metrics: parsing nvidia-smi's CSV, joining GPUs to the jobs holding their slots, the polling
// monitor with an injected query, and the real command runner against small scripts standing in
// for nvidia-smi (answers, fails, hangs past its timeout, is missing).
#include "worker/gpu_monitor.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

namespace eft::worker {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// What `nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total
// --format=csv,noheader,nounits` prints on a two-GPU machine (one MIG-like GPU without utilisation).
constexpr const char* kTwoGpus =
    "0, GPU-5f1a2b3c-0000-1111-2222-333344445555, 37, 1024, 81559\n"
    "1, GPU-9e8d7c6b-aaaa-bbbb-cccc-ddddeeeeffff, [N/A], 80000, 81559\n";

TEST(GpuMonitorTest, ParsesNvidiaSmiCsv) {
  auto r = ParseNvidiaSmiCsv(kTwoGpus);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  const GpuReading& g0 = (*r)[0];
  EXPECT_EQ(g0.index, "0");
  EXPECT_EQ(g0.uuid, "GPU-5f1a2b3c-0000-1111-2222-333344445555");
  EXPECT_DOUBLE_EQ(g0.utilization_ratio.value(), 0.37);
  EXPECT_DOUBLE_EQ(g0.memory_used_bytes.value(), 1024.0 * 1048576);
  EXPECT_DOUBLE_EQ(g0.memory_total_bytes.value(), 81559.0 * 1048576);
  EXPECT_FALSE((*r)[1].utilization_ratio) << "[N/A] is absent, not 0";
  EXPECT_DOUBLE_EQ((*r)[1].memory_used_bytes.value(), 80000.0 * 1048576);

  auto crlf = ParseNvidiaSmiCsv("0, GPU-x, 5, 1, 2\r\n\r\n");
  ASSERT_TRUE(crlf.ok()) << crlf.status();
  EXPECT_EQ(crlf->size(), 1u);
  auto none = ParseNvidiaSmiCsv("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(GpuMonitorTest, RejectsWhatIsNotTheQueriedFormat) {
  auto fields = ParseNvidiaSmiCsv("0, GPU-x, 37, 1024\n");
  ASSERT_FALSE(fields.ok());
  EXPECT_NE(fields.status().message().find("line 1"), std::string::npos) << fields.status();
  auto number = ParseNvidiaSmiCsv("0, GPU-x, 37, 1024, 2048\n1, GPU-y, 12%, 1, 2\n");
  ASSERT_FALSE(number.ok());
  EXPECT_NE(number.status().message().find("line 2: utilization.gpu '12%'"), std::string::npos) << number.status();
  EXPECT_FALSE(ParseNvidiaSmiCsv("NVIDIA-SMI has failed because it couldn't communicate with the driver\n").ok());
}

TEST(GpuMonitorTest, JoinsGpusToTheJobsHoldingTheirSlots) {
  auto readings = ParseNvidiaSmiCsv(std::string(kTwoGpus) + "2, GPU-other, 99, 5, 10\n");
  ASSERT_TRUE(readings.ok());
  // Slot 0 is GPU 1, slot 1 is GPU 0 (CUDA_VISIBLE_DEVICES=1,0); GPU 2 belongs to another worker.
  auto uses = JoinGpusToJobs(*readings, {"1", "0"}, {{0, "17"}});
  ASSERT_EQ(uses.size(), 2u);
  EXPECT_EQ(uses[0].gpu, "0");
  EXPECT_EQ(uses[0].job, "") << "slot 1 is idle";
  EXPECT_EQ(uses[1].gpu, "1");
  EXPECT_EQ(uses[1].job, "17");
  // CUDA_VISIBLE_DEVICES given as UUIDs.
  auto by_uuid = JoinGpusToJobs(*readings, {"GPU-9e8d7c6b-aaaa-bbbb-cccc-ddddeeeeffff"}, {{0, "3"}});
  ASSERT_EQ(by_uuid.size(), 1u);
  EXPECT_EQ(by_uuid[0].gpu, "1");
  EXPECT_EQ(by_uuid[0].job, "3");
  EXPECT_TRUE(JoinGpusToJobs(*readings, {}, {}).empty()) << "a CPU worker reports no GPUs";
}

class FakeQuery final : public GpuQuery {
 public:
  explicit FakeQuery(std::atomic<int>* calls) : calls_(calls) {}
  Result<std::string> Run(std::chrono::milliseconds) override {
    int n = ++*calls_;
    if (n == 2) return Status::Unavailable("nvidia-smi hung");
    if (n == 3) return std::string("garbage\n");
    return std::string(kTwoGpus);
  }

 private:
  std::atomic<int>* calls_;
};

TEST(GpuMonitorTest, MonitorKeepsTheNewestGoodReadingAndDropsItOnFailure) {
  std::atomic<int> calls{0};
  GpuMonitor monitor(std::make_unique<FakeQuery>(&calls), 1h, 1s);
  EXPECT_TRUE(monitor.Latest().empty());
  EXPECT_TRUE(monitor.PollOnce().ok());
  EXPECT_EQ(monitor.Latest().size(), 2u);
  EXPECT_FALSE(monitor.PollOnce().ok());
  EXPECT_TRUE(monitor.Latest().empty()) << "a failed poll must not leave stale values behind";
  EXPECT_FALSE(monitor.PollOnce().ok()) << "unparsable output is a failure too";
  EXPECT_EQ(monitor.failures(), 2u);
  EXPECT_TRUE(monitor.PollOnce().ok());
  EXPECT_EQ(monitor.Latest().size(), 2u);
}

TEST(GpuMonitorTest, MonitorThreadPollsEveryIntervalAndStops) {
  std::atomic<int> calls{0};
  GpuMonitor monitor(std::make_unique<FakeQuery>(&calls), 10ms, 1s);
  monitor.Start();
  for (int i = 0; i < 500 && calls.load() < 5; ++i) std::this_thread::sleep_for(10ms);
  monitor.Stop();
  int after_stop = calls.load();
  EXPECT_GE(after_stop, 5);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(calls.load(), after_stop);
  EXPECT_EQ(monitor.Latest().size(), 2u);
}

// Scripts standing in for nvidia-smi.
class NvidiaSmiQueryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-gpu-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Script(const std::string& name, const std::string& body) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << "#!/bin/sh\n" << body;
    ::chmod(path.c_str(), 0755);
    return path;
  }
  fs::path dir_;
};

TEST_F(NvidiaSmiQueryTest, RunsTheProgramWithTheQueryArguments) {
  std::string args = (dir_ / "args").string();
  auto q = MakeNvidiaSmiQuery(Script("smi", "echo \"$@\" > " + args + "\nprintf '0, GPU-a, 5, 6, 7\\n'\necho oops >&2\n"));
  auto out = q->Run(5s);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "0, GPU-a, 5, 6, 7\n") << "stderr is not mixed in";
  std::ifstream in(args);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, std::string(kNvidiaSmiQueryArgs[0]) + " " + kNvidiaSmiQueryArgs[1]);
}

TEST_F(NvidiaSmiQueryTest, FailuresAndTimeoutsAreErrors) {
  auto failing = MakeNvidiaSmiQuery(Script("fail", "echo 'No devices were found'\nexit 6\n"));
  auto r = failing->Run(5s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exit code 6"), std::string::npos) << r.status();

  auto hanging = MakeNvidiaSmiQuery(Script("hang", "exec sleep 30\n"));
  auto start = std::chrono::steady_clock::now();
  r = hanging->Run(200ms);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("did not answer within 200 ms"), std::string::npos) << r.status();
  EXPECT_LT(took, 5s) << "the hung process is killed, not waited for";

  auto missing = MakeNvidiaSmiQuery((dir_ / "no-such-nvidia-smi").string());
  r = missing->Run(1s);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace eft::worker
