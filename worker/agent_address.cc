// The node's address, resolved again at each re-registration (docs/architecture.md, "Rank traffic and
// the node's address"): a worker whose host name now resolves elsewhere (a container reconnected to
// its network, a pod given a new IP) would otherwise tell the controller, its ranks and its snapshot
// peers an address nothing answers at any more.
#include <cstdlib>
#include <filesystem>

#include "common/logging.h"
#include "common/net_address.h"
#include "worker/agent.h"

namespace eft::worker {
namespace {

std::string OwnDirectory() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

}  // namespace

NodeFacts WorkerAgent::CurrentNodeFacts() {
  NodeFacts node{config_.name, config_.gpu_ids, OwnDirectory(), std::nullopt, "", "", std::nullopt, ""};
  {
    MutexLock lock(&mu_);
    node.address = node_address_;
    node.interface = node_interface_;
  }
  if (const char* path = std::getenv("PATH")) node.path = path;
  if (const char* ifname = std::getenv("NCCL_SOCKET_IFNAME")) node.nccl_socket_ifname = ifname;
  return node;
}

void WorkerAgent::RefreshNodeAddress() {
  const bool data_given = !config_.data_address.empty();
  const std::string& given = data_given ? config_.data_address : config_.address;
  Result<std::string> now = deps_.resolve_address(given);
  std::string before;
  {
    MutexLock lock(&mu_);
    before = node_address_;
  }
  if (!now.ok()) {
    EFT_LOG(WARNING) << "cannot resolve " << given << " again (" << now.status().message() << "): keeping " << before;
    return;
  }
  if (*now == before) return;
  Result<std::string> interface = net::InterfaceOf(*now);
  EFT_LOG(WARNING) << (data_given ? "--data-address " : "--address ") << given << " now resolves to " << *now
                   << " (was " << before << "): rank traffic of the ranks started from now on goes there"
                   << (snapshot_server_ ? ", and so does the snapshot server" : "");
  {
    MutexLock lock(&mu_);
    node_address_ = *now;
    node_interface_ = interface.ok() ? *interface : "";
  }
  if (!snapshot_server_) return;
  // The new server first (the same port if it is free there), then the old one goes.
  SnapshotAuth auth{endpoint_.join_token, endpoint_.tls};
  auto moved = SnapshotServer::Start(snapshots_.get(), *now, snapshot_server_->port(), auth);
  if (!moved.ok()) moved = SnapshotServer::Start(snapshots_.get(), *now, config_.snapshot_port, auth);
  if (!moved.ok()) {
    EFT_LOG(ERROR) << "memory snapshots: cannot listen on " << *now << " (" << moved.status().message()
                   << "); peers' replicas keep going to " << before;
    return;
  }
  snapshot_server_->Shutdown();
  snapshot_server_ = std::move(moved).value();
}

}  // namespace eft::worker
