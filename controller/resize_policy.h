// Resizing a running job (docs/architecture.md, "Resizing"): whether a RUNNING job should grow now
// onto READY capacity that appeared, and the words the controller uses for resizes (end reasons,
// `resized` events and their reason labels for /metrics).
//
// Pure functions of their inputs (no controller, no clock, no store), so every rule is unit-tested
// on its own (tests/unit/controller/resize_policy_test.cc). The controller gathers the inputs under
// its lock and acts on the decision: a grow ends the attempt (its ranks stop with a checkpoint, exit
// 75) and the next attempt is placed at the larger size from that checkpoint.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "controller/records.h"

namespace eft::controller {

struct GrowInput {
  bool running = false;       // the job is RUNNING: every rank of its current attempt started
  bool grow_enabled = true;   // spec.resources.grow
  int nodes = 0;              // nodes of the current attempt
  int max_nodes = 0;          // spec.resources.nodes.max
  // READY, undrained nodes that are not the job's and have gpus_per_node free slots, in the order
  // placement would take them.
  std::vector<std::string> free_nodes;
  // Nodes that ran an earlier attempt of the job: one of them coming back "is back".
  std::vector<std::string> known_nodes;
  int64_t now_ms = 0;
  int64_t last_resize_ms = 0;  // LastResizeMs(); 0: never resized
  int64_t cooldown_ms = 0;     // spec.resources.resize_cooldown_seconds
  int64_t step = 0;            // newest step the job reported; 0: none yet
  int64_t total_steps = 0;     // as the trainer reported it; 0: not known
  int64_t checkpoint_every = 0;  // spec.checkpoint.every_steps; 0: no periodic checkpoints
};

struct GrowDecision {
  bool grow = false;
  int from_nodes = 0;
  int to_nodes = 0;
  std::vector<std::string> added;  // the free nodes the next attempt is meant to take
  // grow: what happened, "node2 is back, 2 -> 3 nodes". No grow although a node was free: why not
  // ("cooldown: ..."). "" when there is nothing to decide (not running, at nodes.max, nothing free).
  std::string reason;
  // When only the cooldown stood in the way: the wall time (ms) it ends; 0 otherwise.
  int64_t retry_at_ms = 0;
};

GrowDecision DecideGrow(const GrowInput& in);

// When the job's world size last changed: the start of the newest attempt that runs on a different
// number of nodes than the attempt before it (a grow, an eviction, a node loss). 0: never.
int64_t LastResizeMs(const std::vector<AttemptRecord>& attempts);

// What a resize is counted as (eft_job_resizes_total{reason}).
// kShrink: gave nodes to a waiting job of higher priority (priority_policy.h).
enum class ResizeReason { kGrow, kEvict, kShrink };
inline constexpr std::array<ResizeReason, 3> kResizeReasons = {ResizeReason::kGrow, ResizeReason::kEvict,
                                                               ResizeReason::kShrink};
const char* ResizeReasonLabel(ResizeReason reason);  // "grow", "evict", "shrink"

// The `resized` job event: type kResizedEvent, message "<label>: <what happened>", e.g.
// "grow: node2 is back, 2 -> 3 nodes". The label makes the count by reason derivable from the
// durable events (after a controller restart too).
inline constexpr const char* kResizedEvent = "resized";
std::string ResizedEventMessage(ResizeReason reason, const std::string& what);
// The reason of a `resized` event; nullopt for any other event.
std::optional<ResizeReason> ResizeReasonOf(const EventRecord& event);

// The attempt end reason of a planned resize, in words: "resized: " + what. The attempt's end kind
// (ATTEMPT_END_RESIZED) is what marks it, never these words: its ranks were asked to stop with a
// checkpoint.
std::string ResizedEndReason(const std::string& what);
bool EndedForResize(const AttemptRecord& attempt);

// Preemption for a job of higher priority: the attempt ends (ATTEMPT_END_PREEMPTED) with
// "preempted: <what>" and a `preempted` event (eft_job_preemptions_total); its ranks stop with a checkpoint as for a resize,
// and the job waits QUEUED until it fits again.
inline constexpr const char* kPreemptedEvent = "preempted";
std::string PreemptedEndReason(const std::string& what);
// A resize or a preemption: the ranks were asked to stop with a checkpoint.
bool EndedForPlannedStop(const AttemptRecord& attempt);
// Ended because a rank failed or vanished, ran out of memory, could not rendezvous, or a node was
// lost: the ranks left cannot save a consistent checkpoint, and may hang in a collective.
bool EndedUnplanned(const AttemptRecord& attempt);

// What draining `node` with --evict does to a job on `from` nodes that can continue on `to` (the
// other nodes of its attempt plus free ones, at most nodes.max): "node1 drained with --evict, 3 -> 2
// nodes", or "..., 2 -> 1 node, below nodes.min 2: the job waits for nodes".
std::string EvictWhat(const std::string& node, int from, int to, int min_nodes);

}  // namespace eft::controller
