// Checkpoint directories on disk and the COMMITTED manifest that makes one exist.
//
// A checkpoint is written into <root>/step-N.tmp/; once every file is written and fsynced, rank 0
// writes COMMITTED (JSON: step, kind, world size, the attempt that wrote it, and every file with its
// size and CRC-32C), fsyncs it, renames the directory to <root>/step-N/ and fsyncs <root>. A
// directory without a manifest, or whose files do not match it, is not a checkpoint:
// VerifyCheckpoint says why, and the resume logic skips it with a warning and takes the newest one
// that verifies. Which checkpoints an attempt may resume from at all, and what its retention may
// delete, is the fence's to say (fence.h): the functions below take it as a ResumeCheck.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/crc32c.h"
#include "common/file_util.h"  // FsyncFile, FsyncDir, WriteFileDurably: used with a manifest
#include "common/status.h"

namespace eft::trainer {

inline constexpr const char* kManifestName = "COMMITTED";

// CRC-32C and size of a whole file.
Result<std::pair<uint32_t, int64_t>> Crc32cFile(const std::string& path);

struct ManifestFile {
  std::string path;  // relative to the checkpoint directory
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};

// Who wrote a checkpoint: the job and its attempt (EFT_JOB_ID, EFT_ATTEMPT), the fencing token of
// fence.h. Attempt 0 is a run without an attempt number (eft-train by hand, torchrun, Slurm without
// eft) and every manifest written before fencing existed: unfenced.
struct AttemptId {
  std::string job;
  int attempt = 0;
  bool fenced() const { return attempt > 0; }
  bool operator==(const AttemptId&) const = default;
  // "attempt 3 of job 17", "attempt 3" (no job id), "a run without an attempt number".
  std::string ToString() const;
};

struct Manifest {
  int64_t step = 0;
  std::string kind;  // "sharded" or "full"
  int world_size = 0;
  AttemptId writer;  // "job" and "attempt" in the JSON, both left out when unfenced
  std::vector<ManifestFile> files;
  int64_t total_bytes() const;
  nlohmann::json ToJson() const;
  static Result<Manifest> FromJson(const nlohmann::json& j);
};

// Fsyncs every file of `files` (relative to `dir`), checksums it, and writes `dir`/COMMITTED
// atomically (temporary file, fsync, rename, fsync of `dir`), naming `writer`.
Result<Manifest> WriteManifest(const std::string& dir, int64_t step, const std::string& kind, int world_size,
                               const std::vector<std::string>& files, const AttemptId& writer = {});

// The same for files already fsynced and checksummed (by the ranks that wrote them).
Result<Manifest> WriteSealedManifest(const std::string& dir, int64_t step, const std::string& kind,
                                     int world_size, std::vector<ManifestFile> files, const AttemptId& writer = {});
// Fsyncs `dir`/`name` and checksums it: its manifest entry.
Result<ManifestFile> SealFile(const std::string& dir, const std::string& name);

// Reads and parses `dir`/COMMITTED without checking the files (NotFound / DataLoss).
Result<Manifest> ReadManifest(const std::string& dir);
// Reads `dir`/COMMITTED and checks every file it lists: present, same size, same CRC-32C.
// DataLoss (or NotFound without a manifest) naming the first problem.
Result<Manifest> VerifyCheckpoint(const std::string& dir);

// The committed-looking step-N directories under `root` (not step-N.tmp), newest step first.
struct CheckpointDir {
  int64_t step;
  std::string path;
};
std::vector<CheckpointDir> ListCheckpointDirs(const std::string& root);

// Whether a run may resume from the checkpoint in `dir` whose manifest is `m`: "" when it may, else
// why not ("written by attempt 3 after attempt 4 started"). fence.h makes them; an empty
// ResumeCheck admits every checkpoint (an unfenced run).
using ResumeCheck = std::function<std::string(const std::string& dir, const Manifest& m)>;

// The newest checkpoint under `root` that `resumable` admits and that verifies, or "" when there is
// none. Every one skipped on the way is logged as a warning with the reason, and appended to
// `skipped` when given. The check comes first, so a checkpoint it rejects is never read.
std::string NewestValidCheckpoint(const std::string& root, std::vector<std::string>* skipped = nullptr,
                                  const ResumeCheck& resumable = {});

// What EFT_RESUME_FROM names: "" means a fresh start (returns ""); "auto" the newest valid
// checkpoint under `root` ("" when none); a path that checkpoint, or when it does not verify, is
// gone or `resumable` rejects it, the newest valid one beside it, older or newer (skipped as above).
// With no valid checkpoint there it is NotFound: resuming was asked for and is impossible.
Result<std::string> ResolveResume(const std::string& resume_from, const std::string& root,
                                  std::vector<std::string>* skipped = nullptr, const ResumeCheck& resumable = {});

// Renames a written `tmp` directory to `final_dir` and fsyncs the parent, so the rename survives a
// power loss. A directory already at `final_dir` (the same step saved by an earlier attempt,
// possibly damaged) is replaced, unless a newer attempt of `writer`'s job wrote it: then nothing is
// renamed and the result is fence.h's Fenced.
Status CommitCheckpointDir(const std::string& tmp, const std::string& final_dir, const AttemptId& writer = {});

// Deletes all but the newest `keep_last` (>= 1) checkpoints that have a manifest, older directories
// without one, and leftover step-N.tmp directories older than the newest checkpoint. Never deletes
// the newest checkpoint that verifies, nor `also_keep` (checkpoint.keep_best's checkpoint). Returns
// the paths deleted. With `resumable` (a fenced attempt `self`, fence.h), a checkpoint it rejects
// does not count as one: it is deleted when an earlier attempt of `self`'s job wrote it (committed
// after `self` started: nothing may resume from it) and left alone otherwise (a newer attempt's, or
// another job's: not this attempt's to delete).
Result<std::vector<std::string>> ApplyRetention(const std::string& root, int keep_last,
                                                const std::string& also_keep = "", const ResumeCheck& resumable = {},
                                                const AttemptId& self = {});

// checkpoint.keep_best: the checkpoint under `root` with a manifest whose trainer_state.json has the
// lowest finite "eval_loss" (the newest of equals), among those `resumable` admits; "" when none was
// evaluated. A checkpoint whose state file is missing or unreadable is passed over.
std::string BestEvaluatedCheckpoint(const std::string& root, const ResumeCheck& resumable = {});

}  // namespace eft::trainer
