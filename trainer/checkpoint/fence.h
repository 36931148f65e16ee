// Fencing: no split brain between attempts (docs/checkpoints.md, "Fencing").
//
// The controller may declare a node lost (cut off from its network) and start attempt N+1
// elsewhere while attempt N's rank 0 on that node still reaches its peers and the checkpoint
// storage and trains on. Nothing N commits after N+1 started may ever be resumed from, and N must
// not replace or delete what N+1 needs. The fencing token is the attempt (AttemptId, manifest.h:
// EFT_JOB_ID and EFT_ATTEMPT); attempt 0 (no EFT_ATTEMPT: eft-train by hand, torchrun, Slurm without
// eft) is unfenced and touches no fence: it behaves as before fencing existed.
//
// <root>/FENCE (JSON: the holder's job and attempt, and the checkpoints it may resume from, each
// with the attempt its manifest names) is raised by rank 0 of every fenced attempt at its start,
// before it picks its checkpoint (RaiseFence). What the new holder may resume from: what the
// previous holder could (still there, still written by the same attempt), plus what the previous
// holder and any attempt since committed (each held the fence when it committed), plus its own.
// A checkpoint an older attempt commits after that is none of these, whether it was committed
// before or after the newer one listed the directory, and no later attempt adds it: a later
// holder only adds checkpoints of attempts at least as new as the fence it replaces.
//
// An attempt commits only while it holds the fence (CheckFence: before it touches its step-N.tmp,
// just before the rename, and after it, before retention); fenced off, it commits nothing, deletes
// nothing, and stops (exit 79, common/rank_protocol.h). An attempt that finds a newer attempt of its
// job holding the fence at its start is stale and must not train.
//
// Not atomic: checks and writes are separate file operations (shared file systems offer no portable
// compare-and-swap), so an attempt that stalls between reading the fence and acting on it can act
// once on an old view. Each such act is bounded above: a commit renamed between the check and a
// newer attempt's listing is never resumed from; retention never deletes a newer attempt's
// checkpoints; the remaining windows are described in docs/checkpoints.md.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/checkpoint/manifest.h"

namespace eft::trainer {

inline constexpr const char* kFenceName = "FENCE";

struct Fence {
  AttemptId holder;
  std::map<std::string, AttemptId> checkpoints;  // directory name ("step-20") -> its manifest's writer
  nlohmann::json ToJson() const;
  static Result<Fence> FromJson(const nlohmann::json& j);
};

// The status of an attempt fenced off by a newer one (CANCELLED: nothing else in the trainer uses
// that code, so main maps it to exit 79 alone), and the test for it.
Status Fenced(std::string message);
bool IsFenced(const Status& s);

// <root>/FENCE, or nullopt when there is none. DataLoss when it does not parse, IoError when it
// cannot be read.
Result<std::optional<Fence>> ReadFence(const std::string& root);

// Rank 0 of fenced attempt `self`, at its start, before it resolves its resume: makes `self` the
// holder of `root` (created if missing) with the checkpoints it may resume from, written durably.
// Fenced when a newer attempt of `self`'s job holds it: `self` is stale and must not train. A fence
// of another job is taken over (a new job given the same checkpoint.dir).
Result<Fence> RaiseFence(const std::string& root, const AttemptId& self);

// OK while `self` holds the fence of `root`. Fenced naming the holder when another attempt does, and
// when the fence is gone or cannot be read: then `self` cannot tell who holds the directory.
Status CheckFence(const std::string& root, const AttemptId& self);

// Why the holder of `fence` must not resume from the checkpoint named `name` ("step-20") in the
// fenced directory, whose manifest names `writer`: "" when it may (unfenced, its own, or listed
// with the same writer).
std::string WhyNotResumable(const Fence& fence, const std::string& name, const AttemptId& writer);

// The same as a ResumeCheck (manifest.h) for checkpoints under `root`; one elsewhere (a path given
// by hand) is outside the fence and admitted.
ResumeCheck ResumableBy(const Fence& fence, const std::string& root);

}  // namespace eft::trainer
