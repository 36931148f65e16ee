// Fencing's rules (trainer/checkpoint/fence.h, docs/checkpoints.md "Fencing") on real files in a
// temp dir: the attempt in the manifest, what a new holder may resume from, the stale attempt, the
// check at commit, the race between that check and the rename, and what retention and a commit may
// replace or delete. checkpointer_fence_test.cc holds the same rules to the real Checkpointer.
#include "trainer/checkpoint/fence.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/file_util.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const AttemptId kA2{"17", 2}, kA3{"17", 3}, kA4{"17", 4}, kA5{"17", 5};

class FenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() / ("eft-fence-" + std::to_string(::getpid()) + "-" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Dir(int64_t step) const { return root_ + "/step-" + std::to_string(step); }

  // Writes step-`step`.tmp with one file and its manifest naming `writer`; Commit renames it.
  std::string Prepare(int64_t step, const AttemptId& writer) {
    const std::string tmp = Dir(step) + ".tmp";
    fs::create_directories(tmp);
    std::ofstream(tmp + "/rank-00000-of-00001.safetensors") << "step " << step << " by " << writer.ToString();
    auto m = WriteManifest(tmp, step, "sharded", 1, {"rank-00000-of-00001.safetensors"}, writer);
    EXPECT_TRUE(m.ok()) << m.status();
    return tmp;
  }
  Status Commit(int64_t step, const AttemptId& writer) {
    return CommitCheckpointDir(Dir(step) + ".tmp", Dir(step), writer);
  }
  // A committed checkpoint of `step` written by `writer` (unfenced: as before fencing existed).
  std::string Make(int64_t step, const AttemptId& writer = {}) {
    Prepare(step, writer);
    EXPECT_TRUE(Commit(step, writer).ok());
    return Dir(step);
  }
  Fence Raise(const AttemptId& self) {
    auto f = RaiseFence(root_, self);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? *f : Fence();
  }
  static std::map<std::string, AttemptId> Listed(std::initializer_list<std::pair<const std::string, AttemptId>> l) {
    return l;
  }
  // What `fence`'s holder resumes from with "auto", and what it skipped.
  std::string ResumeAuto(const Fence& fence, std::vector<std::string>* skipped = nullptr) {
    auto r = ResolveResume("auto", root_, skipped, ResumableBy(fence, root_));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : "";
  }

  std::string root_;
};

TEST_F(FenceTest, TheManifestNamesItsAttemptAndAnUnfencedOneIsAsBefore) {
  Make(10, kA3);
  auto text = ReadFileToString(Dir(10) + "/COMMITTED");
  ASSERT_TRUE(text.ok());
  json j = json::parse(*text);
  EXPECT_EQ(j["job"], "17");
  EXPECT_EQ(j["attempt"], 3);
  auto m = ReadManifest(Dir(10));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->writer, kA3);

  // Without an attempt number (and in every manifest written before fencing): no such keys at all.
  Make(20);
  j = json::parse(*ReadFileToString(Dir(20) + "/COMMITTED"));
  EXPECT_FALSE(j.contains("job"));
  EXPECT_FALSE(j.contains("attempt"));
  m = ReadManifest(Dir(20));
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->writer.fenced());
  EXPECT_EQ(AttemptId{}.ToString(), "a run without an attempt number");
  EXPECT_EQ(kA3.ToString(), "attempt 3 of job 17");
  EXPECT_EQ((AttemptId{"", 3}).ToString(), "attempt 3");
}

// The first fenced attempt on a directory (fresh, or filled by runs before fencing) may resume from
// every committed checkpoint there, as before; a directory without a manifest is none.
TEST_F(FenceTest, TheFirstFenceListsEveryCommittedCheckpoint) {
  Make(10);
  Make(20, kA2);
  fs::create_directories(Dir(30));  // a step directory without a manifest is not a checkpoint
  const Fence f = Raise(kA3);
  EXPECT_EQ(f.holder, kA3);
  EXPECT_EQ(f.checkpoints, Listed({{"step-10", AttemptId{}}, {"step-20", kA2}}));
  auto read = ReadFence(root_);
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ((*read)->ToJson(), f.ToJson());
  EXPECT_EQ(f.ToJson(), json::parse(R"({"job":"17","attempt":3,"checkpoints":{
              "step-10":{"job":"","attempt":0},"step-20":{"job":"17","attempt":2}}})"));
  EXPECT_EQ(ResumeAuto(f), Dir(20));

  // In a directory that does not exist yet: created, nothing listed.
  auto fresh = RaiseFence(root_ + "/new", kA3);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_TRUE(fresh->checkpoints.empty());
  EXPECT_TRUE(fs::exists(root_ + "/new/FENCE"));
}

// The new holder takes what the previous holder could resume from (still there, same writer) and
// what the previous holder committed while it held the fence, never what an older attempt committed
// after the previous holder started, nor a listed checkpoint replaced since by another attempt.
TEST_F(FenceTest, ANewHolderTakesThePreviousListAndWhatThePreviousHolderCommitted) {
  Make(10, kA2);
  Make(15, kA2);
  Make(5);  // unfenced: trusted, as before fencing
  Raise(kA3);  // lists step-5, step-10, step-15
  Make(20, kA3);
  Make(30, kA2);  // attempt 2, fenced off, committed after attempt 3 started
  fs::remove_all(Dir(15));
  Make(15, AttemptId{"17", 1});  // replaced since attempt 3 listed it, by an even older attempt
  const Fence f = Raise(kA5);
  EXPECT_EQ(f.checkpoints, Listed({{"step-5", AttemptId{}}, {"step-10", kA2}, {"step-20", kA3}}));
  std::vector<std::string> skipped;
  EXPECT_EQ(ResumeAuto(f, &skipped), Dir(20));
  EXPECT_EQ(skipped, std::vector<std::string>{Dir(30)});
  EXPECT_EQ(WhyNotResumable(f, "step-30", kA2),
            "written by attempt 2 of job 17 after attempt 5 of job 17 started (fenced off; docs/checkpoints.md, "
            "\"Fencing\")");
  EXPECT_EQ(WhyNotResumable(f, "step-15", AttemptId{"17", 1}).substr(0, 30), "written by attempt 1 of job 17");
  EXPECT_EQ(WhyNotResumable(f, "step-40", kA5), "") << "its own";
  EXPECT_EQ(WhyNotResumable(f, "step-40", AttemptId{"17", 6}),
            "written by attempt 6 of job 17, newer than this attempt 5 of job 17");
}

TEST_F(FenceTest, AStaleAttemptIsRefusedAndTheFenceStays) {
  Make(10, kA2);
  const Fence held = Raise(kA4);
  auto stale = RaiseFence(root_, kA3);
  ASSERT_FALSE(stale.ok());
  EXPECT_TRUE(IsFenced(stale.status()));
  EXPECT_EQ(stale.status().message(), "attempt 3 of job 17 is stale: attempt 4 of job 17 started since and holds " +
                                          root_ + "/FENCE; not training");
  auto read = ReadFence(root_);
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ((*read)->ToJson(), held.ToJson());
  // The holder raising again (the same attempt number reused) keeps what it had.
  EXPECT_EQ(Raise(kA4).checkpoints, held.checkpoints);
}

// A new job given the same checkpoint.dir (job ids and attempt numbers of its own) takes the
// directory over; the old job's attempts are fenced off from then on.
TEST_F(FenceTest, AnotherJobTakesTheDirectoryOver) {
  const AttemptId old_job{"9", 5}, new_job{"23", 1};
  Make(10, AttemptId{"9", 4});
  Raise(old_job);
  Make(20, old_job);
  Make(25, AttemptId{"9", 4});  // the old job's stale attempt 4, after attempt 5 started
  const Fence f = Raise(new_job);
  EXPECT_EQ(f.checkpoints, Listed({{"step-10", AttemptId{"9", 4}}, {"step-20", old_job}}));
  EXPECT_TRUE(IsFenced(CheckFence(root_, old_job)));
  EXPECT_TRUE(CheckFence(root_, new_job).ok());
}

TEST_F(FenceTest, CommitsAreForTheHolderOnly) {
  EXPECT_TRUE(IsFenced(CheckFence(root_, kA3))) << "no fence: nobody can tell who holds the directory";
  Raise(kA3);
  EXPECT_TRUE(CheckFence(root_, kA3).ok());
  Raise(kA4);
  const Status fenced = CheckFence(root_, kA3);
  EXPECT_TRUE(IsFenced(fenced));
  EXPECT_EQ(fenced.message(), "attempt 3 of job 17 was fenced off: attempt 4 of job 17 took over " + root_ +
                                  " after it started; committing nothing more and stopping");
  fs::remove(root_ + "/FENCE");
  EXPECT_TRUE(IsFenced(CheckFence(root_, kA4)));

  // Damaged by hand: neither a check nor a raise goes on as if there were none.
  std::ofstream(root_ + "/FENCE") << "{\"job\": \"17\", \"attem";
  const Status unreadable = CheckFence(root_, kA4);
  EXPECT_TRUE(IsFenced(unreadable));
  EXPECT_NE(unreadable.message().find("attempt 4 of job 17 cannot read the fence"), std::string::npos)
      << unreadable.message();
  auto raised = RaiseFence(root_, kA5);
  ASSERT_FALSE(raised.ok());
  EXPECT_EQ(raised.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(raised.status().message().find("if no other attempt of this job runs, delete it"), std::string::npos)
      << raised.status().message();
}

// The race fencing exists for: attempt 3 checks the fence, attempt 4 raises it and lists the
// directory, attempt 3 renames its step directory into place. Neither attempt 4 nor any later one
// resumes from it, by "auto" or when handed its path.
TEST_F(FenceTest, ACheckpointRenamedAfterTheNewerAttemptListedIsNeverResumedFrom) {
  Make(10, kA3);
  Raise(kA3);
  Prepare(20, kA3);
  ASSERT_TRUE(CheckFence(root_, kA3).ok());
  const Fence f4 = Raise(kA4);
  ASSERT_TRUE(Commit(20, kA3).ok());  // the late directory exists, complete and valid
  ASSERT_TRUE(VerifyCheckpoint(Dir(20)).ok());
  EXPECT_EQ(ResumeAuto(f4), Dir(10));
  auto given = ResolveResume(Dir(20), root_, nullptr, ResumableBy(f4, root_));
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(*given, Dir(10)) << "the path the controller might still hand over falls back";
  // Attempt 4 dies before it commits anything; attempt 5 does not take the late one either.
  const Fence f5 = Raise(kA5);
  EXPECT_EQ(f5.checkpoints.count("step-20"), 0u);
  EXPECT_EQ(ResumeAuto(f5), Dir(10));
  // An unfenced run (eft-train by hand) sees every checkpoint, as before fencing.
  EXPECT_EQ(*ResolveResume("auto", root_), Dir(20));
}

// The other order: the rename before the newer attempt lists the directory. Then the newer attempt
// may resume from it (it was committed while attempt 3 held the fence); attempt 3 finds the fence
// raised when it looks again after the rename, and stops.
TEST_F(FenceTest, ACheckpointRenamedBeforeTheNewerAttemptListedIsItsToResumeFrom) {
  Raise(kA3);
  Prepare(20, kA3);
  ASSERT_TRUE(CheckFence(root_, kA3).ok());
  ASSERT_TRUE(Commit(20, kA3).ok());
  const Fence f4 = Raise(kA4);
  EXPECT_TRUE(IsFenced(CheckFence(root_, kA3)));
  EXPECT_EQ(ResumeAuto(f4), Dir(20));
  EXPECT_EQ(ResumeAuto(Raise(kA5)), Dir(20)) << "and so may later ones";
}

// An attempt that has not noticed it was fenced off never replaces a newer attempt's checkpoint of
// the same step; a newer attempt replaces an older one's (possibly damaged) as before.
TEST_F(FenceTest, ACommitNeverReplacesANewerAttemptsCheckpoint) {
  Make(20, kA4);
  Prepare(20, kA3);
  const Status s = Commit(20, kA3);
  EXPECT_TRUE(IsFenced(s)) << s;
  EXPECT_EQ(ReadManifest(Dir(20))->writer, kA4);
  EXPECT_TRUE(fs::exists(Dir(20) + ".tmp")) << "left as it was";

  Make(30, kA3);
  Make(30, kA4);
  EXPECT_EQ(ReadManifest(Dir(30))->writer, kA4);
  EXPECT_FALSE(fs::exists(Dir(30) + ".replaced"));
}

// Retention by a fenced attempt: a checkpoint it may not resume from counts for nothing; it deletes
// one only when an earlier attempt of its job wrote it (a late commit), never a newer attempt's.
TEST_F(FenceTest, RetentionKeepsWhatItMayResumeFromAndNeverTouchesANewerAttempts) {
  Make(10, kA3);
  const Fence f4 = Raise(kA4);
  Make(20, kA3);  // attempt 3's late commit
  Make(30, kA4);
  // Attempt 4, keep_last 1: step-30 is kept, step-10 goes by keep_last, the late step-20 goes too
  // (nothing may resume from it; it does not push step-30 out of the kept ones).
  auto deleted = ApplyRetention(root_, 1, "", ResumableBy(f4, root_), kA4);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, (std::vector<std::string>{Dir(20), Dir(10)}));

  // Attempt 3, fenced off without knowing, with its old view: attempt 4's step-30 is not its to
  // delete, nor a newer step-40 of attempt 4's.
  Make(40, kA4);
  Make(35, kA3);
  Fence f3;
  f3.holder = kA3;
  deleted = ApplyRetention(root_, 1, "", ResumableBy(f3, root_), kA3);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_TRUE(deleted->empty()) << (*deleted)[0];
  EXPECT_TRUE(fs::exists(Dir(30)));
  EXPECT_TRUE(fs::exists(Dir(40)));

  // Unfenced retention is as before: the newest keep_last of whatever is there.
  deleted = ApplyRetention(root_, 2);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, (std::vector<std::string>{Dir(30)}));
}

// A checkpoint outside the fenced directory (a path given by hand) is not the fence's to judge.
TEST_F(FenceTest, APathOutsideTheFencedDirectoryIsAdmitted) {
  Fence f;
  f.holder = kA4;
  const ResumeCheck check = ResumableBy(f, root_ + "/");
  Manifest m;
  m.writer = kA3;
  EXPECT_EQ(check("/elsewhere/step-20", m), "");
  EXPECT_NE(check(root_ + "/step-20", m), "");
  EXPECT_NE(check(root_ + "/./step-20/", m), "") << "however the path is spelled";
}

}  // namespace
}  // namespace eft::trainer
