#include "worker/worker_config.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "common/file_util.h"
#include "common/net_address.h"
#include "common/crc32c.h"
#include "worker/snapshot_store.h"

namespace eft::worker {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

Status LoadJoinToken(const std::string& file, ControllerEndpoint* endpoint) {
  if (file.empty()) {
    if (const char* env = std::getenv("EFT_JOIN_TOKEN"); env && *env) endpoint->join_token = Trim(env);
    return Status::Ok();
  }
  Result<std::string> text = ReadFileToString(file);
  if (!text.ok()) return Status::InvalidArgument("--join-token-file " + file + ": cannot read it");
  std::istringstream lines(*text);  // the first non-empty line, as the controller reads it
  for (std::string line; std::getline(lines, line) && endpoint->join_token.empty();) {
    endpoint->join_token = Trim(line);
  }
  if (endpoint->join_token.empty()) return Status::InvalidArgument("--join-token-file " + file + ": the file is empty");
  return Status::Ok();
}

}  // namespace

std::vector<std::string> DiscoverGpus() {
  std::vector<std::string> ids;
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string value = env;
    if (value.empty() || value == "-1") return ids;
    std::stringstream ss(value);
    std::string id;
    while (std::getline(ss, id, ',')) {
      if (!id.empty()) ids.push_back(id);
    }
    return ids;
  }
  FILE* p = ::popen("nvidia-smi -L 2>/dev/null", "r");
  if (p == nullptr) return ids;
  char line[512];
  while (std::fgets(line, sizeof(line), p)) {
    int index = -1;
    if (std::sscanf(line, "GPU %d:", &index) == 1 && index >= 0) ids.push_back(std::to_string(index));
  }
  ::pclose(p);
  return ids;
}

Status FinalizeWorkerConfig(WorkerConfig* c) {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  if (c->name.empty()) c->name = host;
  if (c->address.empty()) c->address = host;
  if (c->work_dir.empty()) c->work_dir = "/tmp/eft-worker-" + c->name;
  if (c->controller.empty()) return Status::InvalidArgument("--controller: must be HOST:PORT");
  for (char ch : c->name) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) {
      return Status::InvalidArgument("--name '" + c->name + "': use letters, digits, '-', '_' and '.' only");
    }
  }
  const std::string& data = c->data_address.empty() ? c->address : c->data_address;
  Result<std::string> numeric = net::ResolveNodeAddress(data);
  if (!numeric.ok()) {
    return Status::InvalidArgument((c->data_address.empty() ? "--address " : "--data-address ") + data +
                                   ": cannot tell the address rank traffic uses: " + numeric.status().message());
  }
  c->node_address = *numeric;
  // NCCL's socket interface. An address no interface holds (a NAT's) has none: NCCL then picks one.
  Result<std::string> interface = net::InterfaceOf(c->node_address);
  c->node_interface = interface.ok() ? *interface : "";
  c->network_stack = net::NetworkStackId();
  if (c->snapshot_memory_mb < 0) {
    return Status::InvalidArgument("--snapshot-memory-mb: must be >= 0 (0: a quarter of the node's memory)");
  }
  if (c->snapshot_port < 0 || c->snapshot_port > 65535) return Status::InvalidArgument("--snapshot-port: not a port");
  if (!c->snapshots) {
    c->snapshot_dir.clear();
  } else if (c->snapshot_dir.empty()) {
    // One directory per work dir (which one worker holds at a time, work_dir_lock.h), so two workers
    // of one name on a host (tests, clusters in one machine) never wipe each other's snapshots.
    std::error_code ec;
    const std::string work_dir = std::filesystem::absolute(c->work_dir, ec).lexically_normal().string();
    char tag[16];
    std::snprintf(tag, sizeof tag, "%08x", Crc32c(work_dir.data(), work_dir.size()));
    c->snapshot_dir = std::filesystem::is_directory("/dev/shm", ec)
                          ? "/dev/shm/eft-worker-" + c->name + "-" + tag
                          : c->work_dir + "/snapshots";
  }
  c->snapshot_budget_bytes =
      c->snapshot_memory_mb > 0 ? int64_t{c->snapshot_memory_mb} << 20 : DefaultSnapshotBudget();
  std::vector<std::string> gpus = DiscoverGpus();
  if (c->slots < 0) return Status::InvalidArgument("--slots: must be >= 1");
  if (!gpus.empty()) {
    if (c->slots > static_cast<int>(gpus.size())) {
      return Status::InvalidArgument("--slots " + std::to_string(c->slots) + ": only " + std::to_string(gpus.size()) +
                                     " GPUs are visible (CUDA_VISIBLE_DEVICES / nvidia-smi)");
    }
    if (c->slots == 0) c->slots = static_cast<int>(gpus.size());
    gpus.resize(c->slots);
    c->gpu_ids = gpus;
  } else if (c->slots == 0) {
    c->slots = 1;
  }
  return Status::Ok();
}

std::string LoopbackWarning(const WorkerConfig& c) {
  if (c.node_address.empty() || !net::IsLoopback(c.node_address)) return "";
  const std::string given = c.data_address.empty() ? "--address " + c.address : "--data-address " + c.data_address;
  return "rank traffic address " + c.node_address + " (" + given +
         ") is a loopback address: jobs on this node alone, or on workers of this host only, work; ranks of "
         "jobs that span nodes on other hosts will refuse it. Set --address (or --data-address) to an address "
         "other hosts reach";
}

Result<WorkerConfig> ResolveWorkerConfig(const WorkerSettings& s) {
  WorkerConfig c = s.config;
  EFT_RETURN_IF_ERROR(LoadJoinToken(s.join_token_file, &c.endpoint));
  if (s.tls_cert.empty() != s.tls_key.empty()) return Status::InvalidArgument("--tls-cert and --tls-key go together");
  Result<ClientTls> tls = LoadClientTls(s.tls, s.tls_ca, s.tls_cert, s.tls_key);
  if (!tls.ok()) return Status::InvalidArgument("cannot read the TLS files (" + tls.status().message() + ")");
  c.endpoint.tls = std::move(tls).value();
  EFT_RETURN_IF_ERROR(FinalizeWorkerConfig(&c));
  return c;
}

}  // namespace eft::worker
