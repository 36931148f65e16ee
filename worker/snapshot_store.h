// SnapshotStore: the memory snapshots this node holds (docs/checkpoints.md, "Memory snapshots"): its
// own ranks' files and replicas pushed by other nodes, under one directory in memory (tmpfs):
//
//   <root>/job-J/attempt-A/incoming/                       EFT_SNAPSHOT_DIR of attempt A's ranks here
//   <root>/job-J/attempt-A/held/step-S/rank-RRRRR-of-WWWWW.safetensors   taken over or received
//   <root>/staging/                                        hard links to shards being staged
//
// Contract:
// - TakeOver: a rank's file named by its memory_snapshot event (common/memory_snapshot.h) is renamed
//   from incoming/ into held/ at once, so the rank's own pruning (it keeps two files) never races
//   the worker. It must be exactly <incoming>/step-S/<ShardFileName> of the reporting rank and have
//   the reported size; otherwise, over the budget, or for an attempt no longer kept, it is refused:
//   deleted (when it is where it should be) and an error returned, which the agent reports as a
//   memory_snapshot_refused event.
// - Replicas (BeginReplica): written to "<name>.partial" while received, checked against the
//   header's size and CRC-32C, renamed when complete; the budget is reserved for the whole file when
//   the transfer begins. One transfer per shard at a time, and only of a step newer than the one held.
// - Retention, per (job, attempt, rank): own files, the newest two steps; replicas, the newest
//   complete one and the one being received (the older is dropped when a newer one is complete).
//   The controller's keep step (SetKeepSteps: the newest step held whole with every replica) takes
//   the place of the older own file, and is kept beside a replica's newest, so the survivors of a
//   node's loss share a step however far replication lags.
//   Besides, while the budget has room, an own shard keeps its files taken over within `own_history`
//   before its newest (SetOwnHistory; the agent sets twice the lease): when another node's worker
//   freezes while its ranks train on, the other nodes' newest steps run ahead of what the frozen one
//   had replicated, for as long as it takes to declare it lost, and with fast steps that is more than
//   two files (docs/checkpoints.md, "What survives what"). These are dropped first, oldest first,
//   whenever room is needed, so they never cause a refusal, and they are not part of the bound.
//   So a node holds at most 2 snapshots per shard (3 for a replica shard while one is received and
//   the keep step lags), and its memory bound is
//       2 x S x (L + P)   bytes
//   for shards of S bytes, L ranks of its own and P ranks of peers replicating to it (P is L times
//   the number of peers sending here, about checkpoint.memory_replicas x L), plus the file each rank
//   is writing until it is taken over. Everything held or being received counts against the budget
//   (--snapshot-memory-mb; default: a quarter of MemTotal), so size it to at least 2 x S x (L + P).
// - Keep(attempts): every attempt not listed is deleted with its directories, and later pushes for
//   it are refused. One never listed yet is spared for `unlisted_grace` after the store first saw
//   it: a replica may arrive before the controller's first reply naming its attempt.
// - Stage(order): copies the listed ranks' held files into order.dir with snapshot::StageShard, each
//   verified against its record; the files are hard-linked under staging/ first, so retention or
//   Keep deleting them meanwhile does not break the copy.
// - Open() deletes what a previous worker left (job-* and staging/ under the root, nothing else);
//   Close() deletes the same (a worker that stops leaves no memory behind) and refuses everything
//   from then on.
//
// Thread-safe: `mu_` guards the index; file bytes are copied and received without it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/memory_snapshot.h"
#include "common/mutex.h"
#include "common/rank_protocol.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "eft/v1/agent.pb.h"
#include "worker/reconcile.h"

namespace eft::worker {

// A quarter of MemTotal in `meminfo` (/proc/meminfo's format); 1 GiB when it cannot be read.
int64_t DefaultSnapshotBudget(const std::string& meminfo = "/proc/meminfo");

// `budget`, or less where the filesystem of `dir` (made if missing) is smaller: its size then, and
// *why says so in a line for the log (a container's /dev/shm is 64 MiB unless told otherwise, and
// snapshots beyond it would fail with "No space left on device" instead of being refused cleanly).
int64_t FitSnapshotBudget(int64_t budget, const std::string& dir, std::string* why);

struct SnapshotStoreOptions {
  std::string root;
  int64_t budget_bytes = 0;
  const Clock* clock = nullptr;  // not owned; unset: RealClock::Get()
  std::chrono::milliseconds unlisted_grace{60000};
};

struct SnapshotStoreStats {
  int64_t own_bytes = 0;
  int64_t replica_bytes = 0;
  int64_t receiving_bytes = 0;  // reserved by transfers in progress
  int64_t budget_bytes = 0;
};

// A held own shard opened for reading: the file stays readable even if it is dropped meanwhile.
class HeldShardReader {
 public:
  HeldShardReader(int fd, snapshot::ShardRecord record) : fd_(fd), record_(record) {}
  ~HeldShardReader();
  HeldShardReader(const HeldShardReader&) = delete;
  HeldShardReader& operator=(const HeldShardReader&) = delete;
  const snapshot::ShardRecord& record() const { return record_; }
  // Up to `max` bytes into *out ("" at the end).
  Status Read(size_t max, std::string* out);

 private:
  int fd_;
  snapshot::ShardRecord record_;
};

class SnapshotStore {
 public:
  class Receiver;

  // Creates the root and deletes a previous worker's leftovers there.
  static Result<std::unique_ptr<SnapshotStore>> Open(SnapshotStoreOptions options);
  ~SnapshotStore();
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  const std::string& root() const { return options_.root; }
  int64_t budget_bytes() const { return options_.budget_bytes; }

  // The attempt's incoming dir, created: its ranks' EFT_SNAPSHOT_DIR.
  Result<std::string> IncomingDir(const AttemptId& attempt) EXCLUDES(mu_);
  // See the top of this file. `rank`: the rank whose events pipe carried `event`.
  Status TakeOver(const AttemptId& attempt, int rank, const rank::MemorySnapshotEvent& event) EXCLUDES(mu_);
  // A replica transfer, or why it is refused: ResourceExhausted (no room), FailedPrecondition (an
  // attempt no longer kept), AlreadyExists (this step or a newer one is held or being received),
  // InvalidArgument (a header that makes no sense).
  Result<std::unique_ptr<Receiver>> BeginReplica(const v1::SnapshotHeader& header) EXCLUDES(mu_);
  // After a push of `rank`'s snapshot was accepted by a peer: tells the rank how long it took
  // (snapshot::WriteReplicationNote into the attempt's incoming dir), when that dir is still there.
  void NoteReplicated(const AttemptId& attempt, int rank, const snapshot::ReplicationNote& note) EXCLUDES(mu_);
  // An own shard still held, for replication; NotFound when it is not (dropped meanwhile).
  Result<std::unique_ptr<HeldShardReader>> OpenOwn(const AttemptId& attempt, int rank, int64_t step) EXCLUDES(mu_);

  // Every complete step per attempt, own and replica shards together (HeartbeatRequest.snapshots).
  std::vector<v1::HeldSnapshot> Held() const EXCLUDES(mu_);
  // Blocks for the copies (seconds); error text when a rank is not held or a copy fails.
  v1::StageResult Stage(const v1::StageOrder& order) EXCLUDES(mu_);
  void Keep(const std::vector<AttemptId>& attempts) EXCLUDES(mu_);
  // The step of each attempt that is kept besides the newest (AttemptRef.keep_step; 0 or missing:
  // none): retention keeps it while it is held, so the survivors of a node's loss share a step
  // however far replication lags. Files neither newest nor kept go at once.
  void SetKeepSteps(const std::map<AttemptId, int64_t>& keep_steps) EXCLUDES(mu_);
  // See "Retention" above; 0 (the default): none.
  void SetOwnHistory(std::chrono::milliseconds window) EXCLUDES(mu_);
  // May be called again (after the ranks are killed, for what they wrote meanwhile).
  void Close() EXCLUDES(mu_);
  SnapshotStoreStats Stats() const EXCLUDES(mu_);

  // One replica being received; destroyed without Commit(), it is abandoned (file and reservation
  // released).
  class Receiver {
   public:
    ~Receiver();
    Receiver(const Receiver&) = delete;
    Receiver& operator=(const Receiver&) = delete;
    // DataLoss for more bytes than the header announced; FailedPrecondition once the attempt is dropped.
    Status Write(const std::string& data);
    // DataLoss when the bytes are not the header's size and CRC-32C ("damaged in transit").
    Status Commit();

   private:
    friend class SnapshotStore;
    Receiver(SnapshotStore* store, uint64_t id, int fd, snapshot::ShardRecord record)
        : store_(store), id_(id), fd_(fd), record_(record) {}
    void CloseFd();
    SnapshotStore* store_;
    uint64_t id_;
    int fd_;
    snapshot::ShardRecord record_;
    int64_t received_ = 0;
    uint32_t crc_ = 0;
    bool done_ = false;
  };

 private:
  enum class Kind { kOwn, kReplica };
  struct HeldFile {
    snapshot::ShardRecord record;
    std::string path;
    SteadyTime taken{};  // own files: when it was taken over
  };
  struct Shard {
    std::map<int64_t, HeldFile> complete;  // by step
    uint64_t receiving = 0;                // the transfer in progress (replicas); 0: none
  };
  struct Attempt {
    SteadyTime first_seen;
    bool listed = false;  // named by a Keep
    int64_t keep_step = 0;  // SetKeepSteps
    std::map<std::pair<int, Kind>, Shard> shards;  // by rank, kind
  };
  struct Receive {
    AttemptId attempt;
    int rank = 0;
    int64_t step = 0;
    int64_t reserved = 0;
    std::string partial;
    std::string path;
    bool cancelled = false;  // the attempt was dropped
  };

  explicit SnapshotStore(SnapshotStoreOptions options) : options_(std::move(options)) {}
  // Deletes the entries of the root this class makes (job-*, staging).
  static void RemoveLeftovers(const std::string& root);
  std::string AttemptDir(const AttemptId& a) const;
  std::string HeldPath(const AttemptId& a, int64_t step, int rank, int world) const;
  Attempt& AttemptOf(const AttemptId& a) REQUIRES(mu_);
  int64_t UsedLocked() const REQUIRES(mu_) { return own_bytes_ + replica_bytes_ + receiving_bytes_; }
  std::string RoomText(int64_t need, int64_t freed) const REQUIRES(mu_);
  // Deletes the file and forgets it.
  void DropFile(Kind kind, const HeldFile& f) REQUIRES(mu_);
  // Retention of one shard: its newest file and the attempt's keep step; an own shard without the
  // keep step held also keeps the one before its newest. At most two files either way, and an own
  // shard's history (Required says which files are not history).
  void Trim(Kind kind, Shard& shard, int64_t keep_step) REQUIRES(mu_);
  static std::set<int64_t> Required(Kind kind, const Shard& shard, int64_t keep_step);
  // Drops own shards' history, oldest first, until `need` more bytes fit the budget; whether they do.
  bool MakeRoom(int64_t need) REQUIRES(mu_);
  void DropAttempt(const AttemptId& a) REQUIRES(mu_);
  void EndReceive(uint64_t id) REQUIRES(mu_);  // releases its reservation and its shard's slot
  Status WriteReceived(uint64_t id, int fd, const std::string& data) EXCLUDES(mu_);
  Status CommitReceived(uint64_t id, const snapshot::ShardRecord& record) EXCLUDES(mu_);
  void AbandonReceived(uint64_t id) EXCLUDES(mu_);

  const SnapshotStoreOptions options_;
  mutable Mutex mu_;
  std::map<AttemptId, Attempt> attempts_ GUARDED_BY(mu_);
  std::map<uint64_t, Receive> receives_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;  // receives and staging links
  std::set<AttemptId> dropped_ GUARDED_BY(mu_);  // the newest ones Keep deleted, refused from then on
  std::deque<AttemptId> dropped_order_ GUARDED_BY(mu_);
  int64_t own_bytes_ GUARDED_BY(mu_) = 0;
  int64_t replica_bytes_ GUARDED_BY(mu_) = 0;
  int64_t receiving_bytes_ GUARDED_BY(mu_) = 0;
  bool closed_ GUARDED_BY(mu_) = false;
  std::chrono::milliseconds own_history_ GUARDED_BY(mu_){0};
};

// "1.5 MiB", "310 MiB": sizes in reasons and logs.
std::string MibText(int64_t bytes);

}  // namespace eft::worker
