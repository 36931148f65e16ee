// ControllerMetrics: eft-controller's own /metrics families (docs/metrics.md lists every one).
//
// State families are callbacks computed at scrape time from Controller::Snapshot: jobs and nodes by
// state, per job its attempts, restarts, world size, training progress (the newest step event) and
// checkpoints, per node its heartbeat age. Scrape() takes one snapshot and every family reads it,
// so eft_jobs and the per-job series of one scrape agree. Checkpoint save times, which the
// controller does not store, are relayed from checkpoint events as they arrive (histograms by kind,
// and the newest per job); they start empty after a controller restart.
//
// Bounded cardinality: per-job series exist for every job that is not terminal plus the
// `terminal_jobs_kept` most recently submitted terminal ones, whose final step, loss and checkpoint
// stay visible after the job ends; older jobs' series disappear. So the series count follows the
// active jobs, not the database's history.
//
// Thread-safe: Scrape() may run on several HTTP threads at once.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "controller/controller.h"

namespace eft::controller {

struct ControllerMetricsOptions {
  size_t terminal_jobs_kept = 100;
};

class ControllerMetrics {
 public:
  // Registers the families on `registry` and a checkpoint observer on `controller`; both must
  // outlive the returned object.
  static Result<std::unique_ptr<ControllerMetrics>> Create(MetricsRegistry* registry, Controller* controller,
                                                           ControllerMetricsOptions options = {});
  // Removes the observer and every family this object registered.
  ~ControllerMetrics();
  ControllerMetrics(const ControllerMetrics&) = delete;
  ControllerMetrics& operator=(const ControllerMetrics&) = delete;

  // The registry's whole exposition (other modules' families included), with one controller
  // snapshot shared by this module's families. Serializing the registry directly also works; each
  // family then takes its own snapshot.
  std::string Scrape() EXCLUDES(mu_);

 private:
  ControllerMetrics(MetricsRegistry* registry, Controller* controller, ControllerMetricsOptions options)
      : registry_(registry), controller_(controller), options_(options) {}
  using SnapshotFn = std::function<std::vector<CallbackSample>(const ControllerSnapshot&)>;
  // A job's value, or nothing when the job has no such series (e.g. no step reported yet).
  using JobFn = std::function<std::optional<double>(const ControllerSnapshot::Job&)>;

  Status RegisterAll();
  // A callback family reading the current scrape's snapshot (or a fresh one outside Scrape()).
  Status Add(MetricType type, const std::string& name, const std::string& help, const std::vector<std::string>& labels,
             SnapshotFn fn);
  // The same, one sample per job of the snapshot, label "job".
  Status AddPerJob(MetricType type, const std::string& name, const std::string& help, JobFn value);
  void OnCheckpoint(const CheckpointReport& report) EXCLUDES(mu_);
  std::vector<CallbackSample> LastSaveSeconds(const ControllerSnapshot& snapshot) EXCLUDES(mu_);

  // Set by Create (RegisterAll) before the families and the observer can run, read-only after.
  MetricsRegistry* const registry_;
  Controller* const controller_;
  const ControllerMetricsOptions options_;
  std::vector<std::string> registered_;  // family names, for the destructor
  HistogramFamily* save_seconds_ = nullptr;
  HistogramFamily* stall_seconds_ = nullptr;

  Mutex mu_;
  // Job id -> seconds of its newest checkpoint.
  std::map<std::string, double> last_save_seconds_ GUARDED_BY(mu_);
};

// The `kind` label of checkpoint histograms: "sharded", "full", or "other" (the value comes from a
// rank's event, so it is not trusted to stay in a small set).
std::string CheckpointKindLabel(const std::string& kind);
// "QUEUED", "RUNNING", ... (JobState without its prefix).
std::string JobStateLabel(v1::JobState state);

}  // namespace eft::controller
