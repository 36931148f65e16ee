// Sharded training state: every rank writes the slices it owns of every FSDP unit (fp32 master
// weights and both AdamW moments) into its own safetensors file, and records in the file's metadata
// where each slice sits in the unit's flat vector. Any world size can load it: each rank copies,
// from every file whose slice overlaps its own, only the overlapping range (the files are
// memory-mapped, so only those bytes are read). Nothing is lost or approximated: the state is
// elementwise, so resharding it is exact.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "common/status.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/flat_param.h"
#include "trainer/parallel/sharded_llama.h"

namespace eft::trainer {

// One unit and its optimizer moments (tensors shaped like the unit's shard).
struct UnitState {
  FlatParamUnit* unit;
  at::Tensor exp_avg;
  at::Tensor exp_avg_sq;
};

// "rank-00003-of-00008.safetensors" (common/memory_snapshot.h's name: a snapshot's file is one)
std::string ShardFileName(int rank, int world);

// What this rank saves and loads: every trainable unit (the adapters under LoRA) with its moments.
std::vector<UnitState> TrainableUnitStates(ShardedLlama& model, AdamW& optimizer);

// This rank's state as it is saved: the owned part of every unit's shard and moments.
struct StagedShard {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::map<std::string, std::string> metadata;
  int64_t bytes() const;
};
// With `copy`, the tensors are host copies, so training can go on changing the originals while they
// are written; without, they are views of the live tensors (no memory, no copying time), which must
// not change until the write is done.
StagedShard StageShard(const std::vector<UnitState>& units, bool copy);

// Fills every unit's shard and moments from the shard files `files` (paths) of one checkpoint.
// DataLoss when the files do not cover this rank's slices; FailedPrecondition when a unit's layout
// (parameter names and shapes) differs from the checkpoint's.
Status LoadShards(const std::vector<std::string>& files, const std::vector<UnitState>& units);

}  // namespace eft::trainer
