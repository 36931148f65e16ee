#include "tests/e2e/cluster.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/grpc/credentials.h"

namespace eft::testing {

namespace fs = std::filesystem;

bool IsTerminal(const v1::Job& j) {
  return j.state() == v1::JOB_STATE_SUCCEEDED || j.state() == v1::JOB_STATE_FAILED ||
         j.state() == v1::JOB_STATE_CANCELLED;
}

std::string DescribeJob(const v1::Job& j) {
  std::string out = "job " + j.id() + " " + v1::JobState_Name(j.state()) + " (" + j.reason() + ")\n";
  for (const auto& e : j.events()) out += "  [" + e.type() + "] " + e.message() + "\n";
  return out;
}

TestCluster::TestCluster(ClusterOptions options) : options_(options) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "cluster";
  std::string tmpl = (fs::temp_directory_path() / ("eft-e2e-" + name + "-XXXXXX")).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  dir_ = ::mkdtemp(buf.data());
  std::string shm = "/dev/shm/eft-e2e-XXXXXX";
  std::vector<char> shm_buf(shm.begin(), shm.end());
  shm_buf.push_back('\0');
  const char* made = fs::is_directory("/dev/shm") ? ::mkdtemp(shm_buf.data()) : nullptr;
  shm_dir_ = made != nullptr ? std::string(made) : dir_ + "/shm";
  port_ = PickFreePort();
  while (options_.http && (http_port_ == 0 || http_port_ == port_)) http_port_ = PickFreePort();
  for (int i = 0; options_.worker_metrics && i < options_.workers; ++i) {
    int p = 0;
    auto taken = [&](int candidate) {
      const auto& used = worker_metrics_ports_;
      return candidate == port_ || candidate == http_port_ || std::find(used.begin(), used.end(), candidate) != used.end();
    };
    while (p == 0 || taken(p)) p = PickFreePort();
    worker_metrics_ports_.push_back(p);
  }
  for (int i = 0; i < options_.workers; ++i) workers_.push_back(std::make_unique<ChildProcess>());
  Connect();
}

std::shared_ptr<grpc::ChannelCredentials> TestCluster::credentials() const {
  Result<ClientTls> tls = LoadClientTls(false, options_.client_tls_ca);
  if (tls.ok()) return MakeChannelCredentials(*tls);
  ADD_FAILURE() << tls.status();
  ClientTls unreadable_ca;  // TLS with the system's roots: the connection fails, as it should
  unreadable_ca.enabled = true;
  return MakeChannelCredentials(unreadable_ca);
}

void TestCluster::AddToken(grpc::ClientContext* ctx) const { AddBearerToken(options_.client_token, ctx); }

void TestCluster::Connect() {
  channel_ = grpc::CreateChannel(controller_address(), credentials());
  jobs_ = v1::JobService::NewStub(channel_);
  nodes_ = v1::NodeService::NewStub(channel_);
}

TestCluster::~TestCluster() {
  for (auto& w : workers_) w->KillGroup();
  if (controller_) controller_->KillGroup();
  std::error_code shm_ec;
  fs::remove_all(shm_dir_, shm_ec);  // memory, kept for no one
  bool failed = ::testing::Test::HasFailure();
  if (failed || keep_) {
    std::fprintf(stderr, "test cluster directory kept for inspection: %s\n", dir_.c_str());
    // Print the tails of the daemon logs: usually what explains a failure.
    for (const char* log : {"controller.log", "node0.log", "node1.log", "node2.log"}) {
      std::string text = ReadFile(dir_ + "/" + log);
      if (text.size() > 6000) text = "..." + text.substr(text.size() - 6000);
      if (!text.empty()) std::fprintf(stderr, "----- %s -----\n%s\n", log, text.c_str());
    }
  } else {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

void TestCluster::StartController() {
  controller_ = std::make_unique<ChildProcess>();
  char interval[32], timeout[32];
  std::snprintf(interval, sizeof(interval), "%g", options_.heartbeat_interval_s);
  std::snprintf(timeout, sizeof(timeout), "%g", options_.heartbeat_timeout_s);
  // Each cluster gets its own MASTER_PORT range, so clusters of tests running side by side (or
  // another checkout's tests) rarely rendezvous on each other's ports; below the ephemeral range, so
  // no outgoing connection on the host takes one (a busy port costs an uncounted retry, and tests
  // count attempts).
  constexpr int kMasterPortCount = 200;
  if (master_port_base_ == 0) master_port_base_ = PortRangeBelowEphemeral(kMasterPortCount);
  std::ofstream(dir_ + "/controller.yaml") << "master_port_base: " << master_port_base_
                                           << "\nmaster_port_count: " << kMasterPortCount
                                           << "\ntrainer_program: " << TrainerBinary() << "\n";
  std::vector<std::string> argv = {BuildDir() + "/controller/eft-controller", "--listen", controller_address(), "--db",
                                   dir_ + "/controller.db", "--config", dir_ + "/controller.yaml",
                                   "--heartbeat-interval", interval, "--heartbeat-timeout", timeout};
  if (options_.http) argv.insert(argv.end(), {"--http", http_address()});
  argv.insert(argv.end(), options_.controller_args.begin(), options_.controller_args.end());
  ASSERT_TRUE(controller_->Start(argv, {}, dir_ + "/controller.log"));
  // Ready when it answers an RPC. Each probe uses a new channel: a channel whose first connection
  // was refused sits in reconnect backoff for a while, whatever the backoff arguments say.
  bool up = WaitUntil(
      [&] {
        auto probe = v1::NodeService::NewStub(grpc::CreateChannel(controller_address(), credentials()));
        grpc::ClientContext ctx;
        AddToken(&ctx);
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
        ctx.set_wait_for_ready(true);
        v1::ListNodesResponse resp;
        return probe->ListNodes(&ctx, v1::ListNodesRequest(), &resp).ok();
      },
      std::chrono::seconds(10));
  ASSERT_TRUE(up) << "controller did not come up; log:\n" << ReadFile(dir_ + "/controller.log");
  Connect();
}

void TestCluster::KillController(int sig) {
  controller_->Signal(sig);
  controller_->Wait(std::chrono::seconds(10));
}

void TestCluster::StartWorker(int i) {
  std::string name = worker_name(i);
  workers_.at(i) = std::make_unique<ChildProcess>();
  std::vector<std::string> argv = {BuildDir() + "/worker/eft-worker", "--controller", controller_address(), "--name",
                                   name, "--slots", std::to_string(options_.slots_per_worker), "--work-dir",
                                   dir_ + "/work/" + name, "--address", "127.0.0.1"};
  if (options_.worker_metrics) {
    argv.insert(argv.end(), {"--metrics", "127.0.0.1:" + std::to_string(worker_metrics_port(i))});
  }
  const bool own_snapshot_dir =
      std::any_of(options_.worker_args.begin(), options_.worker_args.end(),
                  [](const std::string& a) { return a.rfind("--snapshot-dir", 0) == 0; });
  if (!own_snapshot_dir) argv.insert(argv.end(), {"--snapshot-dir", worker_snapshot_dir(i)});
  argv.insert(argv.end(), options_.worker_args.begin(), options_.worker_args.end());
  std::map<std::string, std::string> env = {{"CUDA_VISIBLE_DEVICES", ""}};
  for (const auto& [k, v] : options_.worker_env) env[k] = v;
  ASSERT_TRUE(workers_[i]->Start(argv, env, dir_ + "/" + name + ".log"));
}

void TestCluster::KillWorker(int i, int sig) {
  workers_.at(i)->Signal(sig);
  workers_[i]->Wait(std::chrono::seconds(10));
  if (sig == SIGKILL) {
    std::error_code ec;
    fs::remove_all(worker_snapshot_dir(i), ec);
  }
}

void TestCluster::StartAll() {
  StartController();
  for (int i = 0; i < options_.workers; ++i) StartWorker(i);
  ASSERT_TRUE(WaitForReadyNodes(options_.workers, std::chrono::seconds(10)));
}

bool TestCluster::WaitForReadyNodes(int n, std::chrono::milliseconds timeout) {
  return WaitUntil(
      [&] {
        grpc::ClientContext ctx;
        AddToken(&ctx);
        v1::ListNodesResponse resp;
        if (!nodes_->ListNodes(&ctx, v1::ListNodesRequest(), &resp).ok()) return false;
        int ready = 0;
        for (const auto& node : resp.nodes()) ready += node.state() == v1::NODE_STATE_READY;
        return ready >= n;
      },
      timeout);
}

grpc::Status TestCluster::Submit(const v1::JobSpec& spec, v1::Job* job) {
  grpc::ClientContext ctx;
  AddToken(&ctx);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  return jobs_->SubmitJob(&ctx, req, job);
}

v1::Job TestCluster::GetJob(const std::string& id) {
  grpc::ClientContext ctx;
  AddToken(&ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetJobRequest req;
  req.set_id(id);
  v1::Job job;
  grpc::Status s = jobs_->GetJob(&ctx, req, &job);
  if (!s.ok()) job.set_reason("GetJob failed: " + s.error_message());
  return job;
}

v1::Job TestCluster::WaitForJob(const std::string& id, const std::function<bool(const v1::Job&)>& pred,
                                std::chrono::milliseconds timeout) {
  v1::Job job;
  WaitUntil(
      [&] {
        job = GetJob(id);
        return pred(job);
      },
      timeout);
  return job;
}

v1::Node TestCluster::GetNode(const std::string& name) {
  grpc::ClientContext ctx;
  AddToken(&ctx);
  v1::ListNodesResponse resp;
  nodes_->ListNodes(&ctx, v1::ListNodesRequest(), &resp);
  for (const auto& n : resp.nodes()) {
    if (n.name() == name) return n;
  }
  return v1::Node();
}

v1::JobSpec TestCluster::WorkloadJob(const std::string& name, int nodes_min, int nodes_max, int steps, int step_ms,
                                     int checkpoint_every, const std::vector<std::string>& extra) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.mutable_resources()->mutable_nodes()->set_min(nodes_min);
  spec.mutable_resources()->mutable_nodes()->set_max(nodes_max);
  spec.mutable_resources()->set_gpus_per_node(options_.slots_per_worker);
  spec.mutable_fault_tolerance()->set_stop_grace_seconds(3);
  std::string ckpt = checkpoint_root() + "/" + name;
  spec.mutable_checkpoint()->set_dir(ckpt);
  for (const std::string& a :
       {WorkloadBinary(), std::string("--steps"), std::to_string(steps), std::string("--step-ms"),
        std::to_string(step_ms), std::string("--checkpoint-every"), std::to_string(checkpoint_every),
        std::string("--checkpoint-dir"), ckpt, std::string("--result"), ResultPath(name), std::string("--pid-dir"),
        dir_ + "/pids/" + name}) {
    spec.add_command(a);
  }
  for (const auto& a : extra) spec.add_command(a);
  return spec;
}

std::vector<pid_t> TestCluster::RankPids(const std::string& job_name, int attempt) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir_ + "/pids/" + job_name + "/attempt-" + std::to_string(attempt), ec)) {
    pids.push_back(static_cast<pid_t>(std::atoi(ReadFile(f.path().string()).c_str())));
  }
  return pids;
}

}  // namespace eft::testing
