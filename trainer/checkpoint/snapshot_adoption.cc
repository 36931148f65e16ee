#include "trainer/checkpoint/snapshot_adoption.h"

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/json_int.h"
#include "common/memory_snapshot.h"
#include "trainer/checkpoint/fence.h"
#include "trainer/checkpoint/trainer_state.h"
#include "trainer/io/safetensors.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

constexpr const char* kStateFile = "trainer_state.json";

// The trainer state a snapshot file carries in its metadata (snapshot::kMetadataKey), checked
// against what its record says the file is.
Result<TrainerState> StateOf(const std::string& file, const snapshot::ShardRecord& record) {
  EFT_ASSIGN_OR_RETURN(auto opened, SafetensorsFile::Open(file));
  const auto& metadata = opened->metadata();
  auto it = metadata.find(snapshot::kMetadataKey);
  if (it == metadata.end()) return Status::DataLoss(file + ": not a memory snapshot (no " + snapshot::kMetadataKey + ")");
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  const bool matches = j.is_object() && j.contains("trainer_state") &&
                       TryJsonIntOr<int64_t>(j, "step", -1) == record.step &&
                       TryJsonIntOr<int64_t>(j, "world_size", 0) == record.world_size &&
                       TryJsonIntOr<int64_t>(j, "rank", -1) == record.rank;
  if (!matches) {
    return Status::DataLoss(file + ": its snapshot metadata does not match its record (step " +
                            std::to_string(record.step) + ", rank " + std::to_string(record.rank) + " of " +
                            std::to_string(record.world_size) + ")");
  }
  EFT_ASSIGN_OR_RETURN(TrainerState state, TrainerState::FromJson(j["trainer_state"]));
  if (state.step != record.step) return Status::DataLoss(file + ": its trainer state is of another step");
  return state;
}

}  // namespace

Result<std::string> AdoptStagedSnapshot(const std::string& staged_dir, const std::string& root,
                                        const AttemptId& attempt) {
  int64_t named_step = 0;
  if (!snapshot::IsStagedDir(staged_dir, &named_step)) {
    return Status::InvalidArgument(staged_dir + ": not a staged snapshot (step-N.snapshot)");
  }
  // Adopted already, by an earlier attempt that stopped before it saved anything newer: it is step-N.
  std::error_code ec;
  if (!fs::exists(staged_dir, ec) && VerifyCheckpoint(root + "/step-" + std::to_string(named_step)).ok()) {
    return root + "/step-" + std::to_string(named_step);
  }
  EFT_ASSIGN_OR_RETURN(std::vector<snapshot::ShardRecord> records, snapshot::ReadStagedRecords(staged_dir));
  const int64_t step = records.front().step;
  const int world = records.front().world_size;
  const std::string final_dir = root + "/step-" + std::to_string(step);
  if (VerifyCheckpoint(final_dir).ok()) return final_dir;  // the same step, saved to disk too
  if (attempt.fenced()) EFT_RETURN_IF_ERROR(CheckFence(root, attempt));
  std::vector<ManifestFile> files;
  for (const snapshot::ShardRecord& r : records) {
    const std::string name = snapshot::ShardFileName(r.rank, r.world_size);
    EFT_ASSIGN_OR_RETURN(auto crc_and_size, Crc32cFile(staged_dir + "/" + name));
    if (crc_and_size.second != r.bytes || crc_and_size.first != r.crc32c) {
      char what[128];
      std::snprintf(what, sizeof what, "%lld bytes with CRC-32C %08x, its record says %lld bytes with %08x",
                    static_cast<long long>(crc_and_size.second), crc_and_size.first, static_cast<long long>(r.bytes),
                    r.crc32c);
      return Status::DataLoss(staged_dir + "/" + name + ": " + what + " (damaged while staged)");
    }
    files.push_back(ManifestFile{name, r.bytes, r.crc32c});
  }
  EFT_ASSIGN_OR_RETURN(TrainerState state,
                       StateOf(staged_dir + "/" + snapshot::ShardFileName(0, world), records.front()));
  EFT_RETURN_IF_ERROR(WriteFileDurably(staged_dir + "/" + kStateFile, state.ToJson().dump(2) + "\n"));
  EFT_ASSIGN_OR_RETURN(ManifestFile state_file, SealFile(staged_dir, kStateFile));
  files.push_back(state_file);
  EFT_RETURN_IF_ERROR(WriteSealedManifest(staged_dir, step, "sharded", world, files, attempt).status());
  if (attempt.fenced()) EFT_RETURN_IF_ERROR(CheckFence(root, attempt));
  EFT_RETURN_IF_ERROR(CommitCheckpointDir(staged_dir, final_dir, attempt));
  // The records served their purpose; the manifest now says what each file is.
  for (const snapshot::ShardRecord& r : records) {
    fs::remove(final_dir + "/" + snapshot::ShardFileName(r.rank, r.world_size) + snapshot::kRecordSuffix, ec);
  }
  return final_dir;
}

}  // namespace eft::trainer
