#include "controller/tracking/job_tracking.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

namespace eft::controller {

std::string MlflowUriOf(const v1::JobSpec& spec) {
  const std::string& uri = spec.tracking().mlflow_tracking_uri();
  return uri == "off" ? "" : uri;
}

bool FillTrackingDefaults(const ControllerConfig& config, const std::string& job_id, v1::JobSpec* spec) {
  v1::TrackingSpec* t = spec->mutable_tracking();
  bool changed = false;
  if (t->tensorboard().empty() && !config.tensorboard_dir.empty()) {
    std::string dir = config.tensorboard_dir;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    t->set_tensorboard((dir == "/" ? "" : dir) + "/" + job_id);
    changed = true;
  }
  if (t->mlflow_tracking_uri().empty()) {
    t->set_mlflow_tracking_uri(config.mlflow_tracking_uri.empty() ? "off" : config.mlflow_tracking_uri);
    changed = true;
  }
  if (t->mlflow_tracking_uri() != "off" && t->mlflow_experiment().empty()) {
    t->set_mlflow_experiment(config.mlflow_experiment);
    changed = true;
  }
  return changed;
}

std::string NewMlflowRunKey() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char key[33];
  std::snprintf(key, sizeof key, "%016llx%016llx", static_cast<unsigned long long>(random()),
                static_cast<unsigned long long>(random()));
  return key;
}

TrackedJob TrackedJobOf(const JobEntry& j) {
  TrackedJob t;
  t.id = j.rec.id;
  t.spec = j.rec.spec;
  t.owner = j.rec.owner;
  t.state = j.rec.state;
  t.reason = j.rec.reason;
  t.create_ms = j.rec.create_ms;
  t.end_ms = j.rec.end_ms;
  t.restarts = j.rec.restarts;
  for (const AttemptRecord& a : j.attempts) {
    TrackedAttempt& v = t.attempts.emplace_back();
    v.number = a.number;
    v.world_size = a.world_size;
    v.resume_step = a.resume_step;
    // The running attempt's reached step advances in memory before it is stored.
    v.reached_step = &a == &j.attempts.back() ? std::max(a.reached_step, j.reached_step) : a.reached_step;
    v.ended = a.end_ms != 0;
    v.end = a.end;
    v.end_reason = a.end_reason;
  }
  return t;
}

std::vector<TrackedPoint> StepPoints(const v1::TrainingProgress& p, int64_t time_ms) {
  std::vector<TrackedPoint> out;
  auto add = [&](const char* key, double value) {
    if (std::isfinite(value)) out.push_back({key, p.step(), value, time_ms});
  };
  add(kTrainLossKey, p.loss());
  add("train/learning_rate", p.lr());
  add("train/grad_norm", p.grad_norm());
  add("train/tokens_per_second", p.tokens_per_s());
  if (p.mfu() > 0) add("train/mfu", p.mfu());
  return out;
}

std::string EvalLossKey(const std::string& set) {
  // MLflow refuses names that a path normalization would change ("eval/../loss"); set names are
  // [A-Za-z0-9_.-]{1,64}, so only a name of dots alone needs another spelling.
  const bool dots = set.find_first_not_of('.') == std::string::npos;
  return "eval/" + (dots ? "_" + set : set) + "/loss";
}

}  // namespace eft::controller
