// Trainer with what Trainer::Create is handed besides its configuration (TrainerDeps): a ManualClock,
// which then decides every duration the run reports, and DebugHooks whose stalls and kill are
// recorded instead of slept and died (no EFT_DEBUG_* variable is set). A tiny random Llama trains
// on the CPU at world size 1; its events are read back from the file EFT_EVENTS_FD would name.
#include "trainer/train/trainer.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/listen_port.h"
#include "tests/unit/trainer/model/tiny_model.h"
#include "trainer/checkpoint/fence.h"
#include "trainer/checkpoint/full_state.h"
#include "trainer/checkpoint/manifest.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

class TrainerDepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-trainer-deps-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const ModelConfig model = testing::TinyConfig("llama");
    auto written = WriteHfModel((dir_ / "model").string(), testing::TinyModel::Random(model, 1).Named(), model,
                                at::kFloat, {});
    ASSERT_TRUE(written.ok()) << written.status();
    // 32 pre-tokenized examples of 8 to 12 tokens, the first two untrained.
    std::ofstream examples(dir_ / "data.jsonl");
    for (int i = 0; i < 32; ++i) {
      nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
      for (int t = 0; t < 8 + i % 5; ++t) {
        const int id = 3 + (i * 7 + t * 11) % (static_cast<int>(model.vocab_size) - 3);
        ids.push_back(id);
        labels.push_back(t < 2 ? -100 : id);
      }
      examples << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
    }

    spec_.set_name("deps");
    spec_.set_model((dir_ / "model").string());
    v1::DataSpec* data = spec_.mutable_data();
    data->set_train((dir_ / "data.jsonl").string());
    data->set_cache_dir((dir_ / "cache").string());
    data->set_max_seq_len(32);
    data->set_packing(false);
    v1::TrainingSpec* training = spec_.mutable_training();
    training->set_epochs(100);
    training->set_global_batch_size(4);
    training->set_micro_batch_size(2);
    training->set_precision("fp32");
    training->set_activation_checkpointing("none");
    training->set_device("cpu");
    v1::CheckpointSpec* checkpoint = spec_.mutable_checkpoint();
    checkpoint->set_dir((dir_ / "ckpt").string());
    checkpoint->set_every_steps(0);
    checkpoint->set_keep_last(10);
    env_.source = "single process";
    env_.master_port = PickFreeLoopbackPort();
  }

  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Creates a trainer with `deps` (trainer_ while it runs) and runs it to the end; its events.
  // status_: how Create, then Run, ended (each expected to succeed unless `may_fail`).
  std::vector<rank::Event> Train(TrainerDeps deps, bool may_fail = false) {
    auto config = TrainConfigFromJobSpec(spec_);  // the rest normalized, as eft-train's own is
    EXPECT_TRUE(config.ok()) << config.status();
    if (!config.ok()) return {};
    config->threads = 1;
    const std::string path = (dir_ / "events.jsonl").string();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0);
    RankEnv env = env_;
    env.events_fd = fd;
    auto created = Trainer::Create(*config, env, deps);
    EXPECT_TRUE(may_fail || created.ok()) << created.status();
    status_ = created.status();
    if (created.ok()) {
      trainer_ = created->get();
      status_ = (*created)->Run();
      EXPECT_TRUE(may_fail || status_.ok()) << status_;
      trainer_ = nullptr;
    }
    ::close(fd);
    std::vector<rank::Event> events;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      auto e = rank::DecodeEvent(line);
      EXPECT_TRUE(e.ok()) << line;
      if (e.ok()) events.push_back(*e);
    }
    return events;
  }

  template <typename T>
  static std::vector<T> All(const std::vector<rank::Event>& events) {
    std::vector<T> out;
    for (const auto& e : events) {
      if (const T* t = std::get_if<T>(&e)) out.push_back(*t);
    }
    return out;
  }

  fs::path dir_;
  v1::JobSpec spec_;
  RankEnv env_;
  Trainer* trainer_ = nullptr;
  Status status_;
};

// A stall that moves the manual clock on instead of sleeping.
DebugHooks::Actions AdvanceOnStall(ManualClock* clock, int* stalls) {
  return {[clock, stalls](double seconds) {
            ++*stalls;
            clock->Advance(std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds)));
          },
          [] { ADD_FAILURE() << "no kill was asked for"; }};
}

TEST_F(TrainerDepsTest, StepAndFullSaveTimesAreReadOnTheClockItIsGiven) {
  spec_.mutable_training()->set_max_steps(4);
  spec_.mutable_checkpoint()->set_full_every_steps(2);  // step 2, then the final one at step 4
  ManualClock clock;
  int stalls = 0;
  const DebugHooks hooks({"save"}, 2.5, 0, AdvanceOnStall(&clock, &stalls));
  const std::vector<rank::Event> events = Train({.hooks = &hooks, .clock = &clock});

  // Time moved only while each full save was held (synchronous: the loop waited all of it).
  EXPECT_EQ(stalls, 2);
  const auto saves = All<rank::CheckpointEvent>(events);
  ASSERT_EQ(saves.size(), 2u);
  for (size_t i = 0; i < saves.size(); ++i) {
    EXPECT_EQ(saves[i].kind, "full");
    EXPECT_EQ(saves[i].step, 2 * static_cast<int64_t>(i + 1));
    EXPECT_EQ(saves[i].seconds, 2.5);
    EXPECT_EQ(saves[i].stall_seconds, 2.5);
  }
  // No step saw it move: the steps' timelines, collectives included, are all on that clock.
  const auto steps = All<rank::StepEvent>(events);
  ASSERT_EQ(steps.size(), 4u);
  for (const rank::StepEvent& s : steps) {
    EXPECT_EQ(s.seconds, 0) << "step " << s.step;
    EXPECT_EQ(s.data_s, 0) << "step " << s.step;
    EXPECT_EQ(s.compute_s, 0) << "step " << s.step;
    EXPECT_EQ(s.comm_wait_s, 0) << "step " << s.step;
    EXPECT_EQ(s.optimizer_s, 0) << "step " << s.step;
    EXPECT_EQ(s.tokens_per_s, 0) << "step " << s.step;
  }
}

TEST_F(TrainerDepsTest, TheShardedWriterIsTimedOnTheClockItIsGiven) {
  spec_.mutable_training()->set_max_steps(3);
  spec_.mutable_checkpoint()->set_every_steps(2);  // sharded at step 2, then the final full save at step 3
  ManualClock clock;
  int stalls = 0;
  const DebugHooks hooks({"sharded_write"}, 1.5, 0, AdvanceOnStall(&clock, &stalls));
  const auto saves = All<rank::CheckpointEvent>(Train({.hooks = &hooks, .clock = &clock}));

  EXPECT_EQ(stalls, 1);
  ASSERT_EQ(saves.size(), 2u);
  EXPECT_EQ(saves[0].kind, "sharded");
  EXPECT_EQ(saves[0].step, 2);
  EXPECT_EQ(saves[0].seconds, 1.5) << "the background writer's time, stall included";
  EXPECT_EQ(saves[1].kind, "full");
  EXPECT_EQ(saves[1].seconds, 0) << "the writer was done before the final save began";
}

TEST_F(TrainerDepsTest, TheHooksStallAndKillOnlyWhereTheyAreSet) {
  spec_.mutable_training()->set_max_steps(5);
  spec_.mutable_checkpoint()->set_every_steps(2);  // sharded at steps 2 and 4, the final full save at step 5
  std::vector<double> sleeps;
  std::vector<int64_t> killed_after;
  bool step2_committed_then = false;
  DebugHooks::Actions actions{[&](double seconds) { sleeps.push_back(seconds); },
                              [&] {
                                killed_after.push_back(trainer_->completed_steps());
                                step2_committed_then = VerifyCheckpoint(spec_.checkpoint().dir() + "/step-2").ok();
                              }};
  const DebugHooks hooks({"step"}, 0.25, 3, std::move(actions));
  const std::vector<rank::Event> events = Train({.hooks = &hooks});

  // Once after every step, and in no other phase (tokenize, load, sharded_write and save all ran).
  EXPECT_EQ(sleeps, std::vector<double>(5, 0.25));
  // At step 3 only, with the save begun at step 2 committed first. A recorded kill returns, so the
  // run goes on to its end.
  EXPECT_EQ(killed_after, std::vector<int64_t>{3});
  EXPECT_TRUE(step2_committed_then);
  const auto finished = All<rank::FinishedEvent>(events);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].step, 5);
}

// Fencing (trainer/checkpoint/fence.h) in a whole run: a rank told its attempt (EFT_ATTEMPT) raises
// the fence before it resumes, writes its attempt into every manifest, and stops with the fenced
// status (eft-train exits 79) at the first save after a newer attempt started: that save is not
// committed, and the run goes no further (no final save).
TEST_F(TrainerDepsTest, AFencedRunStopsAtItsFirstSaveAfterANewerAttemptStarted) {
  spec_.mutable_training()->set_max_steps(6);
  spec_.mutable_checkpoint()->set_every_steps(2);
  env_.job_id = "17";
  env_.attempt = 2;
  const std::string ckpt = spec_.checkpoint().dir();
  DebugHooks::Actions actions{[&](double) {
    // After step 3, when the save of step 2 is committed (step 3's update waited for its writer).
    if (trainer_->completed_steps() == 3) EXPECT_TRUE(RaiseFence(ckpt, AttemptId{"17", 3}).ok());
  }};
  const DebugHooks hooks({"step"}, 0, 0, std::move(actions));
  const std::vector<rank::Event> events = Train({.hooks = &hooks}, /*may_fail=*/true);

  EXPECT_TRUE(IsFenced(status_)) << status_;
  const auto saves = All<rank::CheckpointEvent>(events);
  ASSERT_EQ(saves.size(), 1u);
  EXPECT_EQ(saves[0].step, 2);
  EXPECT_EQ(ReadManifest(ckpt + "/step-2")->writer, (AttemptId{"17", 2}));
  EXPECT_FALSE(fs::exists(ckpt + "/step-4"));
  EXPECT_TRUE(All<rank::FinishedEvent>(events).empty());
}

// A rank whose attempt is older than the fence's holder is stale: it stops before it resumes or
// trains anything.
TEST_F(TrainerDepsTest, AStaleAttemptDoesNotTrain) {
  ASSERT_TRUE(RaiseFence(spec_.checkpoint().dir(), AttemptId{"17", 4}).ok());
  env_.job_id = "17";
  env_.attempt = 3;
  env_.resume_from = "auto";
  const std::vector<rank::Event> events = Train({}, /*may_fail=*/true);
  EXPECT_TRUE(IsFenced(status_)) << status_;
  EXPECT_NE(status_.message().find("attempt 3 of job 17 is stale"), std::string::npos) << status_.message();
  EXPECT_TRUE(All<rank::StepEvent>(events).empty());
}

}  // namespace
}  // namespace eft::trainer
