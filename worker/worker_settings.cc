// AddWorkerSettings apart from the rest of worker_config.cc, which links gRPC (the TLS files) and
// the snapshot store: the keys and flags alone are what fuzz/worker_config_fuzz.cc parses.
#include <CLI/CLI.hpp>

#include "common/daemon_settings.h"
#include "worker/worker_config.h"

namespace eft::worker {

void AddWorkerSettings(DaemonSettings* d, WorkerSettings* s) {
  WorkerConfig* c = &s->config;
  d->AddString({"controller", "--controller", "controller gRPC address HOST:PORT", /*required=*/true}, &c->controller);
  d->AddString({"name", "--name", "node name (default: host name)"}, &c->name);
  d->AddInt({"slots", "--slots", "rank slots (default: one per visible GPU, else 1)"}, &c->slots);
  d->AddString({"work_dir", "--work-dir", "rank logs and state (default: /tmp/eft-worker-NAME)"}, &c->work_dir);
  d->AddString({"address", "--address",
                "address other nodes reach this one at: rank traffic and MASTER_ADDR unless --data-address "
                "(default: host name)"},
               &c->address);
  d->AddString({"data_address", "--data-address",
                "address or interface name (eth1) of a separate data network for rank traffic (default: --address)"},
               &c->data_address);
  d->AddString({"metrics", "--metrics", "serve Prometheus /metrics and /healthz on HOST:PORT (default: off)"},
               &c->metrics_address);
  d->AddString({"nvidia_smi", "--nvidia-smi", "nvidia-smi program for GPU metrics (default: nvidia-smi on PATH)"},
               &c->nvidia_smi);
  d->AddBool({"snapshots", "--snapshots",
               "hold the ranks' memory snapshots and replicas of other nodes' (default: true; --snapshots=false: "
               "off)"},
              &c->snapshots);
  d->AddString({"snapshot_dir", "--snapshot-dir",
                "directory in memory for snapshots (default: /dev/shm/eft-worker-NAME-<hash of the work dir>; its job-* entries are "
                "deleted at start)"},
               &c->snapshot_dir);
  d->AddInt({"snapshot_memory_mb", "--snapshot-memory-mb",
             "memory snapshots may hold at most this many MiB (default: a quarter of MemTotal)"},
            &c->snapshot_memory_mb);
  d->AddInt({"snapshot_port", "--snapshot-port",
             "port of the snapshot service on the data address, which other workers push replicas to (default: "
             "any free port)"},
            &c->snapshot_port);
  d->AddChoice({"log_level", "--log-level", "debug|info|warning|error"}, {"debug", "info", "warning", "warn", "error"},
               &s->log_level);
  auto existing_file = [](CLI::Option* flag) {
    if (flag != nullptr) flag->check(CLI::ExistingFile);
  };
  existing_file(d->AddString({"join_token_file", "--join-token-file",
                              "file holding the controller's join token (default: $EFT_JOIN_TOKEN; docs/auth.md)"},
                             &s->join_token_file));
  d->AddBool({"tls", "--tls", "connect to the controller with TLS, trusting the system's CAs (see --tls-ca)"}, &s->tls);
  existing_file(d->AddString(
      {"tls_ca", "--tls-ca", "PEM CA the controller's certificate is checked against (implies --tls)"}, &s->tls_ca));
  existing_file(d->AddString(
      {"tls_cert", "--tls-cert", "PEM client certificate, for a controller that requires one (--tls-client-ca)"},
      &s->tls_cert));
  existing_file(d->AddString({"tls_key", "--tls-key", "PEM private key of --tls-cert"}, &s->tls_key));
}

}  // namespace eft::worker
