// Adopting a staged memory snapshot as a checkpoint (docs/checkpoints.md, "Memory snapshots").
//
// After a node's loss the nodes that hold a snapshot's shards stage them into
// <checkpoint.dir>/step-S.snapshot/ (common/memory_snapshot.h), each beside a record of its size and
// CRC-32C. The next attempt is handed that directory to resume from; its rank 0, once it holds the
// fence (fence.h), adopts it: every shard is checked against its record (one read), the trainer
// state comes out of rank 0's shard, and the directory is committed as an ordinary sharded checkpoint
// of this attempt (COMMITTED, renamed to step-S), so resuming, resharding to another world size,
// retention and fencing are the paths every checkpoint takes.
#pragma once

#include <string>

#include "common/status.h"
#include "trainer/checkpoint/manifest.h"

namespace eft::trainer {

// Rank 0: commits the staged snapshot `staged_dir` (step-S.snapshot) as `root`/step-S, written by
// `attempt`; returns that directory. When a checkpoint of step S is already there and verifies (a
// disk save of the same step, or this very snapshot adopted by an earlier attempt, which renamed the
// staged directory away), that one is kept and returned. DataLoss naming the shard when one is
// missing, truncated or damaged (nothing is committed; the staged directory is left for the next
// retention); IoError for write errors; fence.h's Fenced when `attempt` no longer holds the fence.
Result<std::string> AdoptStagedSnapshot(const std::string& staged_dir, const std::string& root,
                                        const AttemptId& attempt);

}  // namespace eft::trainer
