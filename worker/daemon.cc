#include "worker/daemon.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <memory>

#include "common/http/http_metrics.h"
#include "common/http/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "worker/agent.h"
#include "worker/gpu_monitor.h"
#include "worker/worker_metrics.h"

namespace eft::worker {
namespace {

// How long the agent gives its ranks to stop when the worker exits.
constexpr std::chrono::seconds kShutdownGrace{35};

// /metrics on config.metrics_address: the agent's counters and, on a GPU node, nvidia-smi's
// readings joined to the jobs. Stop it before the agent shuts down (WorkerAgent::Stats is valid
// until then).
class MetricsService {
 public:
  MetricsService(const WorkerConfig& config, WorkerAgent* agent) : config_(config), agent_(agent) {}
  ~MetricsService() { Stop(); }

  Status Start() {
    // Only a node that offers GPUs polls nvidia-smi: on a CPU node it would fail every interval.
    if (!config_.gpu_ids.empty()) {
      gpus_ = std::make_unique<GpuMonitor>(MakeNvidiaSmiQuery(config_.nvidia_smi), config_.gpu_poll_interval,
                                           config_.gpu_query_timeout);
      gpus_->Start();
    }
    WorkerMetricsSources sources;
    sources.node = config_.name;
    sources.slots = config_.slots;
    sources.gpu_ids = config_.gpu_ids;
    sources.stats = [agent = agent_] { return agent->Stats(); };
    if (gpus_) {
      sources.gpus = [g = gpus_.get()] { return g->Latest(); };
      sources.gpu_query_failures = [g = gpus_.get()] { return g->failures(); };
    }
    auto m = WorkerMetrics::Create(&registry_, std::move(sources));
    auto h = http::HttpRequestMetrics::Create(&registry_);
    if (!m.ok() || !h.ok()) return (!m.ok() ? m.status() : h.status()).WithContext("metrics");
    worker_metrics_ = std::move(m).value();
    http_metrics_ = std::move(h).value();
    http::HttpServerConfig http_config;
    http_config.address = config_.metrics_address;
    http_config.threads = 1;  // a scrape every few seconds
    http_config.server_name = "eft-worker";
    http_config.on_request = http_metrics_->Hook();
    server_ = std::make_unique<http::HttpServer>(http_config,
                                                 http::MetricsEndpoint([this] { return registry_.Serialize(); }));
    EFT_RETURN_IF_ERROR(server_->Start().WithContext("--metrics"));
    EFT_LOG(INFO) << "metrics on " << config_.metrics_address << " (port " << server_->port() << ")"
                  << (gpus_ ? ", GPUs via " + config_.nvidia_smi : "");
    return Status::Ok();
  }

  void Stop() {
    if (server_) server_->Stop();
    if (gpus_) gpus_->Stop();
  }

 private:
  const WorkerConfig& config_;
  WorkerAgent* agent_;
  MetricsRegistry registry_;
  std::unique_ptr<GpuMonitor> gpus_;
  std::unique_ptr<WorkerMetrics> worker_metrics_;
  std::unique_ptr<http::HttpRequestMetrics> http_metrics_;
  std::unique_ptr<http::HttpServer> server_;
};

}  // namespace

int RunWorker(const WorkerConfig& config) {
  SetLogProgram("eft-worker " + config.name);
  if (std::string warning = LoopbackWarning(config); !warning.empty()) EFT_LOG(WARNING) << warning;

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Fenced (another live worker holds this node name): leave as a signal would, but say so.
  std::atomic<bool> fenced{false};
  AgentDeps deps;
  deps.on_fenced = [&fenced](const std::string&) {
    fenced = true;
    ::kill(::getpid(), SIGTERM);  // blocked in every thread: sigwait below takes it
  };
  WorkerAgent agent(config, std::move(deps));
  Status s = agent.Start();
  if (!s.ok()) {
    EFT_LOG(ERROR) << "cannot start: " << s;
    return 1;
  }

  // Declared after the agent so it goes first; stopped explicitly before the agent shuts down.
  std::unique_ptr<MetricsService> metrics;
  if (!config.metrics_address.empty()) {
    metrics = std::make_unique<MetricsService>(config, &agent);
    s = metrics->Start();
    if (!s.ok()) {
      EFT_LOG(ERROR) << s.message();
      metrics->Stop();
      agent.Shutdown(kShutdownGrace);
      return 1;
    }
  }

  int sig = 0;
  sigwait(&signals, &sig);
  if (fenced) {
    EFT_LOG(ERROR) << "another eft-worker holds node " << config.name << ": stopping ranks and exiting (code "
                   << kExitFenced << ")";
  } else {
    EFT_LOG(INFO) << "signal " << sig << ": stopping ranks and exiting";
  }
  if (metrics) metrics->Stop();
  agent.Shutdown(kShutdownGrace);
  return fenced ? kExitFenced : 0;
}

}  // namespace eft::worker
