// TensorBoardRun (trainer/tracking/tensorboard_run.h): what an attempt writes from rank 0's events,
// record by record (the records' bytes themselves are TensorBoard's: tensorboard_events_test.cc), where
// the run goes, and that a directory or disk that fails turns it off with one warning and nothing else.
#include "trainer/tracking/tensorboard_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "common/file_util.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;
using tensorboard::EncodeFileVersionEvent;
using tensorboard::EncodeScalarsEvent;
using tensorboard::EncodeSessionLogEvent;
using tensorboard::SessionStatus;

constexpr double kWall = 1700000000.0;  // ManualClock's wall clock

rank::StepEvent Step(int64_t step, double loss, double mfu = 0) {
  rank::StepEvent e;
  e.step = step;
  e.total_steps = 10;
  e.loss = loss;
  e.lr = 1e-3 * static_cast<double>(step);
  e.grad_norm = 0.5 + static_cast<double>(step);
  e.tokens = 64;
  e.tokens_per_s = 1000.0 + static_cast<double>(step);
  e.mfu = mfu;
  return e;
}

std::string StepRecord(const rank::StepEvent& e) {
  std::vector<tensorboard::Scalar> values = {{"train/loss", static_cast<float>(e.loss)},
                                             {"train/learning_rate", static_cast<float>(e.lr)},
                                             {"train/grad_norm", static_cast<float>(e.grad_norm)},
                                             {"train/tokens_per_second", static_cast<float>(e.tokens_per_s)}};
  if (e.mfu > 0) values.push_back({"train/mfu", static_cast<float>(e.mfu)});
  return EncodeScalarsEvent(kWall, e.step, values);
}

std::string AttemptRecord(int64_t step, int attempt, int world) {
  return EncodeScalarsEvent(kWall, step,
                            {{"eft/attempt", static_cast<float>(attempt)}, {"eft/world_size", static_cast<float>(world)}});
}

class TensorBoardRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("eft-tb-run-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> Records(const std::string& path) {
    auto bytes = ReadFileToString(path);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    auto read = tensorboard::ReadRecords(bytes.ok() ? *bytes : "");
    EXPECT_TRUE(read.ok()) << read.status();
    EXPECT_FALSE(read.ok() && read->truncated_tail);
    return read.ok() ? read->records : std::vector<std::string>{};
  }

  std::string dir_;
  ManualClock clock_;
};

TEST(TensorBoardDir, DefaultsUnderTheCheckpointsAndOffTurnsItOff) {
  EXPECT_EQ(TensorBoardDir("", "/ckpt/job"), "/ckpt/job/tensorboard");
  EXPECT_EQ(TensorBoardDir("", ""), "") << "no checkpoint dir, no default";
  EXPECT_EQ(TensorBoardDir("off", "/ckpt/job"), "");
  EXPECT_EQ(TensorBoardDir("/tb/job-7", "/ckpt/job"), "/tb/job-7");
  EXPECT_EQ(TensorBoardDir("/tb/job-7", ""), "/tb/job-7");
}

TEST(TensorBoardRunStart, AnEmptyDirectoryMeansNoRun) {
  ManualClock clock;
  EXPECT_EQ(TensorBoardRun::Start("", {1, 1, 0}, &clock), nullptr);
}

// A resumed attempt: START at the first step it trains (TensorBoard then drops what earlier attempts
// wrote from there on), its number and world size there and at its end, every step's and evaluation's
// values as the events have them (MFU only when known), then STOP; events not TensorBoard's are left.
TEST_F(TensorBoardRunTest, AResumedAttemptWritesItsStartStepsEvalsAndEnd) {
  auto run = TensorBoardRun::Start(dir_ + "/tb", {3, 4, 5}, &clock_);
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(run->enabled());
  EXPECT_EQ(fs::path(run->path()).parent_path(), fs::path(dir_ + "/tb"));
  run->Observe(Step(6, 2.25));
  run->Observe(rank::CheckpointEvent{"sharded", 6, "/ckpt/step-6", 100, 1, 0});
  run->Observe(Step(7, 2.125, 0.375));
  rank::EvalEvent eval{7, 1.75, 1000, 0.5};
  eval.set = "heldout";
  run->Observe(eval);
  run->Observe(rank::FinishedEvent{7});
  EXPECT_FALSE(run->enabled()) << "ended";
  run->Observe(Step(8, 9));  // after the end: not written
  EXPECT_EQ(Records(run->path()),
            (std::vector<std::string>{
                EncodeFileVersionEvent(kWall),
                EncodeSessionLogEvent(kWall, 6, SessionStatus::kStart, "eft attempt 3, world size 4, resumed after step 5"),
                AttemptRecord(6, 3, 4),
                StepRecord(Step(6, 2.25)),
                StepRecord(Step(7, 2.125, 0.375)),
                EncodeScalarsEvent(kWall, 7, {{"eval/heldout/loss", 1.75f}}),
                AttemptRecord(7, 3, 4),
                EncodeSessionLogEvent(kWall, 7, SessionStatus::kStop, "eft attempt 3 finished"),
            }));
}

// From scratch the attempt rewrites everything, the evaluation before the first step (step 0)
// included, so its START is at step 0; a stop on request is a clean end too.
TEST_F(TensorBoardRunTest, AnAttemptFromScratchStartsAtStepZeroAndAStopEndsIt) {
  auto run = TensorBoardRun::Start(dir_ + "/tb", {1, 2, 0}, &clock_);
  ASSERT_NE(run, nullptr);
  rank::EvalEvent before{0, 4.5, 1000, 0.5};
  run->Observe(before);
  run->Observe(Step(1, 4.0));
  run->End(1, "stopped on request");
  EXPECT_EQ(Records(run->path()),
            (std::vector<std::string>{
                EncodeFileVersionEvent(kWall),
                EncodeSessionLogEvent(kWall, 0, SessionStatus::kStart, "eft attempt 1, world size 2, from the start"),
                AttemptRecord(0, 1, 2),
                EncodeScalarsEvent(kWall, 0, {{"eval/eval/loss", 4.5f}}),
                StepRecord(Step(1, 4.0)),
                AttemptRecord(1, 1, 2),
                EncodeSessionLogEvent(kWall, 1, SessionStatus::kStop, "eft attempt 1 stopped on request"),
            }));
}

// Each attempt its own file, after the one before in name order.
TEST_F(TensorBoardRunTest, EachAttemptAddsAFileAfterTheOthers) {
  std::vector<std::string> paths;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    auto run = TensorBoardRun::Start(dir_ + "/tb", {attempt, 1, 0}, &clock_);
    ASSERT_TRUE(run->enabled());
    paths.push_back(run->path());
  }
  EXPECT_LT(paths[0], paths[1]);
  EXPECT_LT(paths[1], paths[2]);
}

// One warning, no file, no exception: training goes on without TensorBoard.
TEST_F(TensorBoardRunTest, AnUnusableDirectoryWarnsOnceAndTurnsItOff) {
  fs::create_directories(dir_);
  ASSERT_TRUE(WriteStringToFile(dir_ + "/file", "").ok());
  ::testing::internal::CaptureStderr();
  auto run = TensorBoardRun::Start(dir_ + "/file/tb", {1, 1, 0}, &clock_);
  ASSERT_NE(run, nullptr);
  run->Observe(Step(1, 1));
  run->End(1, "finished");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(run->enabled());
  EXPECT_EQ(run->path(), "");
  EXPECT_NE(err.find("TensorBoard: cannot create " + dir_ + "/file/tb"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), err.size() - 1) << "one line: " << err;
}

// A full disk from the first write (/dev/full: ENOSPC).
TEST_F(TensorBoardRunTest, AFullDiskWarnsOnceAndTurnsItOff) {
  const int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::testing::internal::CaptureStderr();
  TensorBoardRun run(tensorboard::EventFileWriter::FromFd(fd, "/dev/full"), {1, 1, 0}, &clock_);
  for (int step = 1; step <= 3; ++step) run.Observe(Step(step, 1));
  run.End(3, "finished");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(run.enabled());
  EXPECT_NE(err.find("TensorBoard: cannot write /dev/full: No space left on device; no more TensorBoard events in "
                     "this attempt"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find('\n'), err.size() - 1) << "one line: " << err;
}

// A write that fails in the middle of the run (the reader of a pipe gone: EPIPE): the same, and what
// was written before stays.
TEST_F(TensorBoardRunTest, AWriteThatFailsLaterWarnsOnceAndStops) {
  std::signal(SIGPIPE, SIG_IGN);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  TensorBoardRun run(tensorboard::EventFileWriter::FromFd(fds[1], "pipe"), {2, 1, 4}, &clock_);
  run.Observe(Step(5, 1.5));
  ASSERT_TRUE(run.enabled());
  char buf[4096];
  const ssize_t got = ::read(fds[0], buf, sizeof buf);
  ::close(fds[0]);
  ::testing::internal::CaptureStderr();
  run.Observe(Step(6, 1.25));
  run.Observe(Step(7, 1.0));
  run.End(7, "finished");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(run.enabled());
  EXPECT_NE(err.find("TensorBoard: cannot write pipe: Broken pipe"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), err.size() - 1) << "one line: " << err;
  ASSERT_GT(got, 0);
  auto read = tensorboard::ReadRecords(std::string_view(buf, static_cast<size_t>(got)));
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->records.size(), 3u) << "START, the attempt, step 5";
  EXPECT_EQ(read->records[2], StepRecord(Step(5, 1.5)));
}

}  // namespace
}  // namespace eft::trainer
