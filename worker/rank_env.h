// BuildRankEnv: the environment eft-worker adds to its own for a rank, in one place. The names and
// their meaning are the rank protocol's (common/rank_protocol.h, docs/architecture.md).
//
// The job's spec.env entries (RankAssignment.env) come first; everything a launcher sets is written
// over them, so a job can never change a rank's identity. NCCL_SOCKET_IFNAME is the one exception: it
// is set from the node's address only where neither the job nor the worker's environment sets it.
// EFT_EVENTS_FD is not here: the process supervisor sets it, because it alone knows the fd.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "eft/v1/agent.pb.h"

namespace eft::worker {

// What the rank environment needs to know about the node and the worker process.
struct NodeFacts {
  std::string name;                  // EFT_NODE_NAME
  std::vector<std::string> gpu_ids;  // by slot: the rank's CUDA_VISIBLE_DEVICES; empty on a CPU node
  // eft-worker's own directory, put first on the rank's PATH so that the eft-train installed next to
  // it wins over another one; empty: PATH is inherited unchanged.
  std::string program_dir;
  std::optional<std::string> path;  // the worker's PATH (nullopt: unset)
  // The node's numeric data address (EFT_NODE_ADDRESS) and the interface that holds it, which becomes
  // NCCL's socket interface unless the job's spec.env or the worker's own environment
  // (nccl_socket_ifname) chose one. Empty: not known, the ranks pick their interfaces themselves.
  std::string address;
  std::string interface;
  std::optional<std::string> nccl_socket_ifname;  // the worker's NCCL_SOCKET_IFNAME (nullopt: unset)
  // The directory the worker keeps for the memory snapshots of this rank's attempt (EFT_SNAPSHOT_DIR,
  // worker/snapshot_store.h); empty: snapshots are off on this node, and the rank takes none.
  std::string snapshot_dir;
};

// `spec` is the attempt's AttemptSpec.spec, the normalized job spec. A rank is another process, so
// EFT_JOB_SPEC carries it as text: its proto JSON mapping (spec::JobSpecToJson), which eft-train reads
// back with spec::JobSpecFromJson, the same schema at both ends.
std::map<std::string, std::string> BuildRankEnv(const v1::RankAssignment& assignment, const v1::JobSpec& spec,
                                                const NodeFacts& node);

}  // namespace eft::worker
