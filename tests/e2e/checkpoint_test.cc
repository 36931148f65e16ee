// Checkpoints end to end: eft-train processes killed with SIGKILL at a known step (every rank, like
// a power cut) and resumed at another world size must continue exactly where the uninterrupted run
// went; corrupt checkpoints are skipped; SIGTERM saves and exits 75.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <thread>

#include "tests/e2e/trainer_fixture.h"
#include "tests/unit/trainer/model/tiny_model.h"
#include "trainer/checkpoint/manifest.h"

namespace eft::testing {
namespace {

class CheckpointTest : public TrainerTest {
 protected:
  void SetUp() override {
    TrainerTest::SetUp();
    InitModel();
    WriteData(48);
    // 48 examples / 8 per step = 6 steps per epoch; 2 epochs = 12 steps.
    epochs_ = 2;
  }
  std::string Spec(int every, int full_every, const std::string& ckpt_dir, const std::string& full_write = "") {
    extra_yaml_ = "checkpoint: {dir: " + ckpt_dir + ", every_steps: " + std::to_string(every) +
                  ", full_every_steps: " + std::to_string(full_every) + ", keep_last: 5" +
                  (full_write.empty() ? "" : ", full_write: " + full_write) + "}\n";
    return WriteSpec(8, 2, 3e-3);
  }
  std::string Resumed(const Run& r) {
    auto at = r.output.find("resumed from ");
    return at == std::string::npos ? "" : r.output.substr(at, r.output.find('\n', at) - at);
  }
};

TEST_F(CheckpointTest, KilledAtW4ResumesExactlyAtW2AndW3FromASharded) {
  Run ref = TrainRun("ref", 4, Spec(5, 0, (dir_ / "ref-ckpt").string()), 0);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  ASSERT_EQ(ref.losses.size(), 12u);
  auto ref_weights = Weights("ref");

  for (int resume_world : {2, 3}) {
    const std::string ckpt = (dir_ / ("ckpt-w" + std::to_string(resume_world))).string();
    std::string spec = Spec(5, 0, ckpt);
    // Every rank dies by SIGKILL after step 10: step-5 is committed, step-10 may be half written.
    Run killed = TrainRun("killed", 4, spec, 0, "", "EFT_DEBUG_KILL_AT_STEP=10");
    EXPECT_NE(killed.exit_code, 0);
    ASSERT_GE(killed.losses.size(), 10u);
    const std::string newest = trainer::NewestValidCheckpoint(ckpt);
    ASSERT_FALSE(newest.empty());
    const std::string name = "resumed-w" + std::to_string(resume_world);
    Run resumed = TrainRun(name, resume_world, spec, 0, "--resume auto");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    const size_t from = newest == ckpt + "/step-10" ? 10 : 5;
    EXPECT_NE(Resumed(resumed).find("step-" + std::to_string(from)), std::string::npos) << resumed.output;
    ExpectSameTraining(ref.losses, resumed.losses, from, ref_weights, Weights(name),
                       "resumed at W=" + std::to_string(resume_world) + " from step " + std::to_string(from));
  }
}

// On the CPU a sharded save is written straight from the live shards and moments (no copy), so
// the next optimizer update must wait until the write is done. Here the writer is held 1.5 s
// before it writes (EFT_DEBUG_STALL=sharded_write), far longer than a step: the update of step 4
// waits for it, the checkpoint holds exactly step 3's state (the resume continues like the
// uninterrupted run; without the wait it would hold step 4's update and the losses would differ),
// and its event says how long the loop waited.
TEST_F(CheckpointTest, ASlowShardedWriteHoldsTheNextUpdateAndSavesTheRightState) {
  Run ref = TrainRun("ref", 2, Spec(0, 0, (dir_ / "ref-ckpt").string()), 0);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const std::string ckpt = (dir_ / "ckpt").string();
  std::string spec = Spec(3, 0, ckpt);
  Run slow = TrainRun("slow", 2, spec, 0, "",
                      "EFT_DEBUG_STALL=sharded_write EFT_DEBUG_STALL_SECONDS=1.5 EFT_DEBUG_KILL_AT_STEP=5");
  ASSERT_GE(slow.losses.size(), 5u) << slow.output;
  double stall = -1;
  for (const auto& e : slow.events) {
    if (e.value("event", "") == "checkpoint" && e.value("step", 0) == 3) stall = e.value("stall_seconds", -1.0);
  }
  EXPECT_GE(stall, 1.0) << "the update of step 4 waited for the write";
  EXPECT_LT(stall, 10.0);
  Run resumed = TrainRun("resumed", 2, spec, 0, "--resume " + ckpt + "/step-3");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ExpectSameTraining(ref.losses, resumed.losses, 3, Weights("ref"), Weights("resumed"), "from a slowly written step-3");
}

TEST_F(CheckpointTest, ResumesExactlyFromAFullCheckpoint) {
  Run ref = TrainRun("ref", 2, Spec(0, 4, (dir_ / "ref-ckpt").string()), 0);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const std::string ckpt = (dir_ / "ckpt").string();
  std::string spec = Spec(0, 4, ckpt);
  Run killed = TrainRun("killed", 2, spec, 0, "", "EFT_DEBUG_KILL_AT_STEP=6");
  ASSERT_GE(killed.losses.size(), 6u);
  auto m = trainer::VerifyCheckpoint(ckpt + "/step-4");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->kind, "full");
  Run resumed = TrainRun("resumed", 3, spec, 0, "--resume " + ckpt + "/step-4");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ExpectSameTraining(ref.losses, resumed.losses, 4, Weights("ref"), Weights("resumed"), "from full step-4");
  // The final full checkpoint is a Hugging Face directory.
  EXPECT_TRUE(fs::exists(ckpt + "/step-12/model.safetensors"));
  EXPECT_TRUE(fs::exists(ckpt + "/step-12/config.json"));
  EXPECT_TRUE(trainer::VerifyCheckpoint(ckpt + "/step-12").ok());
}

// checkpoint.full_write (docs/checkpoints.md, "Write path"): the parallel write (every rank writes
// its slices into the files) and the rank0 write (gathered to rank 0) of the same run write the
// same bytes, manifests included, and each rank says what it wrote.
TEST_F(CheckpointTest, ParallelAndRank0FullWritesWriteTheSameCheckpoint) {
  std::map<std::string, Run> runs;
  for (const std::string mode : {"parallel", "rank0"}) {
    runs[mode] = TrainRun(mode, 2, Spec(0, 4, (dir_ / mode).string(), mode), 0);
    ASSERT_EQ(runs[mode].exit_code, 0) << runs[mode].output;
  }
  EXPECT_NE(runs["parallel"].output.find("(parallel write; rank 0 wrote"), std::string::npos) << runs["parallel"].output;
  EXPECT_NE(runs["parallel"].output.find("rank 1 wrote"), std::string::npos) << runs["parallel"].output;
  EXPECT_NE(runs["rank0"].output.find("(rank0 write; rank 0 wrote"), std::string::npos) << runs["rank0"].output;
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const std::string step : {"step-4", "step-8", "step-12"}) {
    auto a = trainer::VerifyCheckpoint((dir_ / "parallel" / step).string());
    auto b = trainer::VerifyCheckpoint((dir_ / "rank0" / step).string());
    ASSERT_TRUE(a.ok() && b.ok()) << step;
    ASSERT_EQ(a->files.size(), b->files.size());
    for (size_t i = 0; i < a->files.size(); ++i) {
      EXPECT_EQ(a->files[i].path, b->files[i].path);
      if (a->files[i].path == "trainer_state.json") continue;
      EXPECT_EQ(a->files[i].crc32c, b->files[i].crc32c) << step << "/" << a->files[i].path;
      EXPECT_TRUE(bytes(dir_ / "parallel" / step / a->files[i].path) == bytes(dir_ / "rank0" / step / b->files[i].path))
          << step << "/" << a->files[i].path;
    }
  }
}

// Every kind of damage to the newest checkpoint: the resume names it, skips it and continues from
// the previous one (step-3) with the right losses.
TEST_F(CheckpointTest, ADamagedNewestCheckpointIsSkippedForThePreviousOne) {
  const std::string ckpt = (dir_ / "ckpt").string();
  std::string spec = Spec(3, 0, ckpt);
  Run ref = TrainRun("ref", 2, spec, 0, "", "EFT_DEBUG_KILL_AT_STEP=7");
  ASSERT_TRUE(trainer::VerifyCheckpoint(ckpt + "/step-3").ok());
  ASSERT_TRUE(trainer::VerifyCheckpoint(ckpt + "/step-6").ok());
  ASSERT_GE(ref.losses.size(), 5u);
  const std::string shard = "/step-6/rank-00001-of-00002.safetensors";
  auto flip = [](const std::string& path) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(fs::file_size(path) / 2);
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(at);
    f.write(&c, 1);
  };
  struct Case {
    std::string name;
    std::function<void(const std::string&)> damage;
    std::string reason;  // in the warning
  };
  std::vector<Case> cases = {
      {"truncated-shard", [&](const std::string& d) { fs::resize_file(d + shard, fs::file_size(d + shard) - 100); },
       "truncated"},
      {"flipped-byte", [&](const std::string& d) { flip(d + shard); }, "checksum mismatch"},
      {"no-manifest", [&](const std::string& d) { fs::remove(d + "/step-6/COMMITTED"); }, "no COMMITTED"},
      {"missing-file", [&](const std::string& d) { fs::remove(d + shard); }, "listed in the manifest but missing"},
      {"stale-tmp",  // a newer save that was never committed is not a checkpoint at all
       [&](const std::string& d) {
         fs::remove_all(d + "/step-6");
         fs::create_directories(d + "/step-9.tmp");
         fs::copy_file(d + "/step-3/rank-00000-of-00002.safetensors", d + "/step-9.tmp/rank-00000-of-00002.safetensors");
       },
       ""},
  };
  for (const auto& c : cases) {
    const std::string copy = (dir_ / c.name).string();
    fs::copy(ckpt, copy, fs::copy_options::recursive);
    c.damage(copy);
    // Killed after step 5 to keep it short (a smaller --max-steps would change the LR schedule).
    Run resumed = TrainRun(c.name, 2, Spec(3, 0, copy), 0, "--resume auto", "EFT_DEBUG_KILL_AT_STEP=5");
    if (!c.reason.empty()) {
      EXPECT_NE(resumed.output.find("skipping checkpoint " + copy + "/step-6: "), std::string::npos) << resumed.output;
      EXPECT_NE(resumed.output.find(c.reason), std::string::npos) << c.name << "\n" << resumed.output;
    }
    EXPECT_NE(Resumed(resumed).find(copy + "/step-3 "), std::string::npos) << c.name << "\n" << resumed.output;
    ASSERT_EQ(resumed.losses.size(), 2u) << "steps 4 and 5";
    EXPECT_NEAR(resumed.losses[0], ref.losses[3], 1e-6) << c.name;
    EXPECT_NEAR(resumed.losses[1], ref.losses[4], 1e-6) << c.name;
  }
}

// A disk that refuses the writes (here a file size limit, which fails write() with EFBIG just as a
// full disk fails it with ENOSPC; 32 KiB: below any checkpoint file of this model, above the events
// file the test reads): no checkpoint is committed half written and no step-N.tmp is left behind;
// each failed save is an event saying why; training goes on past the first failures and stops at the
// third in a row (docs/checkpoints.md, "When a save fails") with exit 77, the storage being full.
TEST_F(CheckpointTest, AFullDiskCommitsNothingReportsEveryFailureAndStopsAtTheThird) {
  const std::string ckpt = (dir_ / "ckpt").string();
  Run r = TrainRun("full", 2, Spec(3, 0, ckpt), 0, "", "ulimit -f 32;");
  EXPECT_EQ(r.exit_code, 77) << r.output;
  EXPECT_GE(r.losses.size(), 9u) << "training went on after the first failed saves";
  EXPECT_LT(r.losses.size(), 12u) << "and stopped before the end";
  EXPECT_NE(r.output.find("is full: 3 checkpoints in a row failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("File too large"), std::string::npos) << r.output;
  EXPECT_TRUE(trainer::ListCheckpointDirs(ckpt).empty()) << "nothing committed";
  for (const auto& entry : fs::directory_iterator(ckpt)) {
    EXPECT_EQ(entry.path().filename().string().find("step-"), std::string::npos) << "left behind: " << entry.path();
  }
  std::vector<json> failed;
  for (const auto& e : r.events) {
    EXPECT_NE(e["event"], "checkpoint") << e.dump();
    if (e["event"] == "checkpoint_failed") failed.push_back(e);
  }
  ASSERT_EQ(failed.size(), 3u);
  for (size_t i = 0; i < failed.size(); ++i) {
    EXPECT_EQ(failed[i]["step"], 3 * (i + 1)) << failed[i].dump();
    EXPECT_EQ(failed[i]["consecutive"], i + 1) << failed[i].dump();
    EXPECT_EQ(failed[i]["storage_full"], true) << failed[i].dump();
    EXPECT_NE(failed[i]["reason"].get<std::string>().find("File too large"), std::string::npos) << failed[i].dump();
  }
}

// A full save whose files cannot even be created on the writing rank (ulimit -f 1: the safetensors
// headers alone are larger than 1 KiB) fails the run on every rank at once. Before the fix the
// writer returned before the unit gathers and the other rank waited in them for the process
// group's 300 s timeout.
TEST_F(CheckpointTest, AFullSaveThatCannotStartFailsFastOnEveryRank) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const auto start = std::chrono::steady_clock::now();
  Run r = TrainRun("nostart", 2, Spec(0, 0, ckpt), 4, "", "ulimit -f 1;");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 77) << "the storage is full: no retry can help\n" << r.output;
  EXPECT_NE(r.output.find("File too large"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Timed out"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 120) << r.output;
  EXPECT_TRUE(trainer::ListCheckpointDirs(ckpt).empty()) << "nothing committed";
}

// A bf16 model's full checkpoint holds bf16 HF weights, so the exact resume needs the fp32 master
// weights saved beside them in optimizer.safetensors. Same world size on both sides, so the bf16
// arithmetic is the same and the losses must match to float rounding of the printout.
TEST_F(CheckpointTest, ABf16ModelResumesExactlyFromItsFullCheckpoint) {
  InitModel(2, "bfloat16");
  Spec(0, 4, (dir_ / "ref-ckpt").string());  // sets the checkpoint section WriteSpec appends
  Run ref = TrainRun("ref", 2, WriteSpec(8, 2, 3e-3, "bf16"), 0);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const std::string ckpt = (dir_ / "ckpt").string();
  Spec(0, 4, ckpt);
  const std::string spec = WriteSpec(8, 2, 3e-3, "bf16");
  TrainRun("killed", 2, spec, 0, "", "EFT_DEBUG_KILL_AT_STEP=6");
  auto optimizer = trainer::SafetensorsFile::Open(ckpt + "/step-4/optimizer.safetensors");
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  EXPECT_NE((*optimizer)->Find("master.model.embed_tokens.weight"), nullptr);
  auto weights = trainer::SafetensorsDir::Open(ckpt + "/step-4");
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ((*weights)->Find("model.embed_tokens.weight")->scalar_type, at::kBFloat16) << "HF weights in the model's dtype";
  Run resumed = TrainRun("resumed", 2, spec, 0, "--resume " + ckpt + "/step-4");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ASSERT_EQ(resumed.losses.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(resumed.losses[i], ref.losses[4 + i], 1e-6) << "step " << i + 5;
}

// A full checkpoint is a Hugging Face model directory: eft's loader reads back exactly the weights
// the run ended with, and an independent reader (the Python reference parses config.json and the
// safetensors files itself, and implements the model from the formulas) gets the same logits.
// Tolerance 1e-5 as in llama_test: two fp32 implementations of the same model differ by ~1e-6.
TEST_F(CheckpointTest, AFullCheckpointIsAModelDirectoryOthersLoad) {
  const std::string ckpt = (dir_ / "ckpt").string();
  Run r = TrainRun("run", 2, Spec(0, 0, ckpt), 0);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string full = ckpt + "/step-12";
  ASSERT_TRUE(trainer::VerifyCheckpoint(full).ok());
  auto loaded = trainer::testing::LoadModelDir(full);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto final_model = Weights("run");  // --output-dir: the weights at the end of training
  for (const auto& [name, t] : loaded->Named()) {
    ASSERT_TRUE(final_model.count(name)) << name;
    EXPECT_TRUE(at::equal(t, final_model.at(name))) << name;
  }
  trainer::Batch batch = trainer::testing::MakeBatch(
      {{{trainer::testing::RandomTokens(11, 128, 1), trainer::testing::RandomTokens(7, 128, 2)}, 2, 0, 0}}, 0);
  at::Tensor logits = trainer::testing::RunModel(*loaded, batch).logits;
  if (std::string why = trainer::testing::ReferenceUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  auto ref = trainer::testing::RunReferenceOnHfDir(full, loaded->config, batch);
  EXPECT_LE(trainer::testing::MaxAbsDiff(logits, ref.logits), 1e-5);
}

// A retry (EFT_ATTEMPT > 1) that was given no checkpoint looks in checkpoint.dir itself; a first
// attempt never does (a new job, another EFT_JOB_ID, must not pick up another run's checkpoints; it
// takes the directory's fence over, docs/checkpoints.md "Fencing"). An older attempt of the job
// than the one that raised the fence is stale: it exits 79 before it trains.
TEST_F(CheckpointTest, ARetryWithoutResumeFromFindsTheNewestCheckpoint) {
  const std::string ckpt = (dir_ / "ckpt").string();
  std::string spec = Spec(3, 0, ckpt);
  TrainRun("killed", 2, spec, 0, "", "EFT_DEBUG_KILL_AT_STEP=7");
  ASSERT_TRUE(trainer::VerifyCheckpoint(ckpt + "/step-6").ok());
  Run retry = TrainRun("retry", 2, spec, 0, "", "EFT_JOB_ID=1 EFT_ATTEMPT=2");
  ASSERT_EQ(retry.exit_code, 0) << retry.output;
  EXPECT_NE(Resumed(retry).find(ckpt + "/step-6 "), std::string::npos) << retry.output;
  EXPECT_EQ(retry.losses.size(), 6u);
  Run stale = TrainRun("stale", 2, spec, 0, "", "EFT_JOB_ID=1 EFT_ATTEMPT=1");
  EXPECT_EQ(stale.exit_code, 79) << stale.output;
  EXPECT_NE(stale.output.find("eft-train: attempt 1 of job 1 is stale: attempt 2 of job 1 started since and holds " +
                              ckpt + "/FENCE; not training"),
            std::string::npos)
      << stale.output;
  EXPECT_TRUE(stale.losses.empty());
  Run fresh = TrainRun("fresh", 2, spec, 0, "", "EFT_JOB_ID=2 EFT_ATTEMPT=1");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_EQ(fresh.losses.size(), 12u);
}

// keep_last: older checkpoints are deleted as newer ones commit, and each deletion is reported so
// the controller stops listing it.
TEST_F(CheckpointTest, RetentionKeepsTheNewestAndReportsWhatItDeletes) {
  const std::string ckpt = (dir_ / "ckpt").string();
  extra_yaml_ = "checkpoint: {dir: " + ckpt + ", every_steps: 2, keep_last: 2}\n";
  const std::string spec = WriteSpec(8, 2, 3e-3);
  Run r = TrainRun("run", 2, spec, 0);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> deleted, committed;
  for (const auto& e : r.events) {
    if (e["event"] == "checkpoint_deleted") deleted.push_back(fs::path(e["path"].get<std::string>()).filename().string());
    if (e["event"] == "checkpoint") committed.push_back(fs::path(e["path"].get<std::string>()).filename().string());
  }
  EXPECT_EQ(committed, (std::vector<std::string>{"step-2", "step-4", "step-6", "step-8", "step-10", "step-12"}));
  EXPECT_EQ(deleted, (std::vector<std::string>{"step-2", "step-4", "step-6", "step-8"}));
  std::vector<std::string> left;
  for (const auto& d : trainer::ListCheckpointDirs(ckpt)) left.push_back(fs::path(d.path).filename().string());
  EXPECT_EQ(left, (std::vector<std::string>{"step-12", "step-10"}));
}

TEST_F(CheckpointTest, AnIncompatibleResumeIsRefusedWithTheReason) {
  const std::string ckpt = (dir_ / "ckpt").string();
  Run first = TrainRun("first", 2, Spec(3, 0, ckpt), 0, "", "EFT_DEBUG_KILL_AT_STEP=4");
  ASSERT_TRUE(trainer::VerifyCheckpoint(ckpt + "/step-3").ok());
  std::string spec = Spec(3, 0, ckpt);
  Run other = TrainRun("other", 2, spec, 0, "--resume auto --set training.global_batch_size=4");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("training.global_batch_size: checkpoint 8, now 4"), std::string::npos) << other.output;
}

// Every checkpoint of the run is damaged: losing all progress is said in one line and an event,
// and with checkpoint.require_resume the retry fails instead of training from step 0 again.
TEST_F(CheckpointTest, WhenNoCheckpointIsUsableTheRetrySaysSoOrFails) {
  const std::string ckpt = (dir_ / "ckpt").string();
  TrainRun("killed", 2, Spec(3, 0, ckpt), 0, "", "EFT_DEBUG_KILL_AT_STEP=7");
  auto dirs = trainer::ListCheckpointDirs(ckpt);
  ASSERT_EQ(dirs.size(), 2u);  // step-6, step-3
  for (const auto& d : dirs) {
    for (const auto& f : fs::directory_iterator(d.path)) {
      if (f.path().filename().string().rfind("rank-", 0) == 0) fs::resize_file(f.path(), 10);
    }
  }
  Run retry = TrainRun("retry", 2, Spec(3, 0, ckpt), 0, "", "EFT_ATTEMPT=2");
  ASSERT_EQ(retry.exit_code, 0) << retry.output;
  EXPECT_EQ(retry.losses.size(), 12u) << "started from scratch";
  EXPECT_NE(retry.output.find("no valid checkpoint in " + ckpt + ": starting from scratch, 2 checkpoints skipped"),
            std::string::npos)
      << retry.output;
  int none_events = 0;
  for (const auto& e : retry.events) {
    if (e["event"] != "no_valid_checkpoint") continue;
    ++none_events;
    EXPECT_EQ(e["dir"], ckpt);
    EXPECT_EQ(e["skipped"], 2);
  }
  EXPECT_EQ(none_events, 1);

  // The same damage with require_resume: exit 2 naming the reason, nothing trained.
  fs::remove_all(ckpt);
  TrainRun("killed2", 2, Spec(3, 0, ckpt), 0, "", "EFT_DEBUG_KILL_AT_STEP=7");
  for (const auto& d : trainer::ListCheckpointDirs(ckpt)) {
    for (const auto& f : fs::directory_iterator(d.path)) {
      if (f.path().filename().string().rfind("rank-", 0) == 0) fs::resize_file(f.path(), 10);
    }
  }
  Run strict = TrainRun("strict", 2, Spec(3, 0, ckpt), 0, "--set checkpoint.require_resume=true", "EFT_ATTEMPT=2");
  EXPECT_EQ(strict.exit_code, 2) << strict.output;
  EXPECT_TRUE(strict.losses.empty());
  EXPECT_NE(strict.output.find("no valid checkpoint in " + ckpt + " (2 skipped, see the warnings above) and "
                               "checkpoint.require_resume is set: not starting from scratch"),
            std::string::npos)
      << strict.output;
}

TEST_F(CheckpointTest, SigtermSavesAndExits75) {
  const std::string ckpt = (dir_ / "ckpt").string();
  epochs_ = 1000;  // long enough to be stopped
  std::string spec = Spec(0, 0, ckpt);
  std::string events = (dir_ / "term.events").string();
  ChildProcess p;
  ASSERT_TRUE(p.Start({"/bin/sh", "-c",
                       "EFT_EVENTS_FD=3 exec " + Train() + " train --config " + spec + " --nproc 2 --threads 1 3>>" + events},
                      {}, (dir_ / "term.log").string()));
  // Wait for a few steps, then SIGTERM the launcher, which forwards it to the ranks.
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(events).find("\"step\":3") != std::string::npos; },
                        std::chrono::seconds(60)));
  p.Signal(SIGTERM);
  int status = p.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 75) << ReadFile((dir_ / "term.log").string());
  EXPECT_FALSE(trainer::NewestValidCheckpoint(ckpt).empty());
  EXPECT_NE(ReadFile(events).find("\"event\":\"checkpoint\""), std::string::npos);
}

}  // namespace
}  // namespace eft::testing
