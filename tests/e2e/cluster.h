// TestCluster: a real eft cluster on 127.0.0.1 for end-to-end tests: one eft-controller process
// and N eft-worker processes (each a "node"), started from the build tree and stopped by PID.
//
// Everything lives in a fresh temporary directory (database, work dirs, process logs, shared
// checkpoint dir); the directory is kept when a test fails, so its logs can be read.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "eft/v1/job.grpc.pb.h"
#include "tests/e2e/process_util.h"
#include "eft/v1/node.grpc.pb.h"

namespace eft::testing {

struct ClusterOptions {
  int workers = 3;
  int slots_per_worker = 1;
  double heartbeat_interval_s = 0.5;
  double heartbeat_timeout_s = 2.0;
  // Also serve the REST API (--http on a free port of 127.0.0.1); see http_address().
  bool http = false;
  // Appended to the controller's command line (e.g. {"--http-read-timeout", "2"}).
  std::vector<std::string> controller_args;
  // Every worker also serves /metrics (--metrics on a free port of 127.0.0.1); see worker_metrics_port().
  bool worker_metrics = false;
  // Appended to every worker's command line, and set in its environment (which otherwise has
  // CUDA_VISIBLE_DEVICES="", so workers are CPU nodes). Every worker gets --snapshot-dir
  // worker_snapshot_dir(i) unless these name one.
  std::vector<std::string> worker_args;
  std::map<std::string, std::string> worker_env;
  // For a controller with authentication and TLS (docs/auth.md; pass its flags in controller_args):
  // the cluster's own calls (the start-up probe, Submit, GetJob, WaitForReadyNodes, ...) send this
  // bearer token, and its channels use TLS trusting this PEM CA file when it is set.
  std::string client_token;
  std::string client_tls_ca;
};

// SUCCEEDED, FAILED or CANCELLED.
bool IsTerminal(const v1::Job& job);
// The job's state, reason and every event: what a failing assertion should print.
std::string DescribeJob(const v1::Job& job);

class TestCluster {
 public:
  explicit TestCluster(ClusterOptions options = {});
  ~TestCluster();

  const std::string& dir() const { return dir_; }
  std::string checkpoint_root() const { return dir_ + "/shared"; }
  std::string controller_address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The REST API (ClusterOptions::http); the port stays the same across controller restarts.
  int http_port() const { return http_port_; }
  std::string http_address() const { return "127.0.0.1:" + std::to_string(http_port_); }
  // Worker i's /metrics (ClusterOptions::worker_metrics); the same across restarts of the worker.
  int worker_metrics_port(int i) const { return worker_metrics_ports_.at(i); }

  void StartController();
  void KillController(int sig = 9);  // and reap
  ChildProcess& controller() { return *controller_; }
  void StartWorker(int i);
  // And reap; its ranks die with it (PR_SET_PDEATHSIG). With SIGKILL its snapshot dir is deleted
  // too: a node's loss takes its memory with it, so recovery must come from a replica elsewhere.
  void KillWorker(int i, int sig = 9);
  ChildProcess& worker(int i) { return *workers_.at(i); }
  std::string worker_name(int i) const { return "node" + std::to_string(i); }
  // Worker i's --snapshot-dir: its memory snapshots, in memory (tmpfs) as on a real node, under a
  // directory of this cluster's own that the destructor removes. On a disk they would be written back
  // and slow every fsync on it (ext4 commits other files' data with a journal), the controller's too.
  std::string worker_snapshot_dir(int i) const { return shm_dir_ + "/" + worker_name(i); }

  // Channel credentials matching ClusterOptions::client_tls_ca, and the token of client_token.
  std::shared_ptr<grpc::ChannelCredentials> credentials() const;
  void AddToken(grpc::ClientContext* ctx) const;

  v1::JobService::Stub& jobs() { return *jobs_; }
  v1::NodeService::Stub& nodes() { return *nodes_; }

  // Starts the controller and every worker and waits until all nodes are READY.
  void StartAll();
  bool WaitForReadyNodes(int n, std::chrono::milliseconds timeout);

  grpc::Status Submit(const v1::JobSpec& spec, v1::Job* job);
  v1::Job GetJob(const std::string& id);
  // Polls GetJob until pred(job) or timeout; returns the last job seen.
  v1::Job WaitForJob(const std::string& id, const std::function<bool(const v1::Job&)>& pred,
                     std::chrono::milliseconds timeout);
  v1::Node GetNode(const std::string& name);

  // A job running the test workload on `nodes_min..nodes_max` nodes; extra workload flags appended.
  v1::JobSpec WorkloadJob(const std::string& name, int nodes_min, int nodes_max, int steps, int step_ms,
                          int checkpoint_every, const std::vector<std::string>& extra = {});
  std::string ResultPath(const std::string& job_name) const { return dir_ + "/results/" + job_name + ".json"; }
  // The controller's master_port_base: a fresh controller gives its first attempt this MASTER_PORT.
  int master_port_base() const { return master_port_base_; }
  // pids of the workload's ranks of one attempt, read from the pid files it writes.
  std::vector<pid_t> RankPids(const std::string& job_name, int attempt);
  // Keeps the directory (for post-mortem) instead of deleting it.
  void KeepDirectory() { keep_ = true; }

 private:
  void Connect();  // a fresh channel to the controller
  ClusterOptions options_;
  std::string dir_;
  std::string shm_dir_;  // /dev/shm/eft-e2e-XXXXXX, or dir_ + "/shm" without /dev/shm
  int port_;
  int http_port_ = 0;
  std::vector<int> worker_metrics_ports_;
  int master_port_base_ = 0;
  bool keep_ = false;
  std::unique_ptr<ChildProcess> controller_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::NodeService::Stub> nodes_;
};

}  // namespace eft::testing
