// eft-worker: one per node. Registers with eft-controller, heartbeats, and runs the ranks the
// controller wants on this node; with --metrics it serves Prometheus /metrics (ranks, heartbeats,
// and per-GPU utilisation and memory joined to jobs when nvidia-smi is there).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "common/cli_yaml_config.h"
#include "common/http/http_metrics.h"
#include "common/http/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "worker/agent.h"
#include "worker/gpu_monitor.h"
#include "worker/worker_metrics.h"

int main(int argc, char** argv) {
  using namespace eft;
  using namespace eft::worker;
  SetLogProgram("eft-worker");

  WorkerConfig config;
  std::string log_level;
  CLI::App app{"eft-worker: runs the controller's ranks on this node"};
  AddYamlConfigOption(app, "worker.yaml: any of these options as key: value (flags given here win)");
  app.add_option("--controller", config.controller, "controller gRPC address HOST:PORT")->required();
  app.add_option("--name", config.name, "node name (default: host name)");
  app.add_option("--slots", config.slots, "rank slots (default: one per visible GPU, else 1)");
  app.add_option("--work-dir", config.work_dir, "rank logs and state (default: /tmp/eft-worker-NAME)");
  app.add_option("--address", config.address, "address other nodes reach this one at (MASTER_ADDR; default: host name)");
  app.add_option("--metrics", config.metrics_address, "serve Prometheus /metrics and /healthz on HOST:PORT (default: off)");
  app.add_option("--nvidia-smi", config.nvidia_smi, "nvidia-smi program for GPU metrics (default: nvidia-smi on PATH)");
  app.add_option("--log-level", log_level, "debug|info|warning|error")
      ->check(CLI::IsMember({"debug", "info", "warning", "warn", "error"}));
  std::string join_token_file, tls_ca, tls_cert, tls_key;
  bool tls = false;
  app.add_option("--join-token-file", join_token_file,
                 "file holding the controller's join token (default: $EFT_JOIN_TOKEN; docs/auth.md)")
      ->check(CLI::ExistingFile);
  app.add_flag("--tls", tls, "connect to the controller with TLS, trusting the system's CAs (see --tls-ca)");
  app.add_option("--tls-ca", tls_ca, "PEM CA the controller's certificate is checked against (implies --tls)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-cert", tls_cert, "PEM client certificate, for a controller that requires one (--tls-client-ca)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (LogLevel level; ParseLogLevel(log_level, &level)) SetLogLevel(level);
  auto read_file = [](const std::string& path, std::string* out) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return static_cast<bool>(in);
  };
  auto trim = [](std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    size_t b = 0;
    while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    return s.substr(b);
  };
  if (!join_token_file.empty()) {
    std::string text;
    if (!read_file(join_token_file, &text)) {
      std::fprintf(stderr, "eft-worker: --join-token-file %s: cannot read it\n", join_token_file.c_str());
      return 2;
    }
    std::istringstream lines(text);  // the first non-empty line, as the controller reads it
    for (std::string line; std::getline(lines, line) && config.endpoint.join_token.empty();) {
      config.endpoint.join_token = trim(line);
    }
    if (config.endpoint.join_token.empty()) {
      std::fprintf(stderr, "eft-worker: --join-token-file %s: the file is empty\n", join_token_file.c_str());
      return 2;
    }
  } else if (const char* env = std::getenv("EFT_JOIN_TOKEN"); env && *env) {
    config.endpoint.join_token = trim(env);
  }
  if (tls_cert.empty() != tls_key.empty()) {
    std::fprintf(stderr, "eft-worker: --tls-cert and --tls-key go together\n");
    return 2;
  }
  config.endpoint.tls = tls || !tls_ca.empty() || !tls_cert.empty();
  if ((!tls_ca.empty() && !read_file(tls_ca, &config.endpoint.tls_ca_pem)) ||
      (!tls_cert.empty() && (!read_file(tls_cert, &config.endpoint.tls_cert_pem) ||
                             !read_file(tls_key, &config.endpoint.tls_key_pem)))) {
    std::fprintf(stderr, "eft-worker: cannot read the TLS files\n");
    return 2;
  }
  Status s = FinalizeWorkerConfig(&config);
  if (!s.ok()) {
    std::fprintf(stderr, "eft-worker: %s\n", s.message().c_str());
    return 2;
  }
  SetLogProgram("eft-worker " + config.name);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  WorkerAgent agent(config);
  s = agent.Start();
  if (!s.ok()) {
    EFT_LOG(ERROR) << "cannot start: " << s;
    return 1;
  }

  // Metrics: declared after the agent so they go first, and stopped explicitly before the agent
  // shuts down (WorkerAgent::Stats is valid until then).
  MetricsRegistry registry;
  std::unique_ptr<GpuMonitor> gpus;
  std::unique_ptr<WorkerMetrics> worker_metrics;
  std::unique_ptr<http::HttpRequestMetrics> http_metrics;
  std::unique_ptr<http::HttpServer> metrics_server;
  if (!config.metrics_address.empty()) {
    // Only a node that offers GPUs polls nvidia-smi: on a CPU node it would fail every interval.
    if (!config.gpu_ids.empty()) {
      gpus = std::make_unique<GpuMonitor>(MakeNvidiaSmiQuery(config.nvidia_smi), config.gpu_poll_interval,
                                          config.gpu_query_timeout);
      gpus->Start();
    }
    WorkerMetricsSources sources;
    sources.node = config.name;
    sources.slots = config.slots;
    sources.gpu_ids = config.gpu_ids;
    sources.stats = [&agent] { return agent.Stats(); };
    if (gpus) {
      sources.gpus = [g = gpus.get()] { return g->Latest(); };
      sources.gpu_query_failures = [g = gpus.get()] { return g->failures(); };
    }
    auto m = WorkerMetrics::Create(&registry, std::move(sources));
    auto h = http::HttpRequestMetrics::Create(&registry);
    if (!m.ok() || !h.ok()) {
      EFT_LOG(ERROR) << "metrics: " << (!m.ok() ? m.status() : h.status());
      agent.Shutdown(std::chrono::seconds(35));
      return 1;
    }
    worker_metrics = std::move(m).value();
    http_metrics = std::move(h).value();
    http::HttpServerConfig http_config;
    http_config.address = config.metrics_address;
    http_config.threads = 1;  // a scrape every few seconds
    http_config.server_name = "eft-worker";
    http_config.on_request = http_metrics->Hook();
    metrics_server = std::make_unique<http::HttpServer>(
        http_config, http::MetricsEndpoint([&registry] { return registry.Serialize(); }));
    s = metrics_server->Start();
    if (!s.ok()) {
      EFT_LOG(ERROR) << "--metrics: " << s.message();
      agent.Shutdown(std::chrono::seconds(35));
      return 1;
    }
    EFT_LOG(INFO) << "metrics on " << config.metrics_address << " (port " << metrics_server->port() << ")"
                  << (gpus ? ", GPUs via " + config.nvidia_smi : "");
  }

  int sig = 0;
  sigwait(&signals, &sig);
  EFT_LOG(INFO) << "signal " << sig << ": stopping ranks and exiting";
  if (metrics_server) metrics_server->Stop();
  if (gpus) gpus->Stop();
  agent.Shutdown(std::chrono::seconds(35));
  return 0;
}
