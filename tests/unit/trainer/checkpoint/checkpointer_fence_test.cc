// Fencing (trainer/checkpoint/fence.h, docs/checkpoints.md "Fencing") with the real Checkpointer:
// each attempt is a world-size-1 rank of its own (a tiny random model, its optimizer, a checkpointer
// and an events file) on one shared checkpoint directory, as two attempts on two nodes would be.
// The race between the last look at the fence and the rename is entered through the "commit" debug
// hook, whose stall raises the newer attempt's fence right there.
#include "trainer/checkpoint/checkpointer.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include <gtest/gtest.h>

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

ModelConfig TinyConfig() {
  auto c = ModelConfig::FromHfJson({{"model_type", "llama"},         {"hidden_size", 16},
                                    {"intermediate_size", 24},       {"num_hidden_layers", 2},
                                    {"num_attention_heads", 2},      {"num_key_value_heads", 1},
                                    {"vocab_size", 37},              {"max_position_embeddings", 64},
                                    {"tie_word_embeddings", false},  {"rms_norm_eps", 1e-6},
                                    {"hidden_act", "silu"},          {"torch_dtype", "float32"}});
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

const json kCompat = {{"model", "tiny"}, {"seed", 1}};

// One attempt's only rank.
class Attempt {
 public:
  Attempt(const std::string& root, AttemptId id, int keep_last, const DebugHooks* hooks = DebugHooks::None())
      : id_(std::move(id)), events_path_(root + ".events-" + std::to_string(id_.attempt)) {
    auto comm = CreateCpuCommunicator(RendezvousOptions{});
    EXPECT_TRUE(comm.ok()) << comm.status();
    comm_ = std::move(*comm);
    model_ = std::make_unique<ShardedLlama>(TinyConfig(), comm_.get(), ShardingOptions(ShardingStrategy::kFull, false));
    EXPECT_TRUE(model_->InitRandom(static_cast<uint64_t>(id_.attempt)).ok());
    optimizer_ = std::make_unique<AdamW>(AdamWConfig{});
    for (FlatParamUnit* u : model_->trainable_units()) optimizer_->AddParam(u->shard(), u->grad(), u->decay_mask());
    fd_ = ::open(events_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    events_ = std::make_unique<EventWriter>(fd_);
    CheckpointPolicy policy{};
    policy.root = root;
    policy.every_steps = 10;
    policy.keep_last = keep_last;
    policy.full_write = FullWriteMode::kRank0;
    checkpointer_ =
        std::make_unique<Checkpointer>(policy, comm_.get(), model_.get(), optimizer_.get(), events_.get(), hooks);
  }
  ~Attempt() {
    checkpointer_.reset();
    ::close(fd_);
    fs::remove(events_path_);
  }

  Status Begin() { return checkpointer_->BeginAttempt(id_); }
  // A sharded save of step `step`, waited for and committed (or not) like at a step boundary.
  Status Save(int64_t step) {
    auto begun = checkpointer_->BeginSharded(State(step));
    if (!begun.ok()) return begun.status();
    return checkpointer_->Poll(false, /*wait=*/true).status();
  }
  Status SaveFull(int64_t step) { return checkpointer_->SaveFull(State(step), /*final=*/true); }
  // The step resumed from (0: a fresh start).
  Result<int64_t> Resume(const std::string& from) {
    EFT_ASSIGN_OR_RETURN(std::optional<TrainerState> state, checkpointer_->Resume(from, kCompat));
    return state ? state->step : 0;
  }
  // The events so far, by type: {"checkpoint", "checkpoint_deleted", ...}.
  std::vector<json> Events(const std::string& type) const {
    std::vector<json> out;
    std::ifstream in(events_path_);
    for (std::string line; std::getline(in, line);) {
      json e = json::parse(line);
      if (e["event"] == type) out.push_back(e);
    }
    return out;
  }

 private:
  static TrainerState State(int64_t step) {
    TrainerState s;
    s.step = step;
    s.optimizer_step = step;
    s.world_size = 1;
    s.compat = kCompat;
    return s;
  }

  AttemptId id_;
  std::string events_path_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<ShardedLlama> model_;
  std::unique_ptr<AdamW> optimizer_;
  int fd_ = -1;
  std::unique_ptr<EventWriter> events_;
  std::unique_ptr<Checkpointer> checkpointer_;
};

class CheckpointerFenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() / ("eft-ckpt-fence-" + std::to_string(::getpid()) + "-" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Dir(int64_t step) const { return root_ + "/step-" + std::to_string(step); }
  std::vector<std::string> Committed() const {
    std::vector<std::string> out;
    for (const auto& d : ListCheckpointDirs(root_)) out.push_back(fs::path(d.path).filename().string());
    return out;
  }

  std::string root_;
};

const AttemptId kA3{"17", 3}, kA4{"17", 4}, kA5{"17", 5};

// No attempt number (eft-train by hand, torchrun): no fence is read or written, manifests are as
// before, and every checkpoint resumes.
TEST_F(CheckpointerFenceTest, AnUnfencedRunIsAsBefore) {
  Attempt run(root_, AttemptId{}, 3);
  ASSERT_TRUE(run.Begin().ok());
  ASSERT_TRUE(run.Save(10).ok());
  EXPECT_FALSE(fs::exists(root_ + "/FENCE"));
  EXPECT_FALSE(ReadManifest(Dir(10))->writer.fenced());
  Attempt again(root_, AttemptId{}, 3);
  ASSERT_TRUE(again.Begin().ok());
  EXPECT_EQ(*again.Resume("auto"), 10);
  // A fenced attempt takes over such a directory with every checkpoint in it (legacy ones too).
  Attempt fenced(root_, kA3, 3);
  ASSERT_TRUE(fenced.Begin().ok());
  EXPECT_EQ(*fenced.Resume("auto"), 10);
  ASSERT_TRUE(fenced.Save(20).ok());
  EXPECT_EQ(ReadManifest(Dir(20))->writer, kA3);
}

TEST_F(CheckpointerFenceTest, AStaleAttemptRefusesToStart) {
  Attempt newer(root_, kA4, 3);
  ASSERT_TRUE(newer.Begin().ok());
  Attempt stale(root_, kA3, 3);
  const Status s = stale.Begin();
  EXPECT_TRUE(IsFenced(s)) << s;
  EXPECT_EQ(s.message(), "attempt 3 of job 17 is stale: attempt 4 of job 17 started since and holds " + root_ +
                             "/FENCE; not training");
}

// Attempt 3 is cut off; attempt 4 starts. Attempt 3's next save is not committed and stops it on
// every rank; it leaves the directory as it is: no event, no retention (keep_last 1 would have
// deleted step-10, which attempt 4 resumes from), its step-20.tmp left for attempt 4 to clean.
TEST_F(CheckpointerFenceTest, ASaveAfterANewerAttemptStartedIsNotCommittedAndStopsTheRun) {
  Attempt old(root_, kA3, 1);
  ASSERT_TRUE(old.Begin().ok());
  ASSERT_TRUE(old.Save(10).ok());
  Attempt newer(root_, kA4, 1);
  ASSERT_TRUE(newer.Begin().ok());
  const Status s = old.Save(20);
  EXPECT_TRUE(IsFenced(s)) << s;
  EXPECT_NE(s.message().find("attempt 3 of job 17 was fenced off: attempt 4 of job 17 took over"), std::string::npos)
      << s.message();
  EXPECT_EQ(Committed(), std::vector<std::string>{"step-10"});
  EXPECT_TRUE(fs::exists(Dir(20) + ".tmp"));
  EXPECT_EQ(old.Events("checkpoint").size(), 1u);
  EXPECT_TRUE(old.Events("checkpoint_deleted").empty());
  EXPECT_EQ(*newer.Resume("auto"), 10);
  // The newer attempt's own saves go on; its retention clears the leftover.
  ASSERT_TRUE(newer.Save(30).ok());
  EXPECT_EQ(Committed(), std::vector<std::string>{"step-30"});
  EXPECT_FALSE(fs::exists(Dir(20) + ".tmp"));

  // A full save is refused the same way.
  const Status full = old.SaveFull(40);
  EXPECT_TRUE(IsFenced(full)) << full;
  EXPECT_EQ(Committed(), std::vector<std::string>{"step-30"});
}

// The race: attempt 3 has looked at the fence for the last time when attempt 4 starts (raises the
// fence, lists the directory); then attempt 3 renames step-10 into place. Attempt 3 notices after
// the rename and stops without reporting it or running retention; neither attempt 4 nor attempt 5
// ever resumes from it, by "auto" or given its path.
TEST_F(CheckpointerFenceTest, ACheckpointRenamedAsANewerAttemptStartsIsNeverResumedFrom) {
  std::unique_ptr<Attempt> newer;
  DebugHooks::Actions raise_newer{[&](double) {
    if (newer) return;
    newer = std::make_unique<Attempt>(root_, kA4, 2);
    EXPECT_TRUE(newer->Begin().ok());
  }};
  DebugHooks hooks({"commit"}, 0, 0, raise_newer);
  Attempt old(root_, kA3, 2, &hooks);
  ASSERT_TRUE(old.Begin().ok());
  const Status s = old.Save(10);
  ASSERT_TRUE(newer);
  EXPECT_TRUE(IsFenced(s)) << s;
  EXPECT_NE(s.message().find(Dir(10) + " was renamed into place as a newer attempt started: attempt 3 of job 17 was "
                                       "fenced off"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(VerifyCheckpoint(Dir(10)).ok()) << "the late directory is complete and valid";
  EXPECT_TRUE(old.Events("checkpoint").empty()) << "and not reported";

  auto resumed = newer->Resume("auto");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(*resumed, 0) << "a fresh start: the only checkpoint is the late one";
  EXPECT_EQ(newer->Events("no_valid_checkpoint").size(), 1u);
  auto given = newer->Resume(Dir(10));
  EXPECT_EQ(given.status().code(), StatusCode::kNotFound) << "handed its path: not resumed from either";
  Attempt next(root_, kA5, 2);
  ASSERT_TRUE(next.Begin().ok());
  EXPECT_EQ(*next.Resume("auto"), 0) << "attempt 5 takes it no more than attempt 4 did";
}

// The same with a checkpoint before it: attempt 4 resumes from the one attempt 3 committed while
// it held the fence, and its retention deletes the late one without counting it.
TEST_F(CheckpointerFenceTest, TheNewerAttemptResumesFromTheLastCheckpointBeforeItStarted) {
  std::unique_ptr<Attempt> newer;
  bool armed = false;
  DebugHooks::Actions raise_newer{[&](double) {
    if (!armed || newer) return;
    newer = std::make_unique<Attempt>(root_, kA4, 1);
    EXPECT_TRUE(newer->Begin().ok());
  }};
  DebugHooks hooks({"commit"}, 0, 0, raise_newer);
  Attempt old(root_, kA3, 1, &hooks);
  ASSERT_TRUE(old.Begin().ok());
  ASSERT_TRUE(old.Save(10).ok());
  armed = true;
  EXPECT_TRUE(IsFenced(old.Save(20)));
  ASSERT_TRUE(newer);
  EXPECT_EQ(Committed(), (std::vector<std::string>{"step-20", "step-10"}));
  EXPECT_EQ(*newer->Resume("auto"), 10);
  EXPECT_EQ(*newer->Resume(Dir(20)), 10) << "the controller's path falls back";
  ASSERT_TRUE(newer->Save(30).ok());  // keep_last 1
  EXPECT_EQ(Committed(), std::vector<std::string>{"step-30"});
  Attempt next(root_, kA5, 1);
  ASSERT_TRUE(next.Begin().ok());
  EXPECT_EQ(*next.Resume("auto"), 30);
}

}  // namespace
}  // namespace eft::trainer
