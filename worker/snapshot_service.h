// Memory snapshots between workers (docs/checkpoints.md, "Memory snapshots"): the SnapshotService
// every worker serves on its data address (SnapshotServer), and the replicator that pushes each of
// this node's own snapshots to the peers the controller chose (AttemptSpec.snapshot_peers).
//
// Security, as for the workers' calls to the controller (docs/auth.md): when the worker has a join
// token, every PushSnapshot must carry "authorization: Bearer <join token>" (compared in constant
// time) or is answered UNAUTHENTICATED, and the replicator sends it. TLS: a worker with a
// certificate and key (--tls-cert/--tls-key) serves TLS with them and pushes over TLS, presenting
// them and checking the peer's certificate against --tls-ca (else the system's roots) for the peer's
// address; a worker without them serves and pushes plaintext. Every worker of a cluster must be set
// up alike.
//
// A push is one client stream: the first chunk carries the header (with the file's size and
// CRC-32C, from the rank's event), then the bytes in chunks of kChunkBytes. The receiver writes
// them into SnapshotStore::BeginReplica's temporary file and answers accepted=false with the
// reason when it has no room, the bytes are damaged, or it no longer keeps the attempt.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/clock.h"
#include "common/grpc/credentials.h"
#include "common/mutex.h"
#include "common/rank_protocol.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "eft/v1/agent.grpc.pb.h"
#include "worker/snapshot_store.h"

namespace eft::worker {

inline constexpr size_t kSnapshotChunkBytes = 2 << 20;

// How both ends authenticate and encrypt (see the top of this file).
struct SnapshotAuth {
  std::string join_token;  // "": no token required or sent
  ClientTls tls;           // the worker's: TLS between workers only with cert_chain_pem and private_key_pem
};

// The "host:port" gRPC listens on for `host` (a numeric IPv6 address in brackets).
std::string ListenAddress(const std::string& host, int port);

class SnapshotServer {
 public:
  // Listens on `host`:`port` (0: any free port). `store` is not owned and must outlive the server.
  static Result<std::unique_ptr<SnapshotServer>> Start(SnapshotStore* store, const std::string& host, int port,
                                                      const SnapshotAuth& auth);
  ~SnapshotServer();  // Shutdown()
  int port() const { return port_; }
  // Ends the transfers in progress (they are abandoned) and stops serving.
  void Shutdown();

 private:
  class Service;
  SnapshotServer() = default;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// What the replicator has done since it started (the worker's /metrics).
struct ReplicatorStats {
  std::map<std::string, uint64_t> pushes;  // by result: "ok", "refused", "failed"
  double last_push_seconds = 0;            // the newest accepted push
  uint64_t pushed_bytes = 0;               // of accepted pushes
};

class SnapshotReplicator {
 public:
  struct Options {
    std::string node_name;  // this node: SnapshotHeader.from_node
    SnapshotAuth auth;
    int threads = 2;  // pushes at a time, each to a different peer
    // A push's deadline: `deadline_base` plus its size at `min_rate` bytes/s.
    std::chrono::milliseconds deadline_base{30000};
    double min_rate = 20e6;
    int tries = 3;  // per snapshot and peer, for failures (a refusal is final)
    std::chrono::milliseconds retry_pause{1000};
    // A peer refused a snapshot: called on a pushing thread, once when a (rank, peer) starts being
    // refused (not for each of a series of refusals), so a job's events are not flooded.
    std::function<void(const v1::RankKey& rank, const rank::MemorySnapshotRefusedEvent& refusal)> on_refused;
  };

  SnapshotReplicator(SnapshotStore* store, Options options);  // `store` not owned
  ~SnapshotReplicator();  // Stop()
  void Start();
  // Cancels the pushes in progress and joins the threads; what is queued is dropped.
  void Stop() EXCLUDES(mu_);

  // A snapshot of this node's own rank was taken over: send it to each peer, after any newer one
  // and instead of an older one of the same rank still waiting.
  void Enqueue(const AttemptId& attempt, int rank, int64_t step, const std::vector<v1::SnapshotPeer>& peers)
      EXCLUDES(mu_);
  ReplicatorStats Stats() const EXCLUDES(mu_);

 private:
  using ShardId = std::pair<AttemptId, int>;  // attempt, rank
  struct Pending {
    int64_t step = 0;
    int tries = 0;
    SteadyTime not_before;
  };
  struct Peer {
    std::string name;
    std::map<ShardId, Pending> pending;
    bool busy = false;
    std::shared_ptr<grpc::Channel> channel;  // dropped after a failure: the next push reconnects
    // Rate-limited logging of failures.
    bool failing = false;
    SteadyTime last_logged;
    int unlogged = 0;
  };
  enum class Result { kOk, kRefused, kFailed, kGone };
  struct Outcome {
    Result result = Result::kFailed;
    std::string reason;
    int64_t bytes = 0;
  };

  void Loop() EXCLUDES(mu_);
  // Picks the newest due item of a peer not busy; false when none (then *wake: the next due time).
  bool Pick(std::string* address, ShardId* shard, Pending* item, SteadyTime* wake) REQUIRES(mu_);
  Outcome Push(const std::string& address, const ShardId& shard, int64_t step) EXCLUDES(mu_);
  void Finish(const std::string& address, const ShardId& shard, const Pending& item, const Outcome& outcome,
              double seconds) EXCLUDES(mu_);

  SnapshotStore* store_;
  const Options options_;
  std::vector<std::thread> threads_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::map<std::string, Peer> peers_ GUARDED_BY(mu_);  // by address
  std::set<grpc::ClientContext*> in_flight_ GUARDED_BY(mu_);
  std::set<std::pair<std::string, ShardId>> refusing_ GUARDED_BY(mu_);  // (peer address, shard) refused last time
  ReplicatorStats stats_ GUARDED_BY(mu_);
};

}  // namespace eft::worker
