// WorkerConfig: every tunable of eft-worker, with its default, and slot (GPU) discovery.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/grpc/credentials.h"
#include "common/status.h"

namespace eft {
class DaemonSettings;
}

namespace eft::worker {

// How to reach the controller (docs/auth.md): its address, the join token every AgentService call
// carries ("authorization: Bearer <token>"; empty: none), and TLS.
struct ControllerEndpoint {
  std::string address;
  std::string join_token;
  ClientTls tls;  // disabled: plaintext
};

struct WorkerConfig {
  std::string controller = "127.0.0.1:7070";
  std::string name;       // default: the host name
  // How other nodes reach this one, as given (shown by eftctl; the data address unless data_address is
  // set); default: the host name.
  std::string address;
  // Where rank traffic goes when it is not `address` (a separate data network): an IP address, a host
  // name, or the name of an interface of this host (its IPv4 address). Empty: `address`.
  std::string data_address;
  std::string work_dir;   // rank logs and the rank ledger; default: /tmp/eft-worker-<name>
  int slots = 0;          // 0: one per visible GPU, else 1 (CPU)
  // GPU ids by slot (CUDA_VISIBLE_DEVICES of the rank in that slot); empty on a CPU node.
  std::vector<std::string> gpu_ids;
  std::chrono::milliseconds heartbeat_interval{1000};  // until the controller says otherwise
  std::chrono::milliseconds rpc_timeout{5000};
  // Riding out a short partition (docs/architecture.md, "Lease"): while the lease runs, a heartbeat
  // unanswered after a third of it is abandoned with its connection (whose TCP retransmissions back
  // off to seconds), and the next goes out reconnect_pause later on a new connection, whose attempts
  // give up after connect_timeout. And while a heartbeat goes unanswered, another attempt starts on
  // a new connection every hedge_after (worker/hedged_call.h; 0: never). So after a cut heals, a
  // heartbeat is on the wire within about hedge_after, not at TCP's next retransmission.
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds reconnect_pause{200};
  std::chrono::milliseconds hedge_after{100};
  std::chrono::milliseconds log_push_interval{500};
  // How often the agent looks at its lease (agent.h): it kills its ranks at most this long after
  // the lease ran out, however long an RPC to the controller hangs.
  std::chrono::milliseconds lease_check_interval{100};
  // Serve /metrics (and /healthz) on HOST:PORT; empty: off.
  std::string metrics_address;
  // Queried for GPU metrics (when metrics are on and the node has GPUs), every gpu_poll_interval.
  std::string nvidia_smi = "nvidia-smi";
  std::chrono::milliseconds gpu_poll_interval{5000};
  std::chrono::milliseconds gpu_query_timeout{3000};
  std::string version = "0.1.0";
  // Memory snapshots (worker/snapshot_store.h): the directory (in memory: tmpfs) holding this node's
  // own ranks' snapshots and other nodes' replicas; empty: snapshots are off (no SnapshotService,
  // RegisterRequest.snapshot_port 0, no EFT_SNAPSHOT_DIR). FinalizeWorkerConfig fills it unless
  // `snapshots` is false: /dev/shm/eft-worker-<name>, or <work_dir>/snapshots without /dev/shm.
  bool snapshots = true;
  std::string snapshot_dir;
  int snapshot_memory_mb = 0;       // the budget as given; 0: a quarter of MemTotal
  int64_t snapshot_budget_bytes = 0;  // the budget (FinalizeWorkerConfig); 0: the same default
  int snapshot_port = 0;            // the SnapshotService's port on the data address; 0: any free one
  // Authentication and TLS towards the controller (docs/auth.md); address = `controller`.
  ControllerEndpoint endpoint;

  // Found by FinalizeWorkerConfig, once (docs/architecture.md, "Rank traffic and the node's address"):
  // the data address (or `address`) as one numeric address, which every rank here binds to and which
  // is MASTER_ADDR when rank 0 runs here (EFT_NODE_ADDRESS); the interface that holds it (NCCL's
  // socket interface); and this process's network stack (net::NetworkStackId). Empty in configs
  // built by hand (tests): the ranks then pick their interfaces as they would without eft.
  std::string node_address;
  std::string node_interface;
  std::string network_stack;
};

// GPUs this process may use: CUDA_VISIBLE_DEVICES when set (a comma list; "" or "-1" means none),
// else one per "GPU n:" line of `nvidia-smi -L`, else none.
std::vector<std::string> DiscoverGpus();

// Fills defaults (name, address, work_dir, slots and gpu_ids) and checks them; resolves the data
// address (node_address, node_interface) and finds the network stack. INVALID_ARGUMENT naming the
// setting when the data address does not resolve.
Status FinalizeWorkerConfig(WorkerConfig* config);

// The warning a worker whose data address is loopback logs at start (one line); "" otherwise.
std::string LoopbackWarning(const WorkerConfig& config);

// eft-worker's settings as given on the command line and in --config worker.yaml (deploy/config/;
// keys are the flags' names): WorkerConfig itself, and the files that become its endpoint.
struct WorkerSettings {
  WorkerConfig config;
  std::string log_level;        // debug|info|warning|error; "": the default (info)
  std::string join_token_file;  // "": $EFT_JOIN_TOKEN, else none
  bool tls = false;             // TLS with the system's roots; implied by any of the files below
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
};

// Registers every setting of *settings with `daemon_settings` (key and flag of each).
void AddWorkerSettings(DaemonSettings* daemon_settings, WorkerSettings* settings);

// The WorkerConfig to run with: the join token (the first non-empty line of the file, as the
// controller reads it; else $EFT_JOIN_TOKEN) and the TLS files read into `endpoint`, and the
// defaults filled in (FinalizeWorkerConfig). INVALID_ARGUMENT naming the setting otherwise.
Result<WorkerConfig> ResolveWorkerConfig(const WorkerSettings& settings);

}  // namespace eft::worker
