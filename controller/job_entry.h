// JobEntry: what the controller holds of one job in memory: its stored records (the store's rows,
// written through JobTable::Apply) and what only memory keeps (the ranks it has seen of the running
// attempt, the latest progress, timers of the state machine). JobChange: one change of a job, as
// Apply writes it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/loss_history.h"
#include "controller/records.h"
#include "controller/resize_policy.h"
#include "eft/v1/job.pb.h"

namespace eft::controller {

inline bool IsTerminalState(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED || state == v1::JOB_STATE_CANCELLED;
}

// A rank of the current attempt, as its worker reported it.
struct RankView {
  bool seen_running = false;
  bool exited = false;
  std::string error;  // the rank's error event (its fatal error), for the attempt's end reason
};

// Where a restart after an unplanned end resumed from (eft_job_recoveries_total's `source`).
enum class RecoverySource { kMemory = 0, kDisk = 1, kScratch = 2 };
inline const char* RecoverySourceLabel(RecoverySource s) {
  return s == RecoverySource::kMemory ? "memory" : s == RecoverySource::kDisk ? "disk" : "scratch";
}

struct JobEntry {
  // Stored.
  JobRecord rec;
  std::vector<AttemptRecord> attempts;
  std::vector<CheckpointRecord> checkpoints;
  std::vector<EventRecord> events;
  // The loss curves (loss_history.h), stored with the reached steps (ProgressTracker).
  LossSeries train_loss;
  std::vector<LossSeries> eval_loss;  // one per eval set (spec::EvalSetNames), as far as reported

  // Memory only.
  v1::TrainingProgress progress;
  std::vector<RankView> ranks;  // of the newest attempt while the job is STARTING/RUNNING
  SteadyTime stop_deadline{};   // RECOVERING: stop waiting for old ranks to be reported gone
  // When the last attempt ended, and whether that end counted against max_restarts: a node found
  // LOST shortly after a counted rank failure was most likely its cause (AttemptLifecycle::OnNodeLost).
  SteadyTime ended_at{};
  bool end_counted = false;
  // The highest step the current attempt reached: the step it resumed from, then the newest it
  // reported (0: a fresh start, or not known: an attempt stored before schema 3). What the next
  // attempt's resume is measured against ("N steps lost"). Stored in the attempt's row
  // (AttemptRecord::reached_step) when it advances, so a controller restart keeps it.
  int64_t reached_step = 0;
  // Planned resizes by reason (index: ResizeReason), counted from `resized` events.
  std::array<int64_t, kResizeReasons.size()> resizes{};
  int64_t preemptions = 0;          // counted from `preempted` events
  int64_t checkpoint_failures = 0;  // counted from `checkpoint_failed` events
  // The current attempt has not reported a step yet: its nodes keep fast heartbeats (NodeTable).
  bool awaiting_first_step = false;
  // Why the job last did not grow although a node was free, so it is logged once, not every pass.
  std::string grow_held;
  // Memory snapshots (snapshot_tracker.h): decided before the next attempt starts, used by its start.
  // The staged snapshot directory it resumes from, with the step and where its shards came from
  // (path empty: the newest disk checkpoint); and, when a memory snapshot could not be used, why.
  struct MemoryResume {
    std::string path;
    int64_t step = 0;
    std::string from;  // "ranks 0-1 from node1, rank 2 from node3"
  };
  std::optional<MemoryResume> memory_resume;
  std::string memory_note;
  int memory_decided_after = 0;  // the attempt whose end these were decided for (0: none)
  // Since this controller started (memory only): steps trained again after restarts, and restarts
  // after an unplanned end by where they resumed (index: RecoverySource).
  int64_t steps_lost_total = 0;
  std::array<int64_t, 3> recoveries{};
  uint64_t version = 1;
  // The capacity epoch when placement last failed: until capacity changes it would fail again.
  uint64_t unplaceable_epoch = 0;

  bool active() const {  // STARTING or RUNNING
    return rec.state == v1::JOB_STATE_STARTING || rec.state == v1::JOB_STATE_RUNNING;
  }
  // QUEUED or RECOVERING: only a waiting job holds reservations.
  bool waits() const { return rec.state == v1::JOB_STATE_QUEUED || rec.state == v1::JOB_STATE_RECOVERING; }
  const AttemptRecord* current() const { return attempts.empty() ? nullptr : &attempts.back(); }
};

// A change of one job, applied to memory only after the store accepted it.
struct JobChange {
  JobRecord rec;
  std::optional<AttemptRecord> insert_attempt;
  std::optional<AttemptRecord> update_attempt;
  std::vector<EventRecord> events;
};

}  // namespace eft::controller
