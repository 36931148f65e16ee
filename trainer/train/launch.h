// Where a rank learns who it is: the worker's (and torchrun's) variables RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; or Slurm's SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NTASKS_PER_NODE with MASTER_ADDR/MASTER_PORT (or, for the address, the first
// host of SLURM_JOB_NODELIST). No variables at all: a single process, world size 1.
//
// SpawnLocalRanks is `eft-train train --nproc N`: it re-executes this program N times with the
// variables set, forwards SIGTERM/SIGINT, and fails fast: when one rank fails the others are
// stopped. Its exit code is the first failing rank's, or 0.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/parallel/communicator.h"

namespace eft::trainer {

struct RankEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string job_id;
  int attempt = 0;
  std::string resume_from;
  int events_fd = -1;
  std::string source;  // "eft-worker", "torchrun", "slurm" or "single process"
  GpuCollectives gpu_collectives = GpuCollectives::kNccl;  // EFT_GPU_COLLECTIVES
  // Where rank traffic goes (docs/architecture.md, "Rank traffic and the node's address").
  std::string node_name;     // EFT_NODE_NAME; "": this host's name
  std::string node_address;  // EFT_NODE_ADDRESS, numeric; "": not given (the collectives choose)
  std::optional<bool> nodes_share_loopback;  // EFT_NODES_SHARE_LOOPBACK; nullopt: not known
  bool gloo_interface_given = false;         // GLOO_SOCKET_IFNAME is set
};

// `env` defaults to the process environment (tests pass their own).
Result<RankEnv> RankEnvFromEnvironment(const std::map<std::string, std::string>* env = nullptr);

// The rule of net::CheckRankAddresses for this rank, before its rendezvous: `gloo` when its
// collectives are Gloo's (CPU ranks, or GPU ranks staged through host memory), which without a node
// address bind what the host name resolves to (unless GLOO_SOCKET_IFNAME says otherwise), so that
// address is checked then. FAILED_PRECONDITION (exit 2, bad input) with one line naming the fix.
Status CheckRankAddresses(const RankEnv& env, bool gloo);

// The first host of a Slurm host list: "gpu[03-05,07],cpu1" -> "gpu03".
std::string FirstSlurmHost(const std::string& nodelist);

int SpawnLocalRanks(int nproc, const std::vector<std::string>& argv);

}  // namespace eft::trainer
