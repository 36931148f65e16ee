#include "worker/worker_metrics.h"

#include <optional>

#include "common/rank_protocol.h"

namespace eft::worker {

namespace {

using Samples = std::vector<CallbackSample>;

constexpr v1::RankState kRankStates[] = {v1::RANK_STATE_RUNNING, v1::RANK_STATE_STOPPING, v1::RANK_STATE_EXITED,
                                         v1::RANK_STATE_FAILED_TO_START};

// Every class is exported from the start (at 0), so rate() and alerts see a series before the
// first exit of that kind.


}  // namespace

std::string RankStateLabel(v1::RankState state) {
  std::string name = v1::RankState_Name(state);
  constexpr std::string_view kPrefix = "RANK_STATE_";
  return name.rfind(kPrefix, 0) == 0 ? name.substr(kPrefix.size()) : name;
}

Result<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Create(MetricsRegistry* registry, WorkerMetricsSources sources) {
  if (!sources.stats) return Status::InvalidArgument("worker metrics: a stats source is required");
  std::unique_ptr<WorkerMetrics> m(new WorkerMetrics(registry, std::move(sources)));
  // On failure the destructor unregisters whatever was registered so far.
  EFT_RETURN_IF_ERROR(m->RegisterAll());
  return m;
}

WorkerMetrics::~WorkerMetrics() {
  for (const std::string& name : registered_) (void)registry_->Unregister(name);
}

Status WorkerMetrics::Add(MetricType type, const std::string& name, const std::string& help,
                          const std::vector<std::string>& labels, std::function<Samples()> fn) {
  EFT_RETURN_IF_ERROR(registry_->AddCallback(type, name, help, labels, std::move(fn)));
  registered_.push_back(name);
  return Status::Ok();
}

Status WorkerMetrics::AddStat(MetricType type, const std::string& name, const std::string& help,
                              std::function<double(const WorkerStats&)> value) {
  return Add(type, name, help, {}, [this, value = std::move(value)]() -> Samples {
    return {{{}, value(sources_.stats())}};
  });
}

Status WorkerMetrics::AddGpu(const std::string& name, const std::string& help,
                             std::function<std::optional<double>(const GpuReading&)> value) {
  return Add(MetricType::kGauge, name, help, {"gpu", "job"}, [this, value = std::move(value)] {
    Samples out;
    if (!sources_.gpus) return out;
    std::vector<GpuReading> readings = sources_.gpus();
    if (readings.empty()) return out;  // no GPUs, or nvidia-smi failed: skip the agent's lock too
    for (const GpuUse& use : JoinGpusToJobs(readings, sources_.gpu_ids, sources_.stats().slot_jobs)) {
      if (auto v = value(use.reading)) out.push_back({{use.gpu, use.job}, *v});
    }
    return out;
  });
}

Status WorkerMetrics::RegisterAll() {
  constexpr MetricType kGauge = MetricType::kGauge;
  constexpr MetricType kCounter = MetricType::kCounter;
  EFT_RETURN_IF_ERROR(Add(kGauge, "eft_worker_info", "Always 1: the node name this worker registers as.", {"node"},
                          [this]() -> Samples { return {{{sources_.node}, 1.0}}; }));
  EFT_RETURN_IF_ERROR(Add(kGauge, "eft_worker_slots", "Rank slots (GPUs) this worker offers.", {},
                          [this]() -> Samples { return {{{}, static_cast<double>(sources_.slots)}}; }));
  EFT_RETURN_IF_ERROR(Add(kGauge, "eft_worker_ranks", "Ranks this worker runs or still reports, by state.", {"state"},
                          [this] {
                            WorkerStats s = sources_.stats();
                            Samples out;
                            for (v1::RankState st : kRankStates) {
                              auto it = s.ranks_by_state.find(st);
                              out.push_back({{RankStateLabel(st)},
                                             it == s.ranks_by_state.end() ? 0.0 : static_cast<double>(it->second)});
                            }
                            return out;
                          }));
  EFT_RETURN_IF_ERROR(Add(kCounter, "eft_worker_rank_exits_total",
                          "Rank processes that ended, by class: success (0), bad_input (2), stopped (75), "
                          "port_busy (76), failed (other codes), signal.",
                          {"code_class"}, [this] {
                            WorkerStats s = sources_.stats();
                            Samples out;
                            for (rank::ExitClass exit_class : rank::kAllExitClasses) {
                              const char* c = rank::ExitClassName(exit_class);
                              auto it = s.rank_exits.find(c);
                              out.push_back({{c}, it == s.rank_exits.end() ? 0.0 : static_cast<double>(it->second)});
                            }
                            return out;
                          }));
  EFT_RETURN_IF_ERROR(AddStat(kCounter, "eft_worker_rank_starts_total", "Rank processes started.",
                              [](const WorkerStats& s) { return double(s.rank_starts); }));
  EFT_RETURN_IF_ERROR(AddStat(kCounter, "eft_worker_rank_restarts_total",
                              "Rank processes started for a job's second or later attempt.",
                              [](const WorkerStats& s) { return double(s.rank_restarts); }));
  EFT_RETURN_IF_ERROR(AddStat(kCounter, "eft_worker_rank_start_failures_total",
                              "Ranks that could not be started (fork/exec failed).",
                              [](const WorkerStats& s) { return double(s.rank_start_failures); }));
  EFT_RETURN_IF_ERROR(AddStat(kCounter, "eft_worker_registrations_total", "Successful registrations with the controller.",
                              [](const WorkerStats& s) { return double(s.registrations); }));
  EFT_RETURN_IF_ERROR(AddStat(kCounter, "eft_worker_heartbeats_total", "Successful heartbeats to the controller.",
                              [](const WorkerStats& s) { return double(s.heartbeats); }));
  EFT_RETURN_IF_ERROR(AddStat(kCounter, "eft_worker_heartbeat_failures_total",
                              "Register or heartbeat calls to the controller that failed.",
                              [](const WorkerStats& s) { return double(s.heartbeat_failures); }));
  EFT_RETURN_IF_ERROR(AddStat(kGauge, "eft_worker_controller_reachable",
                              "1 when the last call to the controller succeeded, else 0.",
                              [](const WorkerStats& s) { return s.controller_reachable ? 1.0 : 0.0; }));
  EFT_RETURN_IF_ERROR(AddStat(kGauge, "eft_worker_lease_expired",
                              "1 while the worker's lease has run out: no request to the controller was accepted "
                              "within its heartbeat timeout, so the worker killed its ranks and starts none.",
                              [](const WorkerStats& s) { return s.lease_expired ? 1.0 : 0.0; }));
  EFT_RETURN_IF_ERROR(AddStat(kCounter, "eft_worker_lease_expirations_total",
                              "Times the worker's lease ran out and it killed its ranks.",
                              [](const WorkerStats& s) { return double(s.lease_expirations); }));
  EFT_RETURN_IF_ERROR(AddStat(kGauge, "eft_worker_pending_events",
                              "Rank events waiting for the controller's acknowledgement.",
                              [](const WorkerStats& s) { return double(s.pending_events); }));
  EFT_RETURN_IF_ERROR(AddStat(kCounter, "eft_worker_log_shipped_bytes_total",
                              "Rank log bytes the controller confirmed receiving.",
                              [](const WorkerStats& s) { return double(s.log_bytes_shipped); }));
  EFT_RETURN_IF_ERROR(AddStat(kCounter, "eft_worker_log_push_failures_total", "PushLogs calls that failed.",
                              [](const WorkerStats& s) { return double(s.log_push_failures); }));
  EFT_RETURN_IF_ERROR(Add(kGauge, "eft_worker_snapshot_bytes",
                          "Memory snapshots this worker holds, by kind: own (its ranks') and replica (other "
                          "nodes', complete or being received).",
                          {"kind"}, [this]() -> Samples {
                            WorkerStats s = sources_.stats();
                            return {{{"own"}, double(s.snapshot_own_bytes)},
                                    {{"replica"}, double(s.snapshot_replica_bytes)}};
                          }));
  EFT_RETURN_IF_ERROR(AddStat(kGauge, "eft_worker_snapshot_budget_bytes",
                              "The most memory snapshots may hold on this worker (--snapshot-memory-mb); 0: off.",
                              [](const WorkerStats& s) { return double(s.snapshot_budget_bytes); }));
  EFT_RETURN_IF_ERROR(Add(kCounter, "eft_worker_snapshot_pushes_total",
                          "Memory snapshots pushed to peers, by result: ok, refused (the peer said why), failed.",
                          {"result"}, [this] {
                            WorkerStats s = sources_.stats();
                            Samples out;
                            for (const char* result : {"ok", "refused", "failed"}) {
                              auto it = s.snapshot_pushes.find(result);
                              out.push_back({{result}, it == s.snapshot_pushes.end() ? 0.0 : double(it->second)});
                            }
                            return out;
                          }));
  EFT_RETURN_IF_ERROR(AddStat(kGauge, "eft_worker_snapshot_push_seconds",
                              "Seconds the newest accepted push of a memory snapshot to a peer took.",
                              [](const WorkerStats& s) { return s.snapshot_push_seconds; }));
  EFT_RETURN_IF_ERROR(AddStat(kCounter, "eft_worker_snapshot_pushed_bytes_total",
                              "Bytes of memory snapshots peers accepted.",
                              [](const WorkerStats& s) { return double(s.snapshot_pushed_bytes); }));
  EFT_RETURN_IF_ERROR(AddStat(kCounter, "eft_worker_snapshot_refusals_total",
                              "Own ranks' memory snapshots this worker could not hold (no room, a bad file).",
                              [](const WorkerStats& s) { return double(s.snapshot_refusals); }));

  if (sources_.gpu_query_failures) {
    EFT_RETURN_IF_ERROR(Add(kCounter, "eft_worker_gpu_query_failures_total",
                            "nvidia-smi polls that failed, timed out or could not be parsed.", {},
                            [this]() -> Samples { return {{{}, static_cast<double>(sources_.gpu_query_failures())}}; }));
  }
  EFT_RETURN_IF_ERROR(AddGpu("eft_gpu_utilization_ratio",
                             "GPU utilisation (0..1) over nvidia-smi's last sample period; job: the job whose rank "
                             "holds the GPU, \"\" when idle.",
                             [](const GpuReading& r) { return r.utilization_ratio; }));
  EFT_RETURN_IF_ERROR(AddGpu("eft_gpu_memory_used_bytes", "GPU memory in use; job as for eft_gpu_utilization_ratio.",
                             [](const GpuReading& r) { return r.memory_used_bytes; }));
  EFT_RETURN_IF_ERROR(AddGpu("eft_gpu_memory_total_bytes", "GPU memory in all; job as for eft_gpu_utilization_ratio.",
                             [](const GpuReading& r) { return r.memory_total_bytes; }));
  return Status::Ok();
}

}  // namespace eft::worker
