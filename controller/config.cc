#include "controller/config.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/daemon_settings.h"

namespace eft::controller {
namespace {

// "HOST:PORT" -> HOST ("[::1]:80" -> "::1"; ":80" -> ""). No validation beyond that.
std::string HostOf(const std::string& address) {
  size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

void AddControllerSettings(DaemonSettings* s, ControllerConfig* c) {
  s->AddString({"listen", "--listen",
                "gRPC address HOST:PORT (default 0.0.0.0:7070 with authentication, else 127.0.0.1:7070)"},
               &c->listen);
  s->AddString({"db", "--db", "SQLite database file (created if missing)"}, &c->db_path);
  s->AddString({"data_dir", "", ""}, &c->data_dir);
  s->AddSeconds({"heartbeat_interval_s", "--heartbeat-interval", "seconds between worker heartbeats (default 1)"},
                &c->heartbeat_interval);
  s->AddSeconds({"heartbeat_timeout_s", "--heartbeat-timeout",
                 "seconds without heartbeat before a node is LOST (default 3)"},
                &c->heartbeat_timeout);
  s->AddSeconds({"transition_heartbeat_interval_s", "--transition-heartbeat-interval",
                 "seconds between heartbeats of a node whose job is stopping or starting (default 0.2; "
                 "= --heartbeat-interval: off)"},
                &c->transition_heartbeat_interval);
  s->AddSeconds({"transition_window_s", "", ""}, &c->transition_window);
  s->AddSeconds({"progress_flush_interval_s", "", ""}, &c->progress_flush_interval);
  s->AddSeconds({"tick_interval_s", "", ""}, &c->tick_interval);
  s->AddInt({"master_port_base", "", ""}, &c->master_port_base);
  s->AddInt({"master_port_count", "", ""}, &c->master_port_count);
  s->AddInt({"max_submitter_priority", "--max-submitter-priority",
             "highest job priority a non-admin may submit (docs/auth.md)"},
            &c->max_submitter_priority);
  s->AddSeconds({"restart_backoff_initial_s", "", ""}, &c->restart_backoff_initial);
  s->AddSeconds({"restart_backoff_max_s", "", ""}, &c->restart_backoff_max);
  s->AddSeconds({"stop_report_slack_s", "", ""}, &c->stop_report_slack);
  s->AddSeconds({"snapshot_stage_timeout_s", "", ""}, &c->snapshot_stage_timeout);
  s->AddString({"trainer_program", "", ""}, &c->trainer_program);
  s->AddInt({"finished_jobs_in_memory", "--finished-jobs-in-memory",
             "finished jobs kept in memory; older ones are read from the database (default 1000)"},
            &c->finished_jobs_in_memory);
  s->AddString({"mlflow_tracking_uri", "--mlflow-tracking-uri",
                "MLflow tracking server (http:// or https:// URL) each job is logged to as one run, unless its "
                "spec.tracking names another or \"off\" (default: none; docs/tracking.md)"},
               &c->mlflow_tracking_uri);
  s->AddString({"mlflow_experiment", "--mlflow-experiment",
                "MLflow experiment of jobs whose spec.tracking names none (default eft)"},
               &c->mlflow_experiment);
  s->AddString({"tensorboard_dir", "--tensorboard-dir",
                "TensorBoard runs of jobs whose spec.tracking names no directory go to DIR/<job id> (default: "
                "<checkpoint.dir>/tensorboard)"},
               &c->tensorboard_dir);
  s->AddSeconds({"mlflow_timeout_s", "--mlflow-timeout",
                 "seconds each call to an MLflow server may take, connecting included (default 10)"},
                &c->mlflow_timeout);
  s->AddSeconds({"mlflow_flush_interval_s", "", ""}, &c->mlflow_flush_interval);
  s->AddSeconds({"mlflow_retry_max_s", "--mlflow-retry-max",
                 "most seconds between tries of an MLflow server that fails (from 1, doubling; default 30)"},
                &c->mlflow_retry_max);
  s->AddSeconds({"mlflow_unreachable_event_after_s", "--mlflow-unreachable-event-after",
                 "seconds an MLflow server fails before each job waiting on it gets an mlflow_unreachable event "
                 "(default 60)"},
                &c->mlflow_unreachable_event_after);
  s->AddInt({"mlflow_max_pending_points", "", ""}, &c->mlflow_max_pending_points);
  auto existing_file = [](CLI::Option* flag) {
    if (flag != nullptr) flag->check(CLI::ExistingFile);
  };
  existing_file(s->AddString({"auth_tokens", "--auth-tokens", "tokens file: users' bearer tokens and roles (docs/auth.md)"},
                             &c->auth_tokens_file));
  existing_file(s->AddString(
      {"join_token_file", "--join-token-file", "file holding the token workers join with (docs/auth.md)"},
      &c->join_token_file));
  existing_file(s->AddString(
      {"tls_cert", "--tls-cert", "PEM certificate (chain): gRPC over TLS, and HTTPS for --http"}, &c->tls_cert));
  existing_file(s->AddString({"tls_key", "--tls-key", "PEM private key of --tls-cert"}, &c->tls_key));
  existing_file(s->AddString(
      {"tls_client_ca", "--tls-client-ca", "PEM CA: also require client certificates signed by it (mTLS)"},
      &c->tls_client_ca));
  s->AddBool({"insecure_listen_anywhere", "--insecure-listen-anywhere",
              "allow non-loopback addresses without authentication (anyone who reaches the port controls the "
              "cluster)"},
             &c->insecure_listen_anywhere);
  s->AddBool({"metrics_without_auth", "--metrics-without-auth", "serve GET /metrics without a token when auth is on"},
             &c->metrics_without_auth);
}

Status LoadControllerConfig(const std::string& path, ControllerConfig* c) {
  DaemonSettings settings(nullptr, "");
  AddControllerSettings(&settings, c);
  return settings.ApplyFile(path);
}

bool IsLoopbackHost(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost" || host == "ip6-localhost";
}

Status CheckListenSecurity(const ControllerConfig& c, const std::string& http_address) {
  if (c.auth_tokens_file.empty() != c.join_token_file.empty()) {
    return Status::InvalidArgument(
        "authentication needs both --auth-tokens (users) and --join-token-file (workers); one without the other "
        "would leave the users' or the workers' API open");
  }
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return Status::InvalidArgument("TLS needs both --tls-cert and --tls-key");
  }
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) {
    return Status::InvalidArgument("--tls-client-ca needs --tls-cert and --tls-key");
  }
  if (c.auth_enabled() || c.insecure_listen_anywhere) return Status::Ok();
  std::vector<std::pair<std::string, std::string>> addresses = {{"--listen", c.listen.empty() ? "127.0.0.1:7070" : c.listen}};
  if (!http_address.empty()) addresses.emplace_back("--http", http_address);
  for (const auto& [flag, address] : addresses) {
    if (!IsLoopbackHost(HostOf(address))) {
      return Status::InvalidArgument(flag + " " + address +
                                     ": without authentication the controller listens on loopback addresses only "
                                     "(127.0.0.1, ::1); configure --auth-tokens and --join-token-file (docs/auth.md), "
                                     "or pass --insecure-listen-anywhere to accept anyone who can reach it");
    }
  }
  return Status::Ok();
}

Status FinalizeControllerConfig(ControllerConfig* c) {
  if (c->db_path.empty()) return Status::InvalidArgument("db: must not be empty");
  if (c->listen.empty()) {
    c->listen = c->auth_enabled() || c->insecure_listen_anywhere ? "0.0.0.0:7070" : "127.0.0.1:7070";
  }
  if (c->data_dir.empty()) c->data_dir = c->db_path + ".d";
  if (c->heartbeat_timeout <= c->heartbeat_interval) {
    return Status::InvalidArgument("heartbeat_timeout_s must be greater than heartbeat_interval_s");
  }
  if (c->transition_heartbeat_interval.count() <= 0) {
    return Status::InvalidArgument("transition_heartbeat_interval_s must be positive");
  }
  // A node in transition never heartbeats slower than the others.
  c->transition_heartbeat_interval = std::min(c->transition_heartbeat_interval, c->heartbeat_interval);
  if (c->master_port_base < 1024 || c->master_port_count < 1 || c->master_port_base + c->master_port_count > 65536) {
    return Status::InvalidArgument("master_port_base/master_port_count must describe a range within 1024..65535");
  }
  if (c->restart_backoff_max < c->restart_backoff_initial) {
    return Status::InvalidArgument("restart_backoff_max_s must be >= restart_backoff_initial_s");
  }
  if (c->finished_jobs_in_memory < 1) return Status::InvalidArgument("finished_jobs_in_memory must be at least 1");
  if (!c->mlflow_tracking_uri.empty() && c->mlflow_tracking_uri != "off" &&
      c->mlflow_tracking_uri.rfind("http://", 0) != 0 && c->mlflow_tracking_uri.rfind("https://", 0) != 0) {
    return Status::InvalidArgument("mlflow_tracking_uri (" + c->mlflow_tracking_uri +
                                   ") must be an http:// or https:// URL of an MLflow tracking server");
  }
  if (c->mlflow_tracking_uri == "off") c->mlflow_tracking_uri.clear();
  if (c->mlflow_experiment.empty() || c->mlflow_experiment.size() > 500) {
    return Status::InvalidArgument("mlflow_experiment must be 1 to 500 characters");
  }
  if (!c->tensorboard_dir.empty() && c->tensorboard_dir.front() != '/') {
    return Status::InvalidArgument("tensorboard_dir (" + c->tensorboard_dir + ") must be an absolute directory");
  }
  if (c->mlflow_max_pending_points < 100) return Status::InvalidArgument("mlflow_max_pending_points must be at least 100");
  return Status::Ok();
}

std::string MasterPortRangeWarning(const ControllerConfig& c, PortRange ephemeral) {
  const int last = c.master_port_base + c.master_port_count - 1;
  if (last < ephemeral.first || c.master_port_base > ephemeral.last) return "";
  return "MASTER_PORTs " + std::to_string(c.master_port_base) + ".." + std::to_string(last) +
         " (master_port_base, master_port_count) reach into the ephemeral port range " +
         std::to_string(ephemeral.first) + ".." + std::to_string(ephemeral.last) +
         " (net.ipv4.ip_local_port_range), from which outgoing connections take their ports: an attempt whose port "
         "one holds is retried on the next port; keep the range below " + std::to_string(ephemeral.first);
}

}  // namespace eft::controller
