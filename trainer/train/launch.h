// Where a rank learns who it is: the worker's (and torchrun's) variables RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; or Slurm's SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NTASKS_PER_NODE with MASTER_ADDR/MASTER_PORT (or, for the address, the first
// host of SLURM_JOB_NODELIST). No variables at all: a single process, world size 1.
//
// SpawnLocalRanks is `eft-train train --nproc N`: it re-executes this program N times with the
// variables set (MASTER_PORT a free port of 127.0.0.1), forwards SIGTERM/SIGINT, and fails fast:
// when one rank fails the others are stopped. Its exit code is the first failing rank's, or 0. When
// rank 0 finds its port taken (exit 76, before anything is trained), all ranks start again on
// another port, up to LocalLaunchOptions::port_tries launches in all.
#pragma once

#include <functional>
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
  std::string snapshot_dir;  // EFT_SNAPSHOT_DIR: where memory snapshots go; "": none taken
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

struct LocalLaunchOptions {
  std::string program;            // what each rank runs; "": this program (/proc/self/exe)
  std::function<int()> pick_port;  // MASTER_PORT of each launch; empty: PickFreeLoopbackPort
  int port_tries = 3;             // launches when rank 0's port is taken each time
};

int SpawnLocalRanks(int nproc, const std::vector<std::string>& argv, const LocalLaunchOptions& options = {});

}  // namespace eft::trainer
