// MemorySnapshotter: every few steps, this rank's complete resumable state handed to its node's
// worker in memory (docs/checkpoints.md, "Memory snapshots").
//
// At a due step boundary the rank writes its slices of every trainable unit's fp32 masters and both
// AdamW moments, with the trainer state in the file's metadata, as one safetensors file into
// EFT_SNAPSHOT_DIR (tmpfs the worker owns; common/memory_snapshot.h has the layout), checksummed as
// it is written, and reports it (rank::MemorySnapshotEvent); the worker then holds it and sends a
// replica to another node. The write runs on a background thread and waits on no other rank. On
// the CPU it reads the live shards (no copy): BeforeUpdate() holds the next optimizer update until
// it is done, so a snapshot is never half updated. On a GPU the slices are first copied to host
// memory. A rank keeps at most two of its own files in the directory (the worker normally moves
// each away at once), so a rank without a worker cannot fill the node's memory.
//
// The interval: a number from the spec, or "auto", decided per attempt from the first snapshot
// (its write time against the step time, averaged over the ranks in one small all-reduce, so every
// rank picks the same steps): every step when a snapshot costs at most kOverheadBudget of a step,
// else the smallest interval for which it does. Every kRedecideEvery steps it is decided again from
// the newest snapshot's cost and from how long the worker took to send this rank's newest snapshot
// to a peer (snapshot::ReadReplicationNote; the slowest rank's counts): at least that many steps
// apart, so each snapshot reaches its peer before the next one is taken and replication keeps up. A write that fails (the node's memory is full)
// turns snapshots off for the attempt, with a warning; training goes on with disk checkpoints.
//
// Back-pressure: once this rank has seen its worker take a file over (it vanished from the
// directory), a snapshot does not start while the previous one is still there, up to
// kTakeOverPatience. A frozen worker then stops its ranks within two snapshots, and with them the
// job (its collectives), instead of letting every rank train on past what the other nodes hold of
// this node's state; without a worker (files never taken over) it never waits.
//
// Not thread-safe: the step loop calls it. Collective only where AfterStep says so.
#pragma once

#include <atomic>
#include <deque>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/status.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/sharded_state.h"
#include "trainer/checkpoint/trainer_state.h"
#include "trainer/parallel/communicator.h"
#include "trainer/runtime/debug_hooks.h"
#include "trainer/runtime/events.h"

namespace eft::trainer {

struct MemorySnapshotPolicy {
  std::string dir;          // EFT_SNAPSHOT_DIR; "": no snapshots
  int64_t every_steps = 0;  // checkpoint.memory_every_steps: -1 auto, 0 off, N
  AttemptId attempt;        // recorded in each file
};

class MemorySnapshotter {
 public:
  static constexpr double kOverheadBudget = 0.03;
  static constexpr int64_t kMaxAutoInterval = 10000;
  static constexpr double kTakeOverPatience = 30.0;  // seconds
  static constexpr int64_t kRedecideEvery = 50;

  // None of the pointers is owned.
  MemorySnapshotter(MemorySnapshotPolicy policy, Communicator* comm, ShardedLlama* model, AdamW* optimizer,
                    EventWriter* events, const DebugHooks* hooks = DebugHooks::None(),
                    const Clock* clock = RealClock::Get());
  ~MemorySnapshotter();  // waits for a write in progress

  bool enabled() const { return enabled_; }
  // Steps between snapshots; 0 while "auto" has not decided yet (or when off).
  int64_t interval() const { return interval_; }

  // At every step boundary, on every rank, after the step's optimizer update: starts the snapshot of
  // `state` when one is due. `step_seconds` is the step's wall time. Collective once per attempt
  // under "auto" (the all-reduce that decides the interval); otherwise purely local.
  void AfterStep(const TrainerState& state, double step_seconds);
  // Before the optimizer changes the shards or moments: waits for a write that reads them in place.
  // Returns the seconds waited.
  double BeforeUpdate();
  // Waits for a write in progress (at the end of a run, before a test's kill).
  void Wait();

 private:
  std::string OwnShardPath(int64_t step) const;  // this rank's file of `step` in its worker's directory
  void Start(const TrainerState& state);
  // Joins the writer and accounts for its result; the seconds waited.
  double Join();
  // Collective: every rank calls it at the same step. `first`: the decision after the first snapshot.
  void DecideInterval(double step_seconds, bool first = true);
  // Back-pressure (see the top of this file).
  void WaitForTakeOver();

  MemorySnapshotPolicy policy_;
  Communicator* comm_;
  ShardedLlama* model_;
  AdamW* optimizer_;
  EventWriter* events_;
  const DebugHooks* hooks_;
  const Clock* clock_;
  bool enabled_ = false;
  int64_t interval_ = 0;
  bool measuring_ = false;  // auto: the first snapshot was started and its cost is not yet known
  bool failed_ = false;     // this rank's write failed: it takes no more (auto: all ranks agree to stop)
  bool logged_first_ = false;
  bool worker_takes_over_ = false;  // a file of this rank vanished: a worker takes them over

  std::thread writer_;
  bool pending_ = false;
  bool pending_reads_live_ = false;
  int64_t pending_step_ = 0;
  double pending_stall_ = 0;
  // Set by the writer thread, read after join.
  Status writer_status_;
  double writer_seconds_ = 0;
  int64_t writer_bytes_ = 0;
  double last_cost_seconds_ = 0;  // the last snapshot's stall plus its write time
  std::deque<int64_t> own_steps_;  // steps of this rank's files written, oldest first (at most 2 kept)
};

}  // namespace eft::trainer
