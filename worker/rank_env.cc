#include "worker/rank_env.h"

#include "common/rank_protocol.h"
#include "spec/job_spec.h"

namespace eft::worker {
namespace {

constexpr char kNcclSocketIfname[] = "NCCL_SOCKET_IFNAME";

}  // namespace

std::map<std::string, std::string> BuildRankEnv(const v1::RankAssignment& a, const v1::JobSpec& spec,
                                                const NodeFacts& node) {
  namespace env = rank::env;
  std::map<std::string, std::string> out(a.env().begin(), a.env().end());
  const v1::RankKey& k = a.key();
  out[env::kRank] = std::to_string(k.rank());
  out[env::kLocalRank] = std::to_string(a.local_rank());
  out[env::kWorldSize] = std::to_string(a.world_size());
  out[env::kLocalWorldSize] = std::to_string(a.local_world_size());
  out[env::kGroupRank] = std::to_string(a.local_world_size() ? k.rank() / a.local_world_size() : 0);
  out[env::kRoleRank] = out[env::kRank];
  out[env::kMasterAddr] = a.master_addr();
  out[env::kMasterPort] = std::to_string(a.master_port());
  // torchrun counts restarts from 0; eft numbers attempts from 1.
  out[env::kRestartCount] = std::to_string(k.attempt() - 1);
  out[env::kRunId] = k.job_id();
  out[env::kJobId] = k.job_id();
  out[env::kAttempt] = std::to_string(k.attempt());
  out[env::kNodeName] = node.name;
  out[env::kJobSpec] = spec::JobSpecToJson(spec).dump();
  out[env::kResumeFrom] = a.resume_from();
  // One GPU per rank; on a CPU node (or a slot without a GPU) none at all, so that frameworks do not
  // grab a device by accident.
  out[env::kCudaVisibleDevices] =
      a.slot() >= 0 && a.slot() < static_cast<int>(node.gpu_ids.size()) ? node.gpu_ids[a.slot()] : "";
  // Rank traffic on the node's address (docs/architecture.md, "Rank traffic and the node's address"):
  // Gloo binds EFT_NODE_ADDRESS, NCCL the interface holding it ("=": that name exactly, not a prefix).
  if (!node.address.empty()) out[env::kNodeAddress] = node.address;
  if (a.has_nodes_share_loopback()) out[env::kNodesShareLoopback] = a.nodes_share_loopback() ? "1" : "0";
  if (!node.interface.empty() && !node.nccl_socket_ifname.has_value() && !out.count(kNcclSocketIfname)) {
    out[kNcclSocketIfname] = "=" + node.interface;
  }
  if (node.snapshot_dir.empty()) {
    out.erase(env::kSnapshotDir);  // a snapshot nobody takes over would only fill the node's memory
  } else {
    out[env::kSnapshotDir] = node.snapshot_dir;
  }
  if (!node.program_dir.empty()) out["PATH"] = node.program_dir + ":" + node.path.value_or("/usr/bin:/bin");
  return out;
}

}  // namespace eft::worker
