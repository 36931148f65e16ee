#include "controller/controller_metrics.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include <google/protobuf/util/time_util.h>

namespace eft::controller {

namespace {

using Samples = std::vector<CallbackSample>;
using Job = ControllerSnapshot::Job;

// The snapshot Scrape() took for the Serialize() running on this thread, and whose it is: callbacks
// run on the serializing thread (common/metrics.h), so concurrent scrapes each see their own.
struct ScrapeSnapshot {
  const ControllerMetrics* owner = nullptr;
  const ControllerSnapshot* snapshot = nullptr;
};
thread_local ScrapeSnapshot t_scrape;

constexpr v1::JobState kJobStates[] = {v1::JOB_STATE_QUEUED,    v1::JOB_STATE_STARTING, v1::JOB_STATE_RUNNING,
                                       v1::JOB_STATE_RECOVERING, v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED,
                                       v1::JOB_STATE_CANCELLED};

// Training series exist once the job reported a step (progress is kept in memory only, so after a
// controller restart they return with the next step event).
std::optional<double> IfTraining(const Job& j, double v, bool known = true) {
  return j.progress.step() > 0 && known ? std::optional<double>(v) : std::nullopt;
}

std::optional<double> IfCheckpointed(const Job& j, double v) {
  return j.checkpoints > 0 ? std::optional<double>(v) : std::nullopt;
}

Samples JobsByState(const ControllerSnapshot& s) {
  Samples out;
  for (v1::JobState st : kJobStates) {
    auto it = s.jobs_by_state.find(st);
    out.push_back({{JobStateLabel(st)}, it == s.jobs_by_state.end() ? 0.0 : static_cast<double>(it->second)});
  }
  return out;
}

Samples NodesByState(const ControllerSnapshot& s) {
  double ready = 0, lost = 0;
  for (const auto& n : s.nodes) (n.ready ? ready : lost) += 1;
  return {{{"READY"}, ready}, {{"LOST"}, lost}};
}

Samples NodesDrained(const ControllerSnapshot& s) {
  auto drained = std::count_if(s.nodes.begin(), s.nodes.end(), [](const auto& n) { return n.drained; });
  return {{{}, static_cast<double>(drained)}};
}

Samples NodeHeartbeatAge(const ControllerSnapshot& s) {
  Samples out;
  for (const auto& n : s.nodes) out.push_back({{n.name}, n.heartbeat_age_seconds});
  return out;
}

Samples NodeSlots(const ControllerSnapshot& s) {
  Samples out;
  for (const auto& n : s.nodes) out.push_back({{n.name}, static_cast<double>(n.slots)});
  return out;
}

Samples JobInfo(const ControllerSnapshot& s) {
  Samples out;
  for (const Job& j : s.jobs) out.push_back({{j.id, j.name, JobStateLabel(j.state)}, 1.0});
  return out;
}

double Seconds(const google::protobuf::Timestamp& t) {
  return static_cast<double>(google::protobuf::util::TimeUtil::TimestampToMilliseconds(t)) / 1000.0;
}

// One sample per eval set (data.eval's names); an eval loss reported before named sets, "eval".
Samples JobEvalLosses(const ControllerSnapshot& s) {
  Samples out;
  for (const Job& j : s.jobs) {
    for (const v1::EvalLoss& e : j.progress.evals()) out.push_back({{j.id, e.set()}, e.loss()});
    if (j.progress.evals_size() == 0 && j.progress.has_eval_loss()) out.push_back({{j.id, "eval"}, j.progress.eval_loss()});
  }
  return out;
}

}  // namespace

std::string CheckpointKindLabel(const std::string& kind) {
  return kind == "sharded" || kind == "full" ? kind : "other";
}

std::string JobStateLabel(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  constexpr std::string_view kPrefix = "JOB_STATE_";
  return name.rfind(kPrefix, 0) == 0 ? name.substr(kPrefix.size()) : name;
}

Result<std::unique_ptr<ControllerMetrics>> ControllerMetrics::Create(MetricsRegistry* registry, Controller* controller,
                                                                     ControllerMetricsOptions options) {
  std::unique_ptr<ControllerMetrics> m(new ControllerMetrics(registry, controller, options));
  // On failure the destructor unregisters whatever was registered so far.
  EFT_RETURN_IF_ERROR(m->RegisterAll());
  controller->SetCheckpointObserver([raw = m.get()](const CheckpointReport& r) { raw->OnCheckpoint(r); });
  return m;
}

ControllerMetrics::~ControllerMetrics() {
  controller_->SetCheckpointObserver(nullptr);
  for (const std::string& name : registered_) (void)registry_->Unregister(name);
}

Status ControllerMetrics::Add(MetricType type, const std::string& name, const std::string& help,
                              const std::vector<std::string>& labels, SnapshotFn fn) {
  EFT_RETURN_IF_ERROR(registry_->AddCallback(type, name, help, labels, [this, fn = std::move(fn)] {
    if (t_scrape.owner == this) return fn(*t_scrape.snapshot);
    return fn(controller_->Snapshot(options_.terminal_jobs_kept));
  }));
  registered_.push_back(name);
  return Status::Ok();
}

Status ControllerMetrics::AddPerJob(MetricType type, const std::string& name, const std::string& help, JobFn value) {
  return Add(type, name, help, {"job"}, [value = std::move(value)](const ControllerSnapshot& s) {
    Samples out;
    out.reserve(s.jobs.size());
    for (const Job& j : s.jobs) {
      if (auto v = value(j)) out.push_back({{j.id}, *v});
    }
    return out;
  });
}

std::string ControllerMetrics::Scrape() {
  const ControllerSnapshot snapshot = controller_->Snapshot(options_.terminal_jobs_kept);
  struct Scope {
    Scope(const ControllerMetrics* owner, const ControllerSnapshot* s) { t_scrape = {owner, s}; }
    ~Scope() { t_scrape = {}; }
  } scope(this, &snapshot);
  return registry_->Serialize();
}

Status ControllerMetrics::RegisterAll() {
  constexpr MetricType kGauge = MetricType::kGauge;
  constexpr MetricType kCounter = MetricType::kCounter;
  auto always = [](auto field) { return [field](const Job& j) -> std::optional<double> { return field(j); }; };

  EFT_RETURN_IF_ERROR(Add(kGauge, "eft_jobs", "Jobs by state (every job the controller knows).", {"state"}, JobsByState));
  EFT_RETURN_IF_ERROR(Add(kGauge, "eft_nodes", "Nodes by state: READY (heartbeating) or LOST.", {"state"}, NodesByState));
  EFT_RETURN_IF_ERROR(
      Add(kGauge, "eft_nodes_drained", "Nodes drained by an operator (they take no new ranks).", {}, NodesDrained));
  EFT_RETURN_IF_ERROR(Add(kGauge, "eft_node_heartbeat_age_seconds",
                          "Seconds since the node's worker last registered or heartbeated.", {"node"}, NodeHeartbeatAge));
  EFT_RETURN_IF_ERROR(Add(kGauge, "eft_node_slots", "Rank slots (GPUs) the node's worker offers.", {"node"}, NodeSlots));
  EFT_RETURN_IF_ERROR(Add(kGauge, "eft_job_info", "Always 1: the job's name and current state as labels.",
                          {"job", "name", "state"}, JobInfo));

  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_world_size", "Ranks of the job's running attempt; 0 when none runs.",
                                always([](const Job& j) { return double(j.world_size); })));
  EFT_RETURN_IF_ERROR(AddPerJob(kCounter, "eft_job_attempts_total", "Attempts started for the job.",
                                always([](const Job& j) { return double(j.attempt); })));
  // attempt - 1 rather than the job's restart count: that one is refunded when a failure turns out
  // to be a node loss, and a counter must never go down.
  EFT_RETURN_IF_ERROR(AddPerJob(kCounter, "eft_job_restarts_total",
                                "Attempts started after the first, whatever the cause (node loss, rank failure).",
                                always([](const Job& j) { return double(std::max(0, j.attempt - 1)); })));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_counted_restarts",
                                "Rank failures counted against fault_tolerance.max_restarts (lowered again when a "
                                "failure turns out to be a node loss).",
                                always([](const Job& j) { return double(j.restarts); })));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_max_restarts", "The job's fault_tolerance.max_restarts.",
                                always([](const Job& j) { return double(j.max_restarts); })));

  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_step", "Optimizer step of the job's newest step event.",
                                [](const Job& j) { return IfTraining(j, double(j.progress.step())); }));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_total_steps", "Steps the job runs in all, as its trainer reports it.",
                                [](const Job& j) {
                                  return IfTraining(j, double(j.progress.total_steps()), j.progress.total_steps() > 0);
                                }));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_loss", "Training loss of the job's newest step event.",
                                [](const Job& j) { return IfTraining(j, j.progress.loss()); }));
  EFT_RETURN_IF_ERROR(Add(kGauge, "eft_job_eval_loss",
                          "Eval loss of the job's newest eval event of each eval set (token-weighted mean over the set).",
                          {"job", "eval_set"}, JobEvalLosses));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_learning_rate", "Learning rate of the job's newest step event.",
                                [](const Job& j) { return IfTraining(j, j.progress.lr()); }));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_grad_norm",
                                "Gradient norm (before clipping) of the job's newest step event.",
                                [](const Job& j) { return IfTraining(j, j.progress.grad_norm()); }));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_tokens_per_second",
                                "Training throughput of the job's newest step, all ranks together.",
                                [](const Job& j) { return IfTraining(j, j.progress.tokens_per_s()); }));
  // The trainer reports MFU only when it knows the GPUs' peak FLOPS; 0 would read as "idle".
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_mfu",
                                "Model FLOPs utilisation (0..1) of the job's newest step; absent when unknown.",
                                [](const Job& j) { return IfTraining(j, j.progress.mfu(), j.progress.mfu() > 0); }));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_last_step_timestamp_seconds",
                                "Unix time of the job's newest step event (a stalled job stops advancing it).",
                                [](const Job& j) {
                                  return IfTraining(j, Seconds(j.progress.time()), j.progress.has_time());
                                }));

  // Both reasons for every job, so a dashboard query for one job returns data (0) before any resize.
  EFT_RETURN_IF_ERROR(Add(kCounter, "eft_job_resizes_total",
                          "Planned resizes of the job by reason: grow (capacity came back), evict (drain --evict), "
                          "shrink (gave nodes to a job of higher priority).",
                          {"job", "reason"}, [](const ControllerSnapshot& s) {
                            Samples out;
                            for (const Job& j : s.jobs) {
                              for (ResizeReason r : kResizeReasons) {
                                out.push_back({{j.id, ResizeReasonLabel(r)},
                                               static_cast<double>(j.resizes[static_cast<size_t>(r)])});
                              }
                            }
                            return out;
                          }));
  EFT_RETURN_IF_ERROR(AddPerJob(kCounter, "eft_job_preemptions_total",
                                "Times the whole job was stopped with a checkpoint and queued again for a job of "
                                "higher priority.",
                                always([](const Job& j) { return double(j.preemptions); })));
  EFT_RETURN_IF_ERROR(AddPerJob(kCounter, "eft_job_checkpoint_failures_total",
                                "Checkpoint saves of the job that failed and were not committed (a full disk, a "
                                "write error); each is also a checkpoint_failed job event.",
                                always([](const Job& j) { return double(j.checkpoint_failures); })));
  EFT_RETURN_IF_ERROR(AddPerJob(kCounter, "eft_job_checkpoints_total", "Checkpoints the job's ranks reported.",
                                always([](const Job& j) { return double(j.checkpoints); })));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_checkpoint_bytes", "Size of the job's newest checkpoint.",
                                [](const Job& j) { return IfCheckpointed(j, double(j.last_checkpoint_bytes)); }));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_last_checkpoint_step", "Step of the job's newest checkpoint.",
                                [](const Job& j) { return IfCheckpointed(j, double(j.last_checkpoint_step)); }));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_last_checkpoint_timestamp_seconds",
                                "Unix time the job's newest checkpoint was reported.",
                                [](const Job& j) { return IfCheckpointed(j, double(j.last_checkpoint_ms) / 1000.0); }));

  // Memory snapshots (docs/checkpoints.md, "Memory snapshots"), from the workers' heartbeats.
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_memory_snapshot_step",
                                "Newest step of the job's running attempt whose memory snapshot the nodes hold whole "
                                "(every rank); absent when none.",
                                [](const Job& j) -> std::optional<double> {
                                  if (j.memory_snapshot_step < 0) return std::nullopt;
                                  return double(j.memory_snapshot_step);
                                }));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_memory_snapshot_replication_lag_steps",
                                "Steps between the newest memory snapshot held whole and the newest held with all its "
                                "replicas (checkpoint.memory_replicas); absent when none is replicated yet.",
                                [](const Job& j) -> std::optional<double> {
                                  if (j.memory_snapshot_step < 0 || j.memory_replicated_step < 0) return std::nullopt;
                                  return double(j.memory_snapshot_step - j.memory_replicated_step);
                                }));
  EFT_RETURN_IF_ERROR(AddPerJob(kGauge, "eft_job_memory_snapshot_bytes",
                                "Bytes of the running attempt's memory snapshots the nodes hold, all copies.",
                                always([](const Job& j) { return double(j.memory_snapshot_bytes); })));
  EFT_RETURN_IF_ERROR(AddPerJob(kCounter, "eft_job_steps_lost_total",
                                "Steps trained again because a restart resumed from an earlier step than the one "
                                "the previous attempt reached (since the controller started).",
                                always([](const Job& j) { return double(j.steps_lost_total); })));
  EFT_RETURN_IF_ERROR(Add(kCounter, "eft_job_recoveries_total",
                          "Restarts after an unplanned end (a node lost, a rank failed) by where they resumed: "
                          "memory (a memory snapshot), disk (a checkpoint), scratch (nothing to resume from); "
                          "since the controller started.",
                          {"job", "source"}, [](const ControllerSnapshot& s) {
                            Samples out;
                            for (const Job& j : s.jobs) {
                              for (RecoverySource r : {RecoverySource::kMemory, RecoverySource::kDisk,
                                                       RecoverySource::kScratch}) {
                                out.push_back({{j.id, RecoverySourceLabel(r)},
                                               static_cast<double>(j.recoveries[static_cast<size_t>(r)])});
                              }
                            }
                            return out;
                          }));

  // Save times are not stored by the controller: they are relayed from checkpoint events (OnCheckpoint).
  EFT_RETURN_IF_ERROR(Add(kGauge, "eft_job_checkpoint_save_seconds",
                          "Seconds the job's newest checkpoint took to write, as its rank reported (since the "
                          "controller started).",
                          {"job"}, [this](const ControllerSnapshot& s) { return LastSaveSeconds(s); }));
  EFT_ASSIGN_OR_RETURN(save_seconds_, registry_->AddHistogram("eft_checkpoint_save_seconds",
                                                              "Seconds checkpoints took to write, by kind.", {"kind"},
                                                              ExponentialBuckets(0.05, 2, 14)));
  registered_.push_back("eft_checkpoint_save_seconds");
  EFT_ASSIGN_OR_RETURN(stall_seconds_,
                       registry_->AddHistogram("eft_checkpoint_stall_seconds",
                                               "Seconds the training loop waited for a checkpoint, by kind.", {"kind"},
                                               ExponentialBuckets(0.01, 2, 14)));
  registered_.push_back("eft_checkpoint_stall_seconds");
  return Status::Ok();
}

void ControllerMetrics::OnCheckpoint(const CheckpointReport& r) {
  // Runs under the controller's lock, so it takes only locks that are never held while waiting for
  // the controller's: the histogram families' and our map's.
  const std::string kind = CheckpointKindLabel(r.kind);
  if (r.seconds >= 0) {
    save_seconds_->WithLabels({kind})->Observe(r.seconds);
    MutexLock lock(&mu_);
    last_save_seconds_[r.job_id] = r.seconds;
  }
  if (r.stall_seconds >= 0) stall_seconds_->WithLabels({kind})->Observe(r.stall_seconds);
}

Samples ControllerMetrics::LastSaveSeconds(const ControllerSnapshot& snapshot) {
  std::set<std::string> shown;
  for (const Job& j : snapshot.jobs) shown.insert(j.id);
  Samples out;
  MutexLock lock(&mu_);
  // Jobs that left the snapshot (old terminal ones) never come back: forget them, keeping the map
  // as bounded as the series. (A job submitted and checkpointed after the snapshot was taken would
  // lose its value until its next checkpoint: not worth a lock across the scrape.)
  std::erase_if(last_save_seconds_, [&](const auto& entry) { return !shown.count(entry.first); });
  for (const auto& [id, seconds] : last_save_seconds_) out.push_back({{id}, seconds});
  return out;
}

}  // namespace eft::controller
