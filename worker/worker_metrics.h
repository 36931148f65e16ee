// WorkerMetrics: eft-worker's /metrics families (docs/metrics.md lists every one).
//
// Everything is a callback computed at scrape time from WorkerAgent::Stats() and, on a GPU node, the
// newest GpuMonitor readings: ranks by state, rank starts, restarts and exits by class, heartbeat
// and log-shipping health, the lease (agent.h), and per GPU its utilisation and memory labelled
// with the job using it. The GPU series exist only while nvidia-smi answers (see gpu_monitor.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "worker/agent.h"
#include "worker/gpu_monitor.h"

namespace eft::worker {

// What the families read; functions so tests can feed them without a running agent.
struct WorkerMetricsSources {
  std::string node;                            // eft_worker_info{node}
  int slots = 0;
  std::vector<std::string> gpu_ids;            // WorkerConfig::gpu_ids: slot -> CUDA_VISIBLE_DEVICES value
  std::function<WorkerStats()> stats;          // required
  std::function<std::vector<GpuReading>()> gpus;  // empty: no GPU families' samples
  std::function<uint64_t()> gpu_query_failures;   // may be empty
};

class WorkerMetrics {
 public:
  // Registers the families on `registry`, which must outlive the returned object; the sources'
  // functions must stay callable until it is destroyed.
  static Result<std::unique_ptr<WorkerMetrics>> Create(MetricsRegistry* registry, WorkerMetricsSources sources);
  ~WorkerMetrics();  // unregisters its families
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

 private:
  WorkerMetrics(MetricsRegistry* registry, WorkerMetricsSources sources)
      : registry_(registry), sources_(std::move(sources)) {}
  Status RegisterAll();
  Status Add(MetricType type, const std::string& name, const std::string& help, const std::vector<std::string>& labels,
             std::function<std::vector<CallbackSample>()> fn);
  // One sample of a single-value family from the agent's stats.
  Status AddStat(MetricType type, const std::string& name, const std::string& help,
                 std::function<double(const WorkerStats&)> value);
  // eft_gpu_* families: one sample per GPU of this worker that has the value.
  Status AddGpu(const std::string& name, const std::string& help,
                std::function<std::optional<double>(const GpuReading&)> value);

  MetricsRegistry* registry_;
  WorkerMetricsSources sources_;
  std::vector<std::string> registered_;
};

// "RUNNING", "STOPPING", "EXITED", "FAILED_TO_START" (RankState without its prefix).
std::string RankStateLabel(v1::RankState state);

}  // namespace eft::worker
