#include "controller/tracking/run_pipeline.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace eft::controller::mlflow {

bool IsRetryable(const Status& status) {
  return status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kDeadlineExceeded;
}

RunPipeline::RunPipeline(const TrackedJob& job, const MlflowRunRecord& stored, bool resumed, size_t max_points)
    : job_id_(job.id),
      uri_(MlflowUriOf(job.spec)),
      experiment_(job.spec.tracking().mlflow_experiment().empty() ? "eft" : job.spec.tracking().mlflow_experiment()),
      max_points_(max_points),
      resumed_(resumed),
      row_(stored),
      job_(job),
      params_(SpecParams(job.spec)) {
  row_.job_id = job.id;
  // A run this controller made before: continue it after asking what it has.
  continued_ = !row_.run_id.empty();
  phase_ = continued_ ? Phase::kGetRun : Phase::kExperiment;
}

void RunPipeline::Update(const TrackedJob& job) { job_ = job; }

uint32_t RunPipeline::KeyIndex(const std::string& key) {
  auto it = std::find(keys_.begin(), keys_.end(), key);
  if (it != keys_.end()) return static_cast<uint32_t>(it - keys_.begin());
  keys_.push_back(key);
  return static_cast<uint32_t>(keys_.size() - 1);
}

void RunPipeline::Push(const TrackedPoint& p, SteadyTime now, bool front) {
  const uint32_t key = KeyIndex(p.key);
  auto last = last_step_.find(key);
  if (last != last_step_.end() && p.step <= last->second) return;  // sent or queued already
  last_step_[key] = p.step;
  QueuedPoint q{key, p.step, p.value, p.time_ms, now, p.key.rfind("eval/", 0) == 0};
  front ? queue_.push_front(q) : queue_.push_back(q);
}

void RunPipeline::Add(const std::vector<TrackedPoint>& points, SteadyTime now) {
  if (done()) return;
  for (const TrackedPoint& p : points) Push(p, now, false);
  dropped_points_ += ThinQueue(&queue_, max_points_);
}

std::vector<KeyValue> RunPipeline::ChangedTags() const {
  std::vector<KeyValue> out;
  for (const auto& [key, value] : JobTags(job_)) {
    auto sent = sent_tags_.find(key);
    if (sent == sent_tags_.end() || sent->second != value) out.push_back({key, value});
  }
  return out;
}

bool RunPipeline::has_work() const {
  if (done()) return false;
  if (phase_ != Phase::kStream) return true;
  return !queue_.empty() || !params_.empty() || !ChangedTags().empty() || !RunStatusFor(job_.state).empty();
}

std::optional<SteadyTime> RunPipeline::oldest_pending() const {
  std::optional<SteadyTime> oldest = inflight_oldest_;
  for (const QueuedPoint& p : queue_) {
    if (!oldest || p.queued < *oldest) oldest = p.queued;
  }
  return oldest;
}

void RunPipeline::Fail(const std::string& why) {
  phase_ = Phase::kFailed;
  failure_ = why;
  dropped_points_ += queue_.size();
  queue_.clear();
}

Work RunPipeline::Next(SteadyTime now, int64_t wall_ms) {
  Work w;
  if (busy_ || done() || now < retry_at_) return w;
  w.job_id = job_id_;
  w.uri = uri_;
  w.run_id = row_.run_id;
  w.row = row_;
  switch (phase_) {
    case Phase::kExperiment:
      w.kind = Work::Kind::kExperiment;
      w.experiment = experiment_;
      break;
    case Phase::kRun:
      w.kind = Work::Kind::kFindOrCreateRun;
      w.experiment_id = row_.experiment_id;
      w.run_name = job_.spec.name() + "-" + job_id_;
      w.start_ms = job_.create_ms > 0 ? job_.create_ms : wall_ms;
      w.create_tags = {{"eft.job_id", job_id_}, {"eft.run_key", row_.run_key}};
      if (!job_.owner.empty()) w.create_tags.push_back({"mlflow.user", job_.owner});
      break;
    case Phase::kSaveRun:
      w.kind = Work::Kind::kSaveRun;
      break;
    case Phase::kGetRun:
      w.kind = Work::Kind::kGetRun;
      break;
    case Phase::kBackfill:
      w.kind = Work::Kind::kBackfill;
      break;
    case Phase::kStream: {
      std::vector<KeyValue> tags = ChangedTags();
      if (params_.empty() && tags.empty() && queue_.empty()) {
        if (RunStatusFor(job_.state).empty()) return w;  // waiting for more
        phase_ = Phase::kEnd;
        return Next(now, wall_ms);
      }
      const BatchSize b = PlanBatch(params_, tags, queue_.size(),
                                    [&](size_t i) { return MetricBytes(keys_[queue_[i].key]); });
      w.kind = Work::Kind::kLogBatch;
      w.params.assign(params_.begin(), params_.begin() + static_cast<std::ptrdiff_t>(b.params));
      params_.erase(params_.begin(), params_.begin() + static_cast<std::ptrdiff_t>(b.params));
      w.tags.assign(tags.begin(), tags.begin() + static_cast<std::ptrdiff_t>(b.tags));
      for (size_t i = 0; i < b.metrics; ++i) {
        const QueuedPoint& p = queue_.front();
        w.metrics.push_back({keys_[p.key], p.value, p.time_ms, p.step});
        w.points.push_back(p);
        if (!inflight_oldest_ || p.queued < *inflight_oldest_) inflight_oldest_ = p.queued;
        queue_.pop_front();
      }
      inflight_points_ = w.points.size();
      break;
    }
    case Phase::kEnd:
      w.kind = Work::Kind::kEndRun;
      w.status = RunStatusFor(job_.state);
      w.end_ms = job_.end_ms > 0 ? job_.end_ms : wall_ms;
      break;
    case Phase::kSaveEnded:
      w.kind = Work::Kind::kSaveEnded;
      w.row.ended = true;
      break;
    case Phase::kDone:
    case Phase::kFailed:
      return w;
  }
  busy_ = true;
  return w;
}

void RunPipeline::FinishStream(Work& w, const Outcome& outcome, SteadyTime now) {
  inflight_points_ = 0;
  inflight_oldest_.reset();
  if (IsRetryable(outcome.status)) {
    // Back as it was, in front of what came meanwhile.
    params_.insert(params_.begin(), w.params.begin(), w.params.end());
    for (auto p = w.points.rbegin(); p != w.points.rend(); ++p) queue_.push_front(*p);
    dropped_points_ += ThinQueue(&queue_, max_points_);
    return;
  }
  for (const KeyValue& t : w.tags) sent_tags_[t.key] = t.value;
  if (!outcome.status.ok()) {
    // Rejected as it is: sending it again would be rejected again.
    dropped_points_ += w.points.size();
    last_rejection_ = outcome.status.message();
    return;
  }
  sent_points_ += w.points.size();
  (void)now;
}

void RunPipeline::Backfill(const std::vector<TrackedPoint>& curves, SteadyTime now, int64_t wall_ms) {
  // Per key, the stored points above what the server has and below the first one queued since.
  std::map<std::string, int64_t> ceiling;
  for (const QueuedPoint& p : queue_) {
    auto [it, fresh] = ceiling.emplace(keys_[p.key], p.step);
    if (!fresh) it->second = std::min(it->second, p.step);
  }
  std::vector<TrackedPoint> fill;
  for (const TrackedPoint& p : curves) {
    auto floor = server_max_step_.find(p.key);
    if (floor != server_max_step_.end() && p.step <= floor->second) continue;
    auto top = ceiling.find(p.key);
    if (top != ceiling.end() && p.step >= top->second) continue;
    fill.push_back(p);
  }
  // In step order per key, ahead of the queue.
  std::stable_sort(fill.begin(), fill.end(),
                   [](const TrackedPoint& a, const TrackedPoint& b) { return a.key != b.key ? a.key < b.key : a.step < b.step; });
  std::deque<QueuedPoint> front;
  for (const TrackedPoint& p : fill) {
    const uint32_t key = KeyIndex(p.key);
    if (!front.empty() && front.back().key == key && front.back().step >= p.step) continue;
    front.push_back({key, p.step, p.value, p.time_ms > 0 ? p.time_ms : wall_ms, now, p.key.rfind("eval/", 0) == 0});
    last_step_[key] = std::max(last_step_.count(key) ? last_step_[key] : std::numeric_limits<int64_t>::min(), p.step);
  }
  queue_.insert(queue_.begin(), front.begin(), front.end());
  dropped_points_ += ThinQueue(&queue_, max_points_);
}

void RunPipeline::Finish(Work w, const Outcome& outcome, SteadyTime now, int64_t wall_ms) {
  busy_ = false;
  const bool controller_call =
      w.kind == Work::Kind::kSaveRun || w.kind == Work::Kind::kBackfill || w.kind == Work::Kind::kSaveEnded;
  if (w.kind == Work::Kind::kLogBatch) return FinishStream(w, outcome, now);
  if (!outcome.status.ok()) {
    if (controller_call) {
      retry_at_ = now + std::chrono::seconds(1);
    } else if (!IsRetryable(outcome.status)) {
      Fail(outcome.status.message());
    }
    return;
  }
  switch (w.kind) {
    case Work::Kind::kExperiment:
      row_.experiment_id = outcome.id;
      phase_ = Phase::kRun;
      break;
    case Work::Kind::kFindOrCreateRun:
      row_.run_id = outcome.id;
      continued_ = outcome.existed;
      phase_ = Phase::kSaveRun;
      break;
    case Work::Kind::kSaveRun:
      phase_ = continued_ ? Phase::kGetRun : resumed_ ? Phase::kBackfill : Phase::kStream;
      break;
    case Work::Kind::kGetRun: {
      server_max_step_ = outcome.run.max_step;
      std::erase_if(params_, [&](const KeyValue& p) { return outcome.run.params.count(p.key) > 0; });
      sent_tags_ = outcome.run.tags;
      std::erase_if(queue_, [&](const QueuedPoint& p) {
        auto top = server_max_step_.find(keys_[p.key]);
        return top != server_max_step_.end() && p.step <= top->second;
      });
      for (const auto& [key, step] : server_max_step_) {
        const uint32_t k = KeyIndex(key);
        last_step_[k] = std::max(last_step_.count(k) ? last_step_[k] : step, step);
      }
      phase_ = resumed_ ? Phase::kBackfill : Phase::kStream;
      break;
    }
    case Work::Kind::kBackfill:
      Backfill(outcome.curves, now, wall_ms);
      phase_ = Phase::kStream;
      break;
    case Work::Kind::kEndRun:
      phase_ = Phase::kSaveEnded;
      break;
    case Work::Kind::kSaveEnded:
      row_.ended = true;
      phase_ = Phase::kDone;
      break;
    default:
      break;
  }
}

}  // namespace eft::controller::mlflow
