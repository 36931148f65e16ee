#include "controller/tracking/mlflow_tracker.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "common/logging.h"

namespace eft::controller::mlflow {
namespace {

bool IsHook(Work::Kind kind) {
  return kind == Work::Kind::kSaveRun || kind == Work::Kind::kBackfill || kind == Work::Kind::kSaveEnded;
}

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

std::string SecondsWords(Duration d) { return SecondsText(std::chrono::duration_cast<std::chrono::milliseconds>(d)); }

}  // namespace

MlflowTrackerOptions MlflowTrackerOptions::FromConfig(const ControllerConfig& c) {
  MlflowTrackerOptions o;
  o.timeout = c.mlflow_timeout;
  o.flush_interval = c.mlflow_flush_interval;
  o.retry_max = std::max(c.mlflow_retry_max, o.retry_initial);
  o.unreachable_event_after = c.mlflow_unreachable_event_after;
  o.max_pending_points = static_cast<size_t>(std::max(100, c.mlflow_max_pending_points));
  return o;
}

MlflowTracker::MlflowTracker(MlflowTrackerOptions options, Clock* clock, Hooks hooks)
    : options_(options), clock_(clock), hooks_(std::move(hooks)) {}

MlflowTracker::~MlflowTracker() {
  Stop();
  for (const std::string& name : families_) (void)registry_->Unregister(name);
}

void MlflowTracker::OnJob(const TrackedJob& job, const MlflowRunRecord* stored) {
  MutexLock lock(&mu_);
  auto it = jobs_.find(job.id);
  if (it == jobs_.end()) {
    if (stored == nullptr || stored->ended) return;  // its run ended, or failed
    // A row with a run id, or one handed over on load, may already have points on the server.
    const bool resumed = !stored->run_id.empty() || job.state != v1::JOB_STATE_QUEUED || !job.attempts.empty();
    Job& j = jobs_[job.id];
    j.pipeline = std::make_unique<RunPipeline>(job, *stored, resumed, options_.max_pending_points);
    wake_.NotifyAll();
    return;
  }
  it->second.pipeline->Update(job);
  // A run's end need not wait for the next flush.
  if (!RunStatusFor(job.state).empty()) wake_.NotifyAll();
}

void MlflowTracker::OnPoints(const std::string& job_id, const std::vector<TrackedPoint>& points) {
  MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  RunPipeline& p = *it->second.pipeline;
  const uint64_t dropped = p.dropped_points();
  p.Add(points, clock_->Now());
  dropped_points_ += p.dropped_points() - dropped;
}

void MlflowTracker::Start() {
  thread_ = std::thread([this] {
    while (true) {
      {
        MutexLock lock(&mu_);
        if (stopping_) return;
      }
      {
        MutexLock run(&run_mu_);
        RunPass(false);
      }
      MutexLock lock(&mu_);
      wake_.WaitFor(&mu_, options_.flush_interval, [&]() REQUIRES(mu_) { return stopping_; });
    }
  });
}

void MlflowTracker::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    wake_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
  MutexLock run(&run_mu_);
  RunPass(true);
}

void MlflowTracker::RunOnce() {
  MutexLock run(&run_mu_);
  RunPass(false);
}

Result<MlflowClient*> MlflowTracker::Client(const std::string& uri) {
  auto it = clients_.find(uri);
  if (it != clients_.end()) return it->second.get();
  EFT_ASSIGN_OR_RETURN(auto client, MlflowClient::Create(uri, ClientOptionsFromEnvironment(options_.timeout)));
  return (clients_[uri] = std::move(client)).get();
}

Outcome MlflowTracker::Perform(const Work& w) {
  Outcome out;
  if (IsHook(w.kind)) {
    if (w.kind == Work::Kind::kBackfill) {
      auto curves = hooks_.stored_curves(w.job_id);
      if (curves.ok()) out.curves = std::move(curves).value();
      out.status = curves.status();
    } else {
      out.status = hooks_.save_run(w.row);
    }
    return out;
  }
  auto client = Client(w.uri);
  if (!client.ok()) {
    out.status = client.status();
    return out;
  }
  MlflowClient& c = **client;
  switch (w.kind) {
    case Work::Kind::kExperiment: {
      auto cached = experiments_.find({w.uri, w.experiment});
      if (cached != experiments_.end()) {
        out.id = cached->second;
        break;
      }
      auto id = c.ExperimentId(w.experiment);
      out.status = id.status();
      if (id.ok()) out.id = experiments_[{w.uri, w.experiment}] = *id;
      break;
    }
    case Work::Kind::kFindOrCreateRun: {
      // A run made just before a crash, whose id was not stored, is found by its key.
      auto found = c.FindRunByTag(w.experiment_id, "eft.run_key", w.row.run_key);
      if (!found.ok() || !found->empty()) {
        out.status = found.status();
        if (found.ok()) out.id = *found;
        out.existed = true;
        break;
      }
      auto made = c.CreateRun(w.experiment_id, w.run_name, w.start_ms, w.create_tags);
      out.status = made.status();
      if (made.ok()) out.id = *made;
      break;
    }
    case Work::Kind::kGetRun: {
      auto run = c.GetRun(w.run_id);
      out.status = run.status();
      if (run.ok()) out.run = std::move(run).value();
      break;
    }
    case Work::Kind::kLogBatch:
      out.status = c.LogBatch(w.run_id, w.metrics, w.params, w.tags);
      break;
    case Work::Kind::kEndRun:
      out.status = c.EndRun(w.run_id, w.status, w.end_ms);
      break;
    default:
      break;
  }
  return out;
}

void MlflowTracker::NoteCall(const std::string& uri, const Status& status, SteadyTime now, std::vector<Event>* events) {
  Server& s = servers_[uri];
  if (!status.ok()) ++send_failures_;
  if (IsRetryable(status)) {
    ++s.failures;
    s.retry_at = now + RetryDelay(s.failures, options_.retry_initial, options_.retry_max);
    s.last_error = status.message();
    if (!s.down_since) {
      s.down_since = now;
      EFT_LOG(WARNING) << "MLflow server " << uri << " failed (" << status.message()
                       << "); its points wait and it is retried, every " << SecondsText(options_.retry_max)
                       << " at most";
    }
    return;
  }
  if (!s.down_since) return;
  const Duration outage = now - *s.down_since;
  EFT_LOG(INFO) << "MLflow server " << uri << " answers again after " << SecondsWords(outage);
  s = Server{};
  for (auto& [id, job] : jobs_) {
    if (!job.warned || job.pipeline->uri() != uri) continue;
    job.warned = false;
    events->push_back({id, "mlflow_recovered",
                       "MLflow server " + uri + " answers again after " + SecondsWords(outage) + ": the " +
                           std::to_string(job.pipeline->pending_points()) + " points that waited are being sent"});
  }
}

void MlflowTracker::NoteOutages(SteadyTime now, std::vector<Event>* events) {
  for (auto& [id, job] : jobs_) {
    RunPipeline& p = *job.pipeline;
    auto s = servers_.find(p.uri());
    if (s == servers_.end() || !s->second.down_since || job.warned || !p.has_work()) continue;
    const Duration down = now - *s->second.down_since;
    if (down < options_.unreachable_event_after) continue;
    if (job.last_warning && now - *job.last_warning < options_.event_interval) continue;
    job.warned = true;
    job.last_warning = now;
    const auto oldest = p.oldest_pending();
    events->push_back(
        {id, "mlflow_unreachable",
         "MLflow server " + p.uri() + " failing for " + SecondsWords(down) + " (" + s->second.last_error + "): " +
             std::to_string(p.pending_points()) + " points of this job wait" +
             (oldest ? " (the oldest for " + SecondsWords(now - *oldest) + ")" : std::string()) +
             ", retried every " + SecondsText(options_.retry_max) + " at most; training goes on"});
  }
}

void MlflowTracker::Emit(const std::vector<Event>& events) {
  for (const Event& e : events) {
    Status s = hooks_.add_event ? hooks_.add_event(e.job_id, e.type, e.message) : Status::Ok();
    if (!s.ok()) EFT_LOG(WARNING) << "job " << e.job_id << ": could not record the " << e.type << " event: " << s;
  }
}

void MlflowTracker::RunPass(bool only_healthy) {
  std::vector<std::string> ids;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, job] : jobs_) {
      if (job.pipeline->has_work()) ids.push_back(id);
    }
  }
  for (const std::string& id : ids) {
    for (int call = 0; call < options_.max_calls_per_job_per_pass; ++call) {
      Work work;
      {
        MutexLock lock(&mu_);
        auto it = jobs_.find(id);
        if (it == jobs_.end()) break;
        RunPipeline& p = *it->second.pipeline;
        const Server& s = servers_[p.uri()];
        if (clock_->Now() < s.retry_at || (only_healthy && s.failures > 0)) break;
        work = p.Next(clock_->Now(), clock_->WallMillis());
      }
      if (work.kind == Work::Kind::kNone) break;
      const Outcome outcome = Perform(work);
      std::vector<Event> events;
      bool stop = false;
      {
        MutexLock lock(&mu_);
        const SteadyTime now = clock_->Now();
        Job& job = jobs_.at(id);  // only this thread erases jobs
        RunPipeline& p = *job.pipeline;
        const uint64_t sent = p.sent_points(), dropped = p.dropped_points();
        if (!IsHook(work.kind)) NoteCall(p.uri(), outcome.status, now, &events);
        const Work::Kind kind = work.kind;
        p.Finish(std::move(work), outcome, now, clock_->WallMillis());
        sent_points_ += p.sent_points() - sent;
        dropped_points_ += p.dropped_points() - dropped;
        if (kind == Work::Kind::kLogBatch && !outcome.status.ok() && !IsRetryable(outcome.status)) {
          if (job.rejections++ % 100 == 0) {  // a run deleted by hand refuses every batch
            EFT_LOG(WARNING) << "job " << id << ": MLflow refused a batch (" << p.dropped_points() - dropped
                             << " points dropped; " << job.rejections << " refused so far): " << outcome.status.message();
          }
          if (!job.rejection_reported) {
            job.rejection_reported = true;
            events.push_back({id, "mlflow_rejected",
                              "MLflow refused a batch of this job's run (its " +
                                  std::to_string(p.dropped_points() - dropped) +
                                  " points are not logged): " + outcome.status.message()});
          }
        }
        if (kind == Work::Kind::kFindOrCreateRun && outcome.status.ok()) {
          EFT_LOG(INFO) << "job " << id << ": MLflow run " << p.run_id() << " on " << p.uri()
                        << (outcome.existed ? " (found by its eft.run_key)" : "");
        }
        stop = !outcome.status.ok();
        if (p.done()) {
          if (p.failed()) {
            EFT_LOG(WARNING) << "job " << id << ": MLflow run not logged: " << p.failure();
            events.push_back({id, "mlflow_failed", "MLflow run not logged: " + p.failure()});
          }
          jobs_.erase(id);
          stop = true;
        }
      }
      Emit(events);
      if (stop) break;
    }
  }
  std::vector<Event> events;
  {
    MutexLock lock(&mu_);
    NoteOutages(clock_->Now(), &events);
  }
  Emit(events);
}

MlflowTracker::Stats MlflowTracker::stats() const {
  MutexLock lock(&mu_);
  Stats s;
  const SteadyTime now = clock_->Now();
  for (const auto& [id, job] : jobs_) {
    s.pending_points += job.pipeline->pending_points();
    if (auto oldest = job.pipeline->oldest_pending()) s.delay_seconds = std::max(s.delay_seconds, Seconds(now - *oldest));
  }
  s.open_runs = jobs_.size();
  s.sent_points = sent_points_;
  s.dropped_points = dropped_points_;
  s.send_failures = send_failures_;
  return s;
}

Status MlflowTracker::RegisterMetrics(MetricsRegistry* registry) {
  registry_ = registry;
  using Field = std::function<double(const Stats&)>;
  const std::vector<std::tuple<MetricType, std::string, std::string, Field>> families = {
      {MetricType::kGauge, "eft_mlflow_pending_points", "Metric points waiting to be sent to MLflow servers.",
       [](const Stats& s) { return static_cast<double>(s.pending_points); }},
      {MetricType::kGauge, "eft_mlflow_delay_seconds",
       "Age of the oldest metric point not sent to its MLflow server yet (0: none waits).",
       [](const Stats& s) { return s.delay_seconds; }},
      {MetricType::kGauge, "eft_mlflow_open_runs", "Jobs whose MLflow run is not ended yet.",
       [](const Stats& s) { return static_cast<double>(s.open_runs); }},
      {MetricType::kCounter, "eft_mlflow_points_sent_total", "Metric points MLflow servers took.",
       [](const Stats& s) { return static_cast<double>(s.sent_points); }},
      {MetricType::kCounter, "eft_mlflow_points_dropped_total",
       "Metric points not logged: thinned out of a job's full queue, or refused by the server.",
       [](const Stats& s) { return static_cast<double>(s.dropped_points); }},
      {MetricType::kCounter, "eft_mlflow_send_failures_total",
       "Calls to MLflow servers that failed (unreachable, timed out, refused).",
       [](const Stats& s) { return static_cast<double>(s.send_failures); }},
  };
  for (const auto& [type, name, help, field] : families) {
    EFT_RETURN_IF_ERROR(registry->AddCallback(type, name, help, {}, [this, field = field]() {
      return std::vector<CallbackSample>{{{}, field(stats())}};
    }));
    families_.push_back(name);
  }
  return Status::Ok();
}

}  // namespace eft::controller::mlflow
