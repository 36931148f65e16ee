// Memory snapshots end to end (docs/checkpoints.md, "Memory snapshots"): eft-train ranks given an
// EFT_SNAPSHOT_DIR hand their state there every few steps; killed with SIGKILL (every rank, like a
// power cut), their newest snapshot is staged into the checkpoint directory as a worker stages it
// (common/memory_snapshot.h) and the next run, at another world size, adopts it and continues exactly
// where the uninterrupted run went. A damaged staged shard falls back to the newest disk checkpoint.
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "common/memory_snapshot.h"
#include "tests/e2e/trainer_fixture.h"
#include "trainer/checkpoint/manifest.h"

namespace eft::testing {
namespace {

class MemorySnapshotTest : public TrainerTest {
 protected:
  void SetUp() override {
    TrainerTest::SetUp();
    InitModel();
    WriteData(48);
    epochs_ = 2;  // 48 examples / 8 per step = 6 steps per epoch: 12 steps
    // Snapshots in memory (tmpfs), as eft-worker keeps them: on the test's disk they would be written
    // back and slow the fsyncs of every test running beside this one.
    shm_ = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") / dir_.filename() : dir_ / "shm";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(shm_, ec);
    TrainerTest::TearDown();
  }
  std::string Spec(const std::string& ckpt_dir, int every, const std::string& memory_every) {
    extra_yaml_ = "checkpoint: {dir: " + ckpt_dir + ", every_steps: " + std::to_string(every) +
                  ", keep_last: 5, memory_every_steps: " + memory_every + "}\n";
    return WriteSpec(8, 2, 3e-3);
  }
  std::string SnapshotEnv(const std::string& name) { return "EFT_SNAPSHOT_DIR=" + (shm_ / name).string(); }
  fs::path shm_;
  // The memory_snapshot events of a run by step, then rank.
  static std::map<int64_t, std::map<int, snapshot::ShardRecord>> Snapshots(const Run& run,
                                                                           std::map<int64_t, std::map<int, std::string>>* paths) {
    std::map<int64_t, std::map<int, snapshot::ShardRecord>> out;
    for (const json& e : run.events) {
      if (e.value("event", "") != "memory_snapshot") continue;
      snapshot::ShardRecord r;
      r.step = e["step"].get<int64_t>();
      r.rank = e["rank"].get<int>();
      r.world_size = e["world_size"].get<int>();
      r.bytes = e["bytes"].get<int64_t>();
      r.crc32c = e["crc32c"].get<uint32_t>();
      out[r.step][r.rank] = r;
      (*paths)[r.step][r.rank] = e["path"].get<std::string>();
    }
    return out;
  }
  // Stages the newest snapshot every one of `world` ranks reported and whose files are still held;
  // returns its step (-1: none).
  int64_t StageNewest(const Run& run, int world, const std::string& ckpt) {
    std::map<int64_t, std::map<int, std::string>> paths;
    auto snaps = Snapshots(run, &paths);
    for (auto it = snaps.rbegin(); it != snaps.rend(); ++it) {
      if (static_cast<int>(it->second.size()) != world) continue;
      bool held = true;
      for (const auto& [rank, path] : paths[it->first]) held = held && fs::exists(path);
      if (!held) continue;
      for (const auto& [rank, record] : it->second) {
        Status s = snapshot::StageShard(paths[it->first][rank], record, snapshot::StagedDir(ckpt, it->first));
        EXPECT_TRUE(s.ok()) << s;
      }
      return it->first;
    }
    return -1;
  }
};

// W=2 with a snapshot every step, killed after step 7, resumed at W=3 from the staged snapshot.
TEST_F(MemorySnapshotTest, KilledRanksResumeExactlyFromTheirNewestSnapshotAtAnotherWorldSize) {
  Run ref = TrainRun("ref", 2, Spec((dir_ / "ref-ckpt").string(), 0, "0"), 0);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  ASSERT_EQ(ref.losses.size(), 12u);

  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string spec = Spec(ckpt, 0, "1");
  Run killed = TrainRun("killed", 2, spec, 0, "", SnapshotEnv("shm") + " EFT_DEBUG_KILL_AT_STEP=7");
  EXPECT_NE(killed.exit_code, 0);
  ASSERT_EQ(killed.losses.size(), 7u) << killed.output;
  // Taking snapshots changes nothing about training: the same bits as the run without them.
  for (size_t i = 0; i < killed.losses.size(); ++i) EXPECT_EQ(killed.losses[i], ref.losses[i]) << "step " << i + 1;
  EXPECT_NE(killed.output.find("memory snapshots into " + (shm_ / "shm").string() + ": every 1 step ("),
            std::string::npos)
      << killed.output;
  std::map<int64_t, std::map<int, std::string>> paths;
  auto snaps = Snapshots(killed, &paths);
  for (int64_t step = 1; step <= 6; ++step) {
    ASSERT_EQ(snaps[step].size(), 2u) << "step " << step << " was snapshotted by both ranks";
    EXPECT_EQ(snaps[step][1].world_size, 2);
  }
  // Each rank keeps at most two of its own files when no worker takes them over.
  for (int rank : {0, 1}) {
    int files = 0;
    for (const auto& entry : fs::recursive_directory_iterator(shm_ / "shm")) {
      if (entry.path().filename() == snapshot::ShardFileName(rank, 2)) ++files;
    }
    EXPECT_LE(files, 2) << "rank " << rank;
    EXPECT_GE(files, 1) << "rank " << rank;
  }
  EXPECT_FALSE(fs::exists(ckpt + "/step-6")) << "no disk checkpoint: the disk interval is 0";

  const int64_t staged = StageNewest(killed, 2, ckpt);
  ASSERT_GE(staged, 6) << "step 6's snapshot is complete before step 7's update (BeforeUpdate)";
  Run resumed = TrainRun("resumed", 3, spec, 0, "--resume " + snapshot::StagedDir(ckpt, staged));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("memory snapshot of step " + std::to_string(staged) + " committed as " + ckpt + "/step-" +
                                std::to_string(staged)),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + ckpt + "/step-" + std::to_string(staged) + " (sharded, step " +
                                std::to_string(staged) + ", written at world size 2, now 3"),
            std::string::npos)
      << resumed.output;
  EXPECT_FALSE(fs::exists(snapshot::StagedDir(ckpt, staged)));
  EXPECT_TRUE(trainer::VerifyCheckpoint(ckpt + "/step-" + std::to_string(staged)).ok());
  ExpectSameTraining(ref.losses, resumed.losses, static_cast<size_t>(staged), Weights("ref"), Weights("resumed"),
                     "resumed at W=3 from the memory snapshot of step " + std::to_string(staged));
  // Handed the same staged snapshot again (an attempt that stopped before saving anything newer hands
  // it on): it was adopted already, and the run resumes from that checkpoint without a word of warning.
  Run again = TrainRun("again", 2, spec, 0, "--resume " + snapshot::StagedDir(ckpt, staged));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output.find("not resuming from the memory snapshot"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("resumed from " + ckpt + "/step-" + std::to_string(staged) + " "), std::string::npos)
      << again.output;
  ExpectSameTraining(ref.losses, again.losses, static_cast<size_t>(staged), Weights("ref"), Weights("again"),
                     "the adopted snapshot handed on");
}

// LoRA: a snapshot holds the adapters (their fp32 slices and moments), not the frozen base; killed at
// W=2, resumed at W=1 from the staged snapshot, the run goes on as the uninterrupted one did.
TEST_F(MemorySnapshotTest, LoraAdaptersResumeFromTheirSnapshotAtAnotherWorldSize) {
  const std::string lora = "--set training.lora.r=4 --set training.lora.alpha=8";
  Run ref = TrainRun("ref", 2, Spec((dir_ / "ref-ckpt").string(), 0, "0"), 0, lora);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string spec = Spec(ckpt, 0, "1");
  Run killed = TrainRun("killed", 2, spec, 0, lora, SnapshotEnv("shm") + " EFT_DEBUG_KILL_AT_STEP=5");
  ASSERT_EQ(killed.losses.size(), 5u) << killed.output;
  std::map<int64_t, std::map<int, std::string>> paths;
  auto snaps = Snapshots(killed, &paths);
  ASSERT_FALSE(snaps.empty());
  // Adapters only: far smaller than a full fine-tuning snapshot of the same model.
  auto full = TrainRun("full", 2, Spec((dir_ / "full-ckpt").string(), 0, "1"), 2, "", SnapshotEnv("shm-full"));
  std::map<int64_t, std::map<int, std::string>> full_paths;
  auto full_snaps = Snapshots(full, &full_paths);
  ASSERT_FALSE(full_snaps.empty()) << full.output;
  EXPECT_LT(snaps.begin()->second.at(0).bytes * 3, full_snaps.begin()->second.at(0).bytes);
  const int64_t staged = StageNewest(killed, 2, ckpt);
  ASSERT_GE(staged, 4);
  Run resumed = TrainRun("resumed", 1, spec, 0, lora + " --resume " + snapshot::StagedDir(ckpt, staged));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ExpectSameTraining(ref.losses, resumed.losses, static_cast<size_t>(staged), {}, {},
                     "LoRA resumed at W=1 from the memory snapshot of step " + std::to_string(staged));
  auto adapter = [&](const std::string& name) {
    std::map<std::string, at::Tensor> out;
    auto file = trainer::SafetensorsFile::Open((dir_ / name / "adapter_model.safetensors").string());
    EXPECT_TRUE(file.ok()) << file.status();
    if (file.ok()) {
      for (const auto& e : (*file)->entries()) out[e.name] = *(*file)->Load(e.name, at::kFloat);
    }
    return out;
  };
  const auto ref_adapter = adapter("ref"), got = adapter("resumed");
  ASSERT_FALSE(ref_adapter.empty());
  ASSERT_EQ(got.size(), ref_adapter.size());
  for (const auto& [name, t] : ref_adapter) EXPECT_LT((got.at(name) - t).abs().max().item<double>(), 1e-6) << name;
}

// On the CPU a snapshot is written from the live shards: a write held for 1.5 s (longer than a step)
// holds the next update, so the snapshot is exactly its step's state.
TEST_F(MemorySnapshotTest, ASlowSnapshotWriteHoldsTheNextUpdateAndHoldsItsStepsState) {
  Run ref = TrainRun("ref", 2, Spec((dir_ / "ref-ckpt").string(), 0, "0"), 0);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string spec = Spec(ckpt, 0, "2");
  Run slow = TrainRun("slow", 2, spec, 0, "",
                      SnapshotEnv("shm") +
                          " EFT_DEBUG_STALL=memory_snapshot EFT_DEBUG_STALL_SECONDS=1.5 EFT_DEBUG_KILL_AT_STEP=5");
  ASSERT_EQ(slow.losses.size(), 5u) << slow.output;
  std::map<int64_t, std::map<int, std::string>> paths;
  auto snaps = Snapshots(slow, &paths);
  std::set<int64_t> steps;
  for (const auto& [step, ranks] : snaps) steps.insert(step);
  EXPECT_EQ(steps, (std::set<int64_t>{2, 4})) << "every 2 steps";
  ASSERT_EQ(StageNewest(slow, 2, ckpt), 4);
  Run resumed = TrainRun("resumed", 2, spec, 0, "--resume " + snapshot::StagedDir(ckpt, 4));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ExpectSameTraining(ref.losses, resumed.losses, 4, Weights("ref"), Weights("resumed"),
                     "from a slowly written snapshot of step 4");
}

// Under auto the interval is decided again every MemorySnapshotter::kRedecideEvery steps, counting
// how long the worker took to send each rank's newest snapshot to a peer (its replication note): here
// a worker that says 0.2 s for rank 1's (0.05 s for rank 0's), so from step 50 on snapshots are at
// least 0.2 s worth of steps apart (each one reaches its peer before the next is taken).
TEST_F(MemorySnapshotTest, AutoCountsTheTimeTheWorkerTakesToSendASnapshotToItsPeer) {
  epochs_ = 10;  // 60 steps
  const std::string snapshot_dir = (shm_ / "slow-peer").string();
  fs::create_directories(snapshot_dir);
  for (int rank : {0, 1}) {
    ASSERT_TRUE(snapshot::WriteReplicationNote(snapshot_dir, rank, {1, rank == 1 ? 0.2 : 0.05, 1000}).ok());
  }
  Run run = TrainRun("slow-peer", 2, Spec((dir_ / "ckpt").string(), 0, "auto"), 0, "", "EFT_SNAPSHOT_DIR=" + snapshot_dir);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string now = "memory snapshots now every ", step_takes = "a step takes ";
  const auto at = run.output.find(now);
  ASSERT_NE(at, std::string::npos) << run.output;
  const std::string line = run.output.substr(at, run.output.find('\n', at) - at);
  EXPECT_NE(line.find("sending one to a peer takes 0.2 s, and each must arrive before the next"), std::string::npos)
      << line << " (the slowest rank's time)";
  const int64_t interval = std::stoll(line.substr(now.size()));
  const double step = std::stod(line.substr(line.find(step_takes) + step_takes.size()));
  EXPECT_GE(interval, static_cast<int64_t>(std::ceil(0.2 / step - 1e-9))) << line;
  EXPECT_GT(interval, 1) << line << " (a step here takes well under 0.2 s)";
  std::map<int64_t, std::map<int, std::string>> paths;
  for (const auto& [snapshot_step, ranks] : Snapshots(run, &paths)) {
    EXPECT_EQ(ranks.size(), 2u) << "step " << snapshot_step;
    if (snapshot_step > 50) EXPECT_EQ(snapshot_step % interval, 0) << "step " << snapshot_step << ", interval " << interval;
  }
}

// Back-pressure (trainer/checkpoint/memory_snapshot.h): a stand-in for the worker takes each rank's
// files over (moves them out) up to step 3, then freezes for 2 s. The ranks write step 4 and wait
// before step 5's snapshot instead of training on past what a peer could hold of them; once the files
// are taken over again they go on and finish.
TEST_F(MemorySnapshotTest, RanksWaitForAFrozenWorkerToTakeTheirSnapshotsOver) {
  const fs::path incoming = shm_ / "bp", held = shm_ / "held";
  fs::create_directories(incoming);
  fs::create_directories(held);
  std::atomic<bool> done{false};
  int64_t newest_while_frozen = -1;
  // Moves every rank file of steps <= max_step out; returns how many it moved.
  auto take_over = [&](int64_t max_step) {
    int moved = 0;
    std::error_code ec;
    for (const auto& step_dir : fs::directory_iterator(incoming, ec)) {
      const std::string name = step_dir.path().filename().string();
      if (name.rfind("step-", 0) != 0 || std::stoll(name.substr(5)) > max_step) continue;
      for (const auto& f : fs::directory_iterator(step_dir.path(), ec)) {
        if (f.path().extension() != ".safetensors") continue;  // still being written (.tmp.PID)
        fs::rename(f.path(), held / (name + "-" + f.path().filename().string()), ec);
        moved += ec ? 0 : 1;
      }
    }
    return moved;
  };
  auto newest_present = [&]() {
    int64_t newest = -1;
    std::error_code ec;
    for (const auto& step_dir : fs::directory_iterator(incoming, ec)) {
      const std::string name = step_dir.path().filename().string();
      if (name.rfind("step-", 0) == 0 && !fs::is_empty(step_dir.path(), ec)) {
        newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));
      }
    }
    return newest;
  };
  std::thread worker([&] {
    int taken = 0;
    while (!done && taken < 2 * 3) {  // steps 1-3 of both ranks
      taken += take_over(3);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));  // frozen
    newest_while_frozen = newest_present();
    while (!done) {
      take_over(1 << 30);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  Run run = TrainRun("bp", 2, Spec((dir_ / "bp-ckpt").string(), 0, "1"), 0, "", "EFT_SNAPSHOT_DIR=" + incoming.string());
  done = true;
  worker.join();
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.losses.size(), 12u);
  EXPECT_EQ(newest_while_frozen, 4) << "step 4 written, step 5's snapshot waited for the worker";
  EXPECT_NE(run.output.find("waiting for this node's worker to take over the memory snapshot of step 4"),
            std::string::npos)
      << run.output;
}

// A staged shard damaged on the way (one byte): not adopted, said so, and the newest disk
// checkpoint is taken instead; training still ends where the uninterrupted run did.
TEST_F(MemorySnapshotTest, ADamagedStagedShardFallsBackToTheNewestDiskCheckpoint) {
  Run ref = TrainRun("ref", 2, Spec((dir_ / "ref-ckpt").string(), 0, "0"), 0);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string spec = Spec(ckpt, 3, "1");
  Run killed = TrainRun("killed", 2, spec, 0, "", SnapshotEnv("shm") + " EFT_DEBUG_KILL_AT_STEP=8");
  ASSERT_EQ(killed.losses.size(), 8u) << killed.output;
  ASSERT_TRUE(trainer::VerifyCheckpoint(ckpt + "/step-6").ok());
  const int64_t staged = StageNewest(killed, 2, ckpt);
  ASSERT_GE(staged, 7);
  const std::string shard = snapshot::StagedDir(ckpt, staged) + "/" + snapshot::ShardFileName(1, 2);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-10, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-10, std::ios::end);
    f.put(static_cast<char>(~c));
  }
  Run resumed = TrainRun("resumed", 2, spec, 0, "--resume " + snapshot::StagedDir(ckpt, staged));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("not resuming from the memory snapshot of step " + std::to_string(staged) + ": " + shard),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("(damaged while staged); taking the newest checkpoint in " + ckpt + " instead"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + ckpt + "/step-6 "), std::string::npos) << resumed.output;
  ExpectSameTraining(ref.losses, resumed.losses, 6, Weights("ref"), Weights("resumed"),
                     "from disk step-6 after a damaged snapshot");
}

// "auto" measures the first snapshot against the step and says what it chose; every rank snapshots
// the same steps (the interval is agreed), and training is unchanged.
TEST_F(MemorySnapshotTest, AutoChoosesOneIntervalForEveryRankAndSaysWhy) {
  Run ref = TrainRun("ref", 2, Spec((dir_ / "ref-ckpt").string(), 0, "0"), 0);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  Run run = TrainRun("auto", 2, Spec((dir_ / "ckpt").string(), 0, "auto"), 0, "", SnapshotEnv("shm"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.losses, ref.losses);
  const auto at = run.output.find("memory snapshots every ");
  ASSERT_NE(at, std::string::npos) << run.output;
  EXPECT_NE(run.output.find("(checkpoint.memory_every_steps auto: a snapshot costs ", at), std::string::npos);
  const int64_t interval = std::stoll(run.output.substr(at + std::string("memory snapshots every ").size()));
  ASSERT_GE(interval, 1);
  std::map<int64_t, std::map<int, std::string>> paths;
  auto snaps = Snapshots(run, &paths);
  ASSERT_TRUE(snaps.count(1)) << "the first step is snapshotted to measure";
  for (const auto& [step, ranks] : snaps) {
    EXPECT_EQ(ranks.size(), 2u) << "step " << step;
    EXPECT_TRUE(step == 1 || step % interval == 0) << "step " << step << ", interval " << interval;
    EXPECT_LT(step, 12) << "the last step is saved to disk, not snapshotted";
  }
  // Without a snapshot directory (not started by eft-worker) there are none, whatever the spec says.
  Run alone = TrainRun("alone", 2, Spec((dir_ / "ckpt2").string(), 0, "1"), 4);
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_NE(alone.output.find("checkpoint.memory_every_steps 1: no EFT_SNAPSHOT_DIR"), std::string::npos)
      << alone.output;
  for (const json& e : alone.events) EXPECT_NE(e.value("event", ""), "memory_snapshot");
}

}  // namespace
}  // namespace eft::testing
