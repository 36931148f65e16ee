// Checkpointer: when and how a training run saves and resumes.
//
// Sharded saves are asynchronous: a background thread writes this rank's state into
// <root>/step-N.tmp/ while training goes on. On the CPU it writes straight from the live shards and
// moments, which nothing changes until the next optimizer update: the loop calls BeforeUpdate()
// first, which waits only if the write is still running then. On an accelerator the state is first
// copied (staged) into host memory, and the loop waits for that copy. At every step
// boundary all ranks call Poll(), one small all-reduce that also carries "stop requested" (SIGTERM
// on any rank); once every rank's files are written, rank 0 writes the COMMITTED manifest (sizes and
// CRC-32C of every file) and renames step-N.tmp to step-N. A checkpoint without a valid manifest
// does not exist. Full checkpoints (a Hugging Face directory plus optimizer state) are synchronous.
// Every committed checkpoint is reported as an event, and retention keeps the newest keep_last.
//
// A save that fails (a write error, a full disk) is never committed: its step-N.tmp is removed, a
// CheckpointFailedEvent says why, and training goes on from the previous checkpoint. When the storage
// is full (ENOSPC, a quota, a file size limit), rank 0 first deletes every committed checkpoint but
// the newest (and keep_best's), which no resume needs, and a failed full save is tried once more.
// kMaxConsecutiveFailedSaves failures in a row stop the run rather than train on for hours without a
// checkpoint: ResourceExhausted when the storage is full (the job fails: a restart cannot fix it),
// else IoError (retryable). docs/checkpoints.md, "When a save fails".
//
// A run that knows its attempt (EFT_ATTEMPT) is fenced (fence.h): BeginAttempt makes it the holder
// of the checkpoint directory before it resumes, it resumes only from checkpoints the fence admits,
// and rank 0 commits only while it still holds the fence. Fenced off by a newer attempt, it commits
// and deletes nothing more, and every rank returns fence.h's Fenced from the save (exit 79).
//
// Collective methods must be called by every rank in the same order. The times it reports (the
// events' seconds, the log) are read on the clock it is given; the test hooks it is given may stall
// a save (trainer/runtime/debug_hooks.h, "save", "sharded_write" and "commit").
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "trainer/checkpoint/fence.h"
#include "trainer/checkpoint/full_state.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/sharded_state.h"
#include "trainer/checkpoint/trainer_state.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/sharded_llama.h"
#include "trainer/runtime/debug_hooks.h"
#include "trainer/runtime/events.h"

namespace eft::trainer {

// spec.checkpoint, filled by BuildCheckpointPolicy (trainer/train/build.h) and nowhere else: the spec
// owns the defaults, so none are repeated here (value-initialise: CheckpointPolicy{} is all off).
inline constexpr int kMaxConsecutiveFailedSaves = 3;

struct CheckpointPolicy {
  std::string root;            // checkpoint.dir; empty: no checkpoints
  int64_t every_steps;         // sharded; 0: never
  int64_t full_every_steps;    // full; 0: only at the end
  int keep_last;
  HfFileSources hf_files;      // copied into full checkpoints (the model's tokenizer, templates...)
  bool require_resume;         // checkpoint.require_resume: all found checkpoints unusable -> fail
  bool keep_best;              // checkpoint.keep_best: retention spares BestEvaluatedCheckpoint (manifest.h)
  FullWriteMode full_write;    // checkpoint.full_write (full_state.h)
};

class Checkpointer {
 public:
  // None of the pointers is owned.
  Checkpointer(CheckpointPolicy policy, Communicator* comm, ShardedLlama* model, AdamW* optimizer,
               EventWriter* events, const DebugHooks* hooks = DebugHooks::None(),
               const Clock* clock = RealClock::Get());
  ~Checkpointer();  // waits for a background write

  bool enabled() const { return !policy_.root.empty(); }
  // The step of the save still being written in the background, or -1 when none is.
  int64_t pending_step() const { return pending_ ? pending_step_ : -1; }
  const CheckpointPolicy& policy() const { return policy_; }

  // Starts a sharded save of `state` (taken after state.step steps). Waits first for a previous save
  // to be committed (collective then). Returns the seconds the caller was held up.
  Result<double> BeginSharded(const TrainerState& state);
  // Before the optimizer changes the shards or moments: waits for a background write that reads them
  // in place. Not collective. Returns the seconds waited.
  double BeforeUpdate();
  // Collective, once per step boundary on every rank: commits a finished background save and tells
  // whether any rank asked to stop. With wait, blocks until a pending save is written and committed.
  Result<bool> Poll(bool stop_requested_here, bool wait);
  // Collective: a full checkpoint of `state`, written and committed before it returns. A failure is
  // a failed save (see above); `final` (the end of training): any failure is returned.
  Status SaveFull(const TrainerState& state, bool final = false);

  // Collective, once, before Resume: a fenced `attempt` (EFT_ATTEMPT > 0) with a checkpoint
  // directory becomes the holder of its fence (rank 0 raises it: RaiseFence), so that nothing an
  // older attempt commits from now on is resumed from, and this one commits only while it holds it.
  // Fenced on every rank when a newer attempt of the job holds it (this one is stale: it must not
  // train). Unfenced (attempt 0, or no checkpoint directory): nothing happens, as before fencing.
  Status BeginAttempt(const AttemptId& attempt);

  // The checkpoint to resume from (see ResolveResume), agreed by all ranks (collective), loaded into
  // the model and optimizer. Returns its trainer state, or nullopt for a fresh start. A checkpoint
  // from an incompatible run is FailedPrecondition (the caller exits 2).
  Result<std::optional<TrainerState>> Resume(const std::string& resume_from, const nlohmann::json& compat);

 private:
  std::vector<UnitState> Units();
  // Collective: one try at SaveFull's work. ResourceExhausted when some rank found the storage full.
  Status WriteFull(const TrainerState& state);
  std::string DirFor(int64_t step, bool tmp) const;
  // Every rank, after all ranks learned that the save of `step` failed (`storage_full`: on some
  // rank, because the storage is full): removes its files, frees room when the storage is full,
  // reports it, and returns the error that stops the run once kMaxConsecutiveFailedSaves failed in a
  // row (OK before that). `reason`: this rank's error, or empty when only another rank failed.
  Status SaveFailed(const std::string& kind, int64_t step, const std::string& reason, bool storage_full);
  // Rank 0: the failed save's files removed, room made when the storage is full, the event sent.
  // Returns how many older checkpoints it deleted.
  int64_t ReportFailedSave(const std::string& kind, int64_t step, const std::string& reason, bool storage_full,
                           int consecutive);
  // Rank 0 only: writes the manifest and renames step-N.tmp to step-N. Fenced when this attempt
  // no longer holds the fence (before or after the rename): then nothing is reported or deleted.
  Status Commit(int64_t step, const std::string& kind, const std::vector<ManifestFile>& files, double seconds,
                double stall_seconds);
  // Rank 0: a staged memory snapshot (step-S.snapshot, snapshot_adoption.h) committed as step-S,
  // whose path is returned; any other `resume_from` as it is; "auto" when the staged one is unusable.
  std::string AdoptIfStaged(const std::string& resume_from);
  // OK when the run is unfenced or still holds the fence (rank 0: it reads the fence).
  Status HoldsFence() const;
  // The checkpoints this run may resume from and count in retention: every one when unfenced.
  ResumeCheck Resumable() const;

  CheckpointPolicy policy_;
  Communicator* comm_;
  ShardedLlama* model_;
  AdamW* optimizer_;
  EventWriter* events_;
  const DebugHooks* hooks_;
  const Clock* clock_;

  // The save being written in the background, if any.
  bool pending_ = false;
  int64_t pending_step_ = 0;
  double pending_stall_ = 0;
  bool pending_reads_live_ = false;  // the writer reads the live shards (BeforeUpdate must wait)
  std::thread writer_;
  std::atomic<bool> writer_done_{false};
  Status writer_status_;
  std::vector<ManifestFile> writer_files_;  // this rank's shard, then (rank 0) trainer_state.json
  double writer_seconds_ = 0;
  int consecutive_failures_ = 0;  // saves failed in a row (reset by a committed one)
  AttemptId attempt_;             // unfenced (attempt 0) unless BeginAttempt made it the holder
  std::optional<Fence> fence_;    // rank 0: the fence it raised
};

}  // namespace eft::trainer
