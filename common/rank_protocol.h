// The rank protocol: the whole contract between whoever launches a rank (eft-worker, `eft-train
// train --nproc`, torchrun, Slurm) and the rank process itself (eft-train or a user's program).
// docs/architecture.md ("The rank protocol") describes it; this header is its one definition.
//
//  - Exit codes: what a rank's exit status means to the controller's restart policy.
//  - Environment: the variables a launcher sets for every rank. Only launchers write them (the
//    controller sends typed fields in a RankAssignment; eft-worker turns them into these names).
//  - Events: one JSON object per line on the EFT_EVENTS_FD pipe, {"event":"step",...}. Typed here
//    with EncodeEvent/DecodeEvent, so the trainer, the test workload and the controller agree on
//    names and fields by construction rather than by matching strings.
//
// Dependency-free on purpose (std and Status only): the trainer, the worker, the controller and test
// programs all include it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "common/status.h"

namespace eft::rank {

// ---------------------------------------------------------------------------------------------
// Exit codes

enum class ExitCode : int {
  kSuccess = 0,
  kFailure = 1,            // anything retryable: a peer died, an I/O error, a crash
  kBadInput = 2,           // the configuration or the input is wrong: retrying cannot help
  kStoppedOnRequest = 75,  // SIGTERM: saved a checkpoint (when there was anything to save) and stopped
  // Rank 0 could not listen on MASTER_PORT because another program holds it. Nothing is wrong with
  // the job: the controller retries at once on another port, without counting a restart.
  kRendezvousPortBusy = 76,
  // The checkpoint storage is full (ENOSPC, a quota, a file size limit) and saving failed even after
  // freeing what retention allows: a restart would fail the same way, so the job fails with the
  // reason instead, its newest committed checkpoint kept for a resume once space is freed.
  kStorageFull = 77,
  // A rank ran out of GPU or host memory (its error event says where, when and which settings to
  // change). Once may be another program's passing use of the GPU: the job restarts, counted. Twice
  // in a row at the same world size is the job's settings, which a restart would not change: the
  // job fails with the reason (docs/gpu.md, "Out of memory").
  kOutOfMemory = 78,
  // A newer attempt of the job holds the checkpoint directory's fence (docs/checkpoints.md,
  // "Fencing"): this rank's attempt is stale, cut off from the controller while the controller
  // started another, and stopped without committing or deleting anything. The controller has ended
  // that attempt already and ignores the exit. Should it still hold the attempt for current (the
  // fence deleted by hand, or two controllers' jobs sharing a checkpoint.dir), it is a failure
  // counted against max_restarts: the next attempt raises the fence anew.
  kFenced = 79,
};

constexpr int ToInt(ExitCode code) { return static_cast<int>(code); }

// The exit code of an eft-train command that failed with `s`: bad input (2) for what the user's input
// decides (InvalidArgument, NotFound, FailedPrecondition, DataLoss), a failure (1) otherwise.
int ExitCodeFor(const Status& s);

// How a rank ended, as the small fixed set metrics and the controller's policy use.
enum class ExitClass { kSuccess, kBadInput, kStopped, kPortBusy, kStorageFull, kOutOfMemory, kFenced, kFailed, kSignal };
inline constexpr ExitClass kAllExitClasses[] = {ExitClass::kSuccess,     ExitClass::kBadInput,    ExitClass::kStopped,
                                                ExitClass::kPortBusy,    ExitClass::kStorageFull, ExitClass::kOutOfMemory,
                                                ExitClass::kFenced,      ExitClass::kFailed,      ExitClass::kSignal};

// `signal` != 0 means the rank was killed by that signal (its exit code is then meaningless).
ExitClass ClassifyExit(int exit_code, int signal);
// "success", "bad_input", "stopped", "port_busy", "storage_full", "out_of_memory", "fenced", "failed", "signal": label
// values of the worker's metrics.
const char* ExitClassName(ExitClass c);
// For messages: "bad configuration or input", "stopped after saving a checkpoint", ...
const char* ExitCodeMeaning(int exit_code);

// ---------------------------------------------------------------------------------------------
// Environment a launcher sets for every rank

namespace env {
// torchrun's names, so any PyTorch program runs as a rank unchanged.
inline constexpr char kRank[] = "RANK";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr char kRunId[] = "TORCHELASTIC_RUN_ID";
inline constexpr char kCudaVisibleDevices[] = "CUDA_VISIBLE_DEVICES";
// eft's own.
inline constexpr char kJobId[] = "EFT_JOB_ID";
inline constexpr char kAttempt[] = "EFT_ATTEMPT";
inline constexpr char kNodeName[] = "EFT_NODE_NAME";
// This node's numeric address (the worker's data address): what the rank binds its collectives to
// and rank 0's node hands out as MASTER_ADDR (docs/architecture.md, "Rank traffic and the node's
// address"). Unset: the rank's collectives pick their interface as they would without eft.
inline constexpr char kNodeAddress[] = "EFT_NODE_ADDRESS";
// "1" when every node of the attempt shares this node's network stack (one host, one network
// namespace), so a loopback address reaches every rank; "0" when not; unset when not known.
inline constexpr char kNodesShareLoopback[] = "EFT_NODES_SHARE_LOOPBACK";
inline constexpr char kJobSpec[] = "EFT_JOB_SPEC";        // the normalized job spec, JSON
inline constexpr char kResumeFrom[] = "EFT_RESUME_FROM";  // "", "auto" or a checkpoint directory
inline constexpr char kEventsFd[] = "EFT_EVENTS_FD";      // the fd events are written to
// A directory in the node's memory (tmpfs) that the worker keeps for this rank's attempt: memory
// snapshots go there (common/memory_snapshot.h). Unset: the rank takes none.
inline constexpr char kSnapshotDir[] = "EFT_SNAPSHOT_DIR";
}  // namespace env

// True for names a job's spec.env may not set because a launcher sets them: every name above and
// anything starting with EFT_.
bool IsReservedEnvName(std::string_view name);

// ---------------------------------------------------------------------------------------------
// Events

// One optimizer step finished (rank 0).
struct StepEvent {
  int64_t step = 0;
  int64_t total_steps = 0;  // 0: not known
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  int64_t tokens = 0;  // trained tokens in this step, all ranks
  double tokens_per_s = 0;
  double seconds = 0;  // wall time of the step; 0: not reported
  double mfu = 0;      // 0: not reported
  // Where the step's wall time went on rank 0 (< 0: not reported): building batches, computing
  // (forward, backward, and anything else not waiting), blocked in collectives (the part of
  // communication that did not overlap compute), and the optimizer (clipping and the update).
  double data_s = -1;
  double compute_s = -1;
  double comm_wait_s = -1;
  double optimizer_s = -1;
};

// A checkpoint was committed (rank 0).
struct CheckpointEvent {
  std::string kind = "sharded";  // sharded | full
  int64_t step = 0;
  std::string path;
  int64_t bytes = 0;
  double seconds = -1;        // writing it; < 0: not reported
  double stall_seconds = -1;  // how long the step loop waited for it; < 0: not reported
};

// A save failed and nothing of it was committed (rank 0): its partial files are removed, training
// goes on from the previous checkpoint until kMaxConsecutiveFailedSaves in a row stop it.
struct CheckpointFailedEvent {
  std::string kind = "sharded";  // sharded | full
  int64_t step = 0;
  std::string reason;       // the error, e.g. "... No space left on device"
  int64_t consecutive = 1;  // failed saves in a row, this one included
  bool storage_full = false;  // ENOSPC, a quota or a file size limit
  int64_t freed = 0;        // older checkpoints deleted to make room (storage_full only)
};

// Retention deleted a checkpoint that an earlier CheckpointEvent reported.
struct CheckpointDeletedEvent {
  std::string path;
  std::string reason;
};

// The run resumed from a checkpoint (rank 0).
struct ResumedEvent {
  int64_t step = 0;
  std::string kind;
  std::string path;
  int64_t bytes = 0;
  double verify_seconds = 0;
  double load_seconds = 0;
};

// Training reached its end (rank 0).
struct FinishedEvent {
  int64_t step = 0;
  // checkpoint.merge_lora: the merged model directory written after the final adapter; "": none.
  std::string merged_model = {};
};

// One rank's memory after its first step.
struct MemoryEvent {
  int rank = 0;
  int64_t persistent_bytes = 0;
  int64_t peak_rss_bytes = 0;
};

// The rank is about to exit non-zero for this reason, so the controller can say why an attempt ended
// without reading logs. On the wire, both ways, the message is its first line with text (trimmed, at
// most kMaxErrorMessageBytes): an attempt's end reason is one line, the whole error is in the rank log.
struct ErrorEvent {
  std::string message;
  int exit_code = 1;
};
inline constexpr size_t kMaxErrorMessageBytes = 2000;

// Resuming was asked for and every checkpoint found was unusable: the run starts from scratch
// (or, with checkpoint.require_resume, fails).
struct NoValidCheckpointEvent {
  std::string dir;
  int64_t skipped = 0;  // checkpoints found and refused (each with a warning in the log)
};

// A well-formed event of a type this build does not know (a newer rank): passed over, not an error.
struct UnknownEvent {
  std::string type;
};

// The model was evaluated on a held-out set after `step` optimizer steps (rank 0): the
// token-weighted mean loss over all `tokens` trained targets of that eval set.
struct EvalEvent {
  int64_t step = 0;
  double loss = 0;
  int64_t tokens = 0;
  double seconds = -1;  // the evaluation's wall time; < 0: not reported
  std::string set = "eval";  // the set's name (data.eval); older ranks had one set and say none
  int index = 0;             // its place in data.eval; 0, the first, is the one keep_best ranks by
};

// One rank's memory snapshot after `step` steps is complete in EFT_SNAPSHOT_DIR (every rank, each its
// own): `path` is the file, whole, with its size and CRC-32C (common/memory_snapshot.h). The worker
// takes it over from here.
struct MemorySnapshotEvent {
  int64_t step = 0;
  int rank = 0;
  int world_size = 0;
  std::string path;
  int64_t bytes = 0;
  uint32_t crc32c = 0;
  double seconds = -1;        // writing it; < 0: not reported
  double stall_seconds = -1;  // how long the step loop waited for it; < 0: not reported
};

// A node's worker could not hold (or replicate) a rank's memory snapshot: `node` says which worker,
// `reason` why ("needs 310 MiB, 120 MiB of the 1024 MiB budget free"). The worker itself adds this
// line to the rank's events; the job runs on (its older snapshots and disk checkpoints remain).
struct MemorySnapshotRefusedEvent {
  int64_t step = 0;
  int rank = 0;
  std::string node;
  std::string reason;
};

// checkpoint.export_gguf: rank 0 wrote the final model as one GGUF file (docs/models.md), after the
// final model and before `finished`.
struct ExportedEvent {
  int64_t step = 0;
  std::string path;
  std::string type;  // the matrices' type: f32, f16, bf16, q8_0
  int64_t bytes = 0;
  double seconds = -1;  // writing it; < 0: not reported
};

using Event = std::variant<StepEvent, CheckpointEvent, CheckpointDeletedEvent, ResumedEvent, FinishedEvent,
                           MemoryEvent, ErrorEvent, NoValidCheckpointEvent, UnknownEvent,
                           EvalEvent, CheckpointFailedEvent, MemorySnapshotEvent, MemorySnapshotRefusedEvent,
                           ExportedEvent>;

// The "event" value of each type: "step", "checkpoint", "checkpoint_deleted", "resumed", "finished",
// "memory", "error", "no_valid_checkpoint", "eval", "checkpoint_failed", "memory_snapshot",
// "memory_snapshot_refused", "exported" (an UnknownEvent's own type).
std::string EventTypeName(const Event& event);

// One line of JSON, without the newline. Optional fields that are "not reported" are left out; an
// ErrorEvent's message is cut to kMaxErrorMessageBytes (at a UTF-8 boundary).
std::string EncodeEvent(const Event& event);

// Parses one line. Errors (INVALID_ARGUMENT) for text that is not a JSON object with a string
// "event", and for a known type whose required fields are missing or of the wrong type (a step
// without "step", a checkpoint without "path"). Unknown keys are ignored; unknown types decode as
// UnknownEvent.
Result<Event> DecodeEvent(std::string_view line);

}  // namespace eft::rank
