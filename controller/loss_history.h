// LossSeries: one of a job's loss curves (train loss over steps, or eval loss), kept small however
// long the job runs: at most `cap` points (kLossHistoryPoints by default). Each point is the mean of
// up to `stride` consecutive reports; when one more point would exceed the cap, neighbours are
// merged pairwise and the stride doubles, so a 100k-step job costs as many points as a 1k-step one
// and its curve keeps its shape (docs/architecture.md, "Loss history").
//
// A restarted attempt re-runs steps after the checkpoint it resumed from: a report at or before the
// newest point's step first drops the points it supersedes, so the curve shows the run that counts.
// Non-finite losses are not kept (the store and JSON cannot hold them; the job's progress shows them).
//
// It also tracks what changed since the store last saw it (dirty_from), so a save writes the few
// points that changed, or all of them after a merge. Pure: no clock, no store. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "controller/records.h"

namespace eft::controller {

inline constexpr size_t kLossHistoryPoints = 512;

class LossSeries {
 public:
  explicit LossSeries(size_t cap = kLossHistoryPoints);
  // A curve as the store saved it (its points in order); nothing is dirty.
  static LossSeries FromPoints(std::vector<LossPointRecord> points, size_t cap = kLossHistoryPoints);

  void Add(int64_t step, double value);
  const std::vector<LossPointRecord>& points() const { return points_; }
  int64_t stride() const { return stride_; }

  bool dirty() const { return dirty_; }
  // The first index whose point changed since MarkSaved (points().size() when only points were
  // removed from the end).
  size_t dirty_from() const { return dirty_from_; }
  void MarkSaved();

 private:
  void Touch(size_t index);

  size_t cap_;
  int64_t stride_ = 1;
  std::vector<LossPointRecord> points_;
  bool dirty_ = false;
  size_t dirty_from_ = 0;
};

}  // namespace eft::controller
