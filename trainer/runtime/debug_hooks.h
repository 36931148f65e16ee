// DebugHooks: test hooks that make a rank misbehave on cue, so tests can check what the rest of the
// system does then. eft-train's main reads them from its environment once (FromEnvironment) and
// hands them to Trainer::Create, which passes them on to the loop and the checkpointer; the default
// (None) does nothing, as do unset variables.
//
//  - EFT_DEBUG_STALL=tokenize,load,... holds a rank inside those phases of its life, so tests can
//    stop it (SIGTERM) right there and check that it answers in bounded time; EFT_DEBUG_STALL_SECONDS
//    is how long each stall lasts (default 30). The phases: "tokenize" (data preparation), "load"
//    (model weights), "save" (writing a full checkpoint, after its files are written and before it
//    is committed), "sharded_write" (the background writer of a sharded save, before it writes: a
//    slow disk), "memory_snapshot" (the background writer of a memory snapshot, before it writes),
//    "commit" (rank 0 committing a checkpoint, after its last look at the fence and
//    before the rename: the window in which a newer attempt may start unseen, trainer/checkpoint/
//    fence.h), "step" (after every step: a slow trainer, for tests whose job must outlast a timer
//    of the controller's). Each phase is logged the first time it stalls.
//  - EFT_DEBUG_KILL_AT_STEP=N: the rank dies like a node that lost power (SIGKILL) once N steps are
//    done (Trainer::Run says which checkpoints exist then).
//
// The effects, the stall's sleep and the kill, are Actions a unit test may replace, to see them
// happen without waiting or dying. Thread-safe: the sharded writer stalls on a thread of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "common/mutex.h"

namespace eft::trainer {

class DebugHooks {
 public:
  struct Actions {
    std::function<void(double seconds)> sleep;  // unset: sleeps the calling thread
    std::function<void()> kill;                 // unset: SIGKILL to this process
  };

  DebugHooks() = default;  // none
  // Stalls of `stall_seconds` in `stall_phases`; the kill once `kill_at_step` steps are done (<= 0:
  // never).
  DebugHooks(std::set<std::string> stall_phases, double stall_seconds, int64_t kill_at_step, Actions actions = {});
  DebugHooks(const DebugHooks&) = delete;
  DebugHooks& operator=(const DebugHooks&) = delete;

  // EFT_DEBUG_STALL, EFT_DEBUG_STALL_SECONDS and EFT_DEBUG_KILL_AT_STEP of `env` (default: the
  // process environment), read as they always were (atof, atoll).
  static DebugHooks FromEnvironment(const std::map<std::string, std::string>* env = nullptr, Actions actions = {});
  // The hooks that do nothing, for callers that have none.
  static const DebugHooks* None();

  // Holds the calling thread for the stall's seconds when `phase` is one of the stalled phases.
  void StallIfAsked(const char* phase) const;
  // Whether the rank is to die now that `completed_steps` steps are done.
  bool KillDue(int64_t completed_steps) const { return kill_at_step_ > 0 && completed_steps == kill_at_step_; }
  // Dies; returns only when a test replaced the kill.
  void Kill() const;

 private:
  std::set<std::string> stall_phases_;
  double stall_seconds_ = 30;
  int64_t kill_at_step_ = 0;
  Actions actions_;
  mutable Mutex mu_;
  mutable std::set<std::string> logged_ GUARDED_BY(mu_);  // the phases that stalled once
};

}  // namespace eft::trainer
