// ControllerConfig: every tunable of eft-controller in one place, with its default.
// Taken from the optional --config YAML file and the flags the way every eft daemon takes its
// settings (common/daemon_settings.h): a flag given wins over the file, the file over the default.
#pragma once

#include <chrono>
#include <string>

#include "common/listen_port.h"
#include "common/status.h"

namespace eft {
class DaemonSettings;
}

namespace eft::controller {

struct ControllerConfig {
  // gRPC. Empty: 0.0.0.0:7070 with authentication or insecure_listen_anywhere, else 127.0.0.1:7070.
  std::string listen;
  std::string db_path = "eft-controller.db";
  // Logs and default checkpoint dirs live here; default: "<db_path>.d".
  std::string data_dir;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{3000};
  // While a job on a node is stopping or starting (a planned resize, a preemption, any restart),
  // the node is told to heartbeat this often instead (docs/architecture.md, "Fast heartbeats"), so
  // the hops of the change (the stop request, the new ranks, their first step) each wait a fraction
  // of heartbeat_interval. Equal to heartbeat_interval: off. At most heartbeat_interval.
  std::chrono::milliseconds transition_heartbeat_interval{200};
  // The longest a node keeps the fast interval only because a change is expected to use it (the
  // nodes of an attempt that ended for a restart, a grow's new nodes, nodes freed for a waiting
  // job); ranks stopping or starting there keep it fast however long they take.
  std::chrono::milliseconds transition_window{15000};
  // How often the steps running attempts reached are written to the store (one transaction for all
  // jobs), so step reports cost no write of their own: a kill -9 forgets at most this much of them
  // for "steps lost". Steps of an attempt that already ended (its ranks finishing the step they are
  // in) are written at once.
  std::chrono::milliseconds progress_flush_interval{1000};
  // How often timeouts, backoffs and scheduling are re-evaluated between RPCs.
  std::chrono::milliseconds tick_interval{100};
  // MASTER_PORT of attempt k is port_base + (k-th attempt overall % port_count): a fresh port per
  // attempt, so a restarted rendezvous never meets the previous attempt's TIME_WAIT sockets.
  int master_port_base = 29500;
  int master_port_count = 2000;
  // Restart backoff after the n-th counted failure: min(initial * 2^(n-1), max).
  std::chrono::milliseconds restart_backoff_initial{1000};
  std::chrono::milliseconds restart_backoff_max{30000};
  // After ranks were told to stop, how long past their grace period the controller waits for their
  // workers to report them gone before it gives up on them (their slots stay busy until then).
  std::chrono::milliseconds stop_report_slack{5000};
  // The longest a restart waits for live nodes to stage a memory snapshot's shards into the job's
  // checkpoint directory (docs/checkpoints.md, "Memory snapshots") before it takes the newest disk
  // checkpoint instead.
  std::chrono::milliseconds snapshot_stage_timeout{60000};
  // Highest spec.priority a non-admin may submit (docs/auth.md); admins may submit any.
  int max_submitter_priority = 0;
  // Where eft-train is found when a job has no `command` (a name is looked up in the worker's PATH).
  std::string trainer_program = "eft-train";
  // Finished jobs (SUCCEEDED, FAILED, CANCELLED) kept in memory: the most recently finished ones.
  // Older ones are read from the database when asked for (docs/architecture.md, "Finished jobs"),
  // so memory does not grow with the job history. /metrics reports per-job series of the newest
  // 100 finished jobs in memory: fewer when this is below 100.
  int finished_jobs_in_memory = 1000;

  // --- tracking (docs/tracking.md) ---
  // Filled into a submitted spec's `tracking` where it leaves a field empty, so the stored spec says
  // what runs: the MLflow server the job is logged to ("": none, the spec's field becomes "off"),
  // its experiment, and the parent directory of the jobs' TensorBoard runs (<dir>/<job id>; "": the
  // trainer's own default, <checkpoint.dir>/tensorboard).
  std::string mlflow_tracking_uri;
  std::string mlflow_experiment = "eft";
  std::string tensorboard_dir;
  // The MLflow tracker (controller/tracking/mlflow_tracker.h): every call to a server gives up after
  // mlflow_timeout (connecting included); batches go out every mlflow_flush_interval; a server that
  // fails is retried after 1 s, doubling up to mlflow_retry_max; after mlflow_unreachable_event_after
  // of failures each job waiting on it gets an `mlflow_unreachable` event (and `mlflow_recovered`
  // when it answers again); each job queues at most mlflow_max_pending_points metric points
  // meanwhile (older ones are thinned out beyond that).
  std::chrono::milliseconds mlflow_timeout{10000};
  std::chrono::milliseconds mlflow_flush_interval{1000};
  std::chrono::milliseconds mlflow_retry_max{30000};
  std::chrono::milliseconds mlflow_unreachable_event_after{60000};
  int mlflow_max_pending_points = 50000;

  // --- authentication and TLS (docs/auth.md) ---
  // Tokens file (token -> user, role) and the workers' join token file; both or neither.
  std::string auth_tokens_file;
  std::string join_token_file;
  // PEM files. tls_cert + tls_key: gRPC over TLS and HTTPS for --http. tls_client_ca: also require
  // client certificates signed by it (mutual TLS).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // Without authentication the controller listens on loopback addresses only, unless this is set.
  bool insecure_listen_anywhere = false;
  // GET /metrics without a token even when authentication is on (for Prometheus without credentials).
  bool metrics_without_auth = false;

  bool auth_enabled() const { return !auth_tokens_file.empty() || !join_token_file.empty(); }
  bool tls_enabled() const { return !tls_cert.empty() || !tls_key.empty(); }
};

// The listening rules of docs/auth.md, checked before anything listens: auth files come in pairs,
// TLS cert and key too, and without auth every address (gRPC `listen`, and `http_address` when not
// empty) must be a loopback one unless insecure_listen_anywhere. INVALID_ARGUMENT names the fix.
Status CheckListenSecurity(const ControllerConfig& config, const std::string& http_address);
// 127.0.0.0/8, ::1, localhost (the host part of HOST:PORT).
bool IsLoopbackHost(const std::string& host);

// Registers every setting of *config with `settings`: its key in controller.yaml (deploy/config/)
// and, where it has one, its flag.
void AddControllerSettings(DaemonSettings* settings, ControllerConfig* config);
// Reads a YAML file of overrides onto *config (the keys of AddControllerSettings). Unknown keys are
// errors naming the key.
Status LoadControllerConfig(const std::string& path, ControllerConfig* config);
// Fills derived defaults (data_dir) and checks ranges.
Status FinalizeControllerConfig(ControllerConfig* config);
// A warning when the MASTER_PORT range reaches into `ephemeral` (the ports outgoing connections take:
// any connection on a node may hold one, and each time one does, an attempt is retried on the next
// port); "" when it stays clear. The controller checks its own host's range at start.
std::string MasterPortRangeWarning(const ControllerConfig& config, PortRange ephemeral);

}  // namespace eft::controller
