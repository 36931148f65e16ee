// Checkpoint directories on disk and the COMMITTED manifest that makes one exist.
//
// A checkpoint is written into <root>/step-N.tmp/; once every file is written and fsynced, rank 0
// writes COMMITTED (JSON: step, kind, world size, and every file with its size and CRC-32C),
// fsyncs it, renames the directory to <root>/step-N/ and fsyncs <root>. A directory without a
// manifest, or whose files do not match it, is not a checkpoint: VerifyCheckpoint says why, and the
// resume logic skips it with a warning and takes the newest one that verifies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/crc32c.h"
#include "common/status.h"

namespace eft::trainer {

inline constexpr const char* kManifestName = "COMMITTED";

// CRC-32C and size of a whole file.
Result<std::pair<uint32_t, int64_t>> Crc32cFile(const std::string& path);

Status FsyncFile(const std::string& path);
Status FsyncDir(const std::string& path);
// Replaces the file at `path` with `text`, durably and never half-written: written to `path` +
// ".tmp", fsynced, renamed over `path`. The directory is not fsynced (callers do it once for all
// their files).
Status WriteFileDurably(const std::string& path, const std::string& text);

struct ManifestFile {
  std::string path;  // relative to the checkpoint directory
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};

struct Manifest {
  int64_t step = 0;
  std::string kind;  // "sharded" or "full"
  int world_size = 0;
  std::vector<ManifestFile> files;
  int64_t total_bytes() const;
  nlohmann::json ToJson() const;
  static Result<Manifest> FromJson(const nlohmann::json& j);
};

// Fsyncs every file of `files` (relative to `dir`), checksums it, and writes `dir`/COMMITTED
// atomically (temporary file, fsync, rename, fsync of `dir`).
Result<Manifest> WriteManifest(const std::string& dir, int64_t step, const std::string& kind, int world_size,
                               const std::vector<std::string>& files);

// The same for files already fsynced and checksummed (by the ranks that wrote them).
Result<Manifest> WriteSealedManifest(const std::string& dir, int64_t step, const std::string& kind,
                                     int world_size, std::vector<ManifestFile> files);
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

// The newest checkpoint under `root` that verifies, or "" when there is none. Every one skipped
// on the way is logged as a warning with the reason, and appended to `skipped` when given.
std::string NewestValidCheckpoint(const std::string& root, std::vector<std::string>* skipped = nullptr);

// What EFT_RESUME_FROM names: "" means a fresh start (returns ""); "auto" the newest valid
// checkpoint under `root` ("" when none); a path that checkpoint, or when it does not verify (or is
// gone), the newest valid one beside it, older or newer (skipped as above). With no valid
// checkpoint there it is NotFound: resuming was asked for and is impossible.
Result<std::string> ResolveResume(const std::string& resume_from, const std::string& root,
                                  std::vector<std::string>* skipped = nullptr);

// Renames a written `tmp` directory to `final_dir` (replacing a stale one of the same name) and
// fsyncs the parent, so the rename survives a power loss.
Status CommitCheckpointDir(const std::string& tmp, const std::string& final_dir);

// Deletes all but the newest `keep_last` (>= 1) checkpoints that have a manifest, older directories
// without one, and leftover step-N.tmp directories older than the newest checkpoint. Never deletes
// the newest checkpoint that verifies, nor `also_keep` (checkpoint.keep_best's checkpoint). Returns
// the paths deleted.
Result<std::vector<std::string>> ApplyRetention(const std::string& root, int keep_last,
                                                const std::string& also_keep = "");

// checkpoint.keep_best: the checkpoint under `root` with a manifest whose trainer_state.json has the
// lowest finite "eval_loss" (the newest of equals); "" when none was evaluated. A checkpoint whose
// state file is missing or unreadable is passed over.
std::string BestEvaluatedCheckpoint(const std::string& root);

}  // namespace eft::trainer
