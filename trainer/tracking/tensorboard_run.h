// TensorBoardRun: one attempt's share of a job's TensorBoard run (docs/tracking.md, "TensorBoard").
//
// Rank 0 writes it from the rank events it emits (Observe), so TensorBoard shows exactly the values
// the worker and the controller are told, at full resolution, with no controller in the way. A job
// is one run directory; each attempt adds a new event file to it (tensorboard_events.h), which
// TensorBoard reads after the earlier attempts' files:
//
//   at the start   SessionLog START at StartStep(resumed_step): TensorBoard drops the points earlier
//                  attempts wrote at or after that step (the steps this attempt trains again), so
//                  each step shows once; eft/attempt and eft/world_size at that step
//   each step      train/loss, train/learning_rate, train/grad_norm, train/tokens_per_second and,
//                  when known (> 0), train/mfu, at the global optimizer step
//   each eval      eval/<set>/loss
//   a clean end    (finished, or stopped on request) eft/attempt and eft/world_size at the last step,
//                  then SessionLog STOP
//
// Tracking never fails or slows training: when a file cannot be created or written (a read-only
// directory, a full disk) the run logs one warning and writes nothing more in this attempt.
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/rank_protocol.h"
#include "trainer/tracking/tensorboard_events.h"

namespace eft::trainer {

// The run directory spec.tracking.tensorboard names: "" is <checkpoint_dir>/tensorboard (none when
// checkpoint_dir is empty too), "off" none, anything else itself. "" means none.
std::string TensorBoardDir(const std::string& setting, const std::string& checkpoint_dir);

struct TensorBoardAttempt {
  int attempt = 0;           // EFT_ATTEMPT (0: not launched by eft)
  int world_size = 1;
  int64_t resumed_step = 0;  // steps done when the attempt starts (0: from scratch)
};

class TensorBoardRun {
 public:
  // The step of an attempt's START: the first step it writes. Resumed after step s it trains s + 1
  // on; from scratch it also evaluates at step 0 (the loss before fine-tuning) and rewrites it all.
  static int64_t StartStep(int64_t resumed_step) { return resumed_step > 0 ? resumed_step + 1 : 0; }

  // A new event file in `dir` with the attempt's start, its path logged. Never fails: when the file
  // cannot be made, one warning, and a run that writes nothing (enabled() false). `dir` "": nullptr
  // (TensorBoard is off). `clock` gives the wall times and must outlive the run.
  static std::unique_ptr<TensorBoardRun> Start(const std::string& dir, const TensorBoardAttempt& attempt,
                                               const Clock* clock);
  // The same over a writer already made (tests: one on /dev/full); nullptr: off.
  TensorBoardRun(std::unique_ptr<tensorboard::EventFileWriter> writer, const TensorBoardAttempt& attempt,
                 const Clock* clock);

  // A rank event: a step's and an evaluation's values are written; `finished` ends the run
  // (End(step, "finished")); the rest are none of TensorBoard's.
  void Observe(const rank::Event& event) EXCLUDES(mu_);
  // The attempt ended cleanly after `step` (how: "finished", "stopped on request"); nothing is
  // written after it.
  void End(int64_t step, std::string_view how) EXCLUDES(mu_);

  // Whether events are still written (false when off, after a write failed, and after End).
  bool enabled() const EXCLUDES(mu_);
  // The event file ("" when none was made).
  const std::string& path() const { return path_; }

 private:
  void WriteStart() REQUIRES(mu_);
  void Write(const std::string& event) REQUIRES(mu_);
  double WallTime() const;

  const TensorBoardAttempt attempt_;
  const Clock* clock_;
  const std::string path_;
  mutable Mutex mu_;
  std::unique_ptr<tensorboard::EventFileWriter> writer_ GUARDED_BY(mu_);  // null: off (or ended)
};

}  // namespace eft::trainer
