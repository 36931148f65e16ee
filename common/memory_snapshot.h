// Memory snapshots on the node and staged for a resume (docs/checkpoints.md, "Memory snapshots").
//
// A rank writes each snapshot as one self-describing safetensors file, its sharded checkpoint file
// (the slices it owns of every unit's fp32 masters and both moments) whose metadata also holds
// kMetadataKey: the step, rank, world size and the trainer state. It lies in the worker's memory:
//   <EFT_SNAPSHOT_DIR>/step-S/rank-RRRRR-of-WWWWW.safetensors
// and is reported with its size and CRC-32C (rank::MemorySnapshotEvent): a ShardRecord.
//
// To resume from a snapshot after a node's loss, the nodes holding its shards stage them into the
// job's checkpoint directory, each shard beside a sidecar with its record:
//   <checkpoint.dir>/step-S.snapshot/rank-RRRRR-of-WWWWW.safetensors[.record]
// and the next attempt's rank 0 checks every file against its record and commits the directory as
// an ordinary sharded checkpoint (trainer/checkpoint/snapshot_adoption.h). Nothing here knows the
// safetensors format: the worker moves, copies and checksums bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace eft::snapshot {

// The safetensors metadata key of a snapshot file: JSON {"format", "step", "rank", "world_size",
// "job", "attempt", "trainer_state"}.
inline constexpr char kMetadataKey[] = "eft.snapshot";
inline constexpr int kFormat = 1;
inline constexpr char kStagedSuffix[] = ".snapshot";
inline constexpr char kRecordSuffix[] = ".record";

// "rank-00003-of-00008.safetensors", the name of a sharded checkpoint's file too.
std::string ShardFileName(int rank, int world);
// <snapshot_dir>/step-S
std::string HeldStepDir(const std::string& snapshot_dir, int64_t step);
// <checkpoint_root>/step-S.snapshot
std::string StagedDir(const std::string& checkpoint_root, int64_t step);
// Whether `path` names a staged snapshot directory (its last component is step-N.snapshot); its
// step in *step when given.
bool IsStagedDir(const std::string& path, int64_t* step = nullptr);

// What is known of one shard of one snapshot, without reading it.
struct ShardRecord {
  int64_t step = 0;
  int rank = 0;
  int world_size = 0;
  int64_t bytes = 0;
  uint32_t crc32c = 0;
  nlohmann::json ToJson() const;
  static Result<ShardRecord> FromJson(const nlohmann::json& j);
};

// The worker's note to a rank of how long its newest replicated snapshot took to reach a peer
// node: <EFT_SNAPSHOT_DIR>/replicated-rank-RRRRR, one line "step seconds bytes", replaced whole
// (written beside and renamed) after each accepted push. The rank's `auto` interval reads it
// (trainer/checkpoint/memory_snapshot.h).
struct ReplicationNote {
  int64_t step = 0;
  double seconds = 0;
  int64_t bytes = 0;
};
std::string ReplicationNotePath(const std::string& snapshot_dir, int rank);
Status WriteReplicationNote(const std::string& snapshot_dir, int rank, const ReplicationNote& note);
// std::nullopt when there is none or it does not parse (a rank without a worker never has one).
std::optional<ReplicationNote> ReadReplicationNote(const std::string& snapshot_dir, int rank);

// Copies the held shard `held_file` into `staged_dir` (created when missing) under its
// ShardFileName, checksumming the bytes as it copies them: DataLoss, and no file left, when they are
// not `record`'s size and CRC (the memory copy was damaged). Then fsyncs it and writes its .record
// sidecar durably; the directory is fsynced last. IoError for write errors (a full disk).
Status StageShard(const std::string& held_file, const ShardRecord& record, const std::string& staged_dir);

// The records of a staged snapshot directory: one per rank 0..W-1 of one step and world size, in
// rank order. DataLoss naming what is missing or inconsistent (a rank without its file or record,
// two world sizes, a record that does not parse); the files themselves are not read.
Result<std::vector<ShardRecord>> ReadStagedRecords(const std::string& staged_dir);

}  // namespace eft::snapshot
