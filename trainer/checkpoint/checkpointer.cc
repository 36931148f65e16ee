#include "trainer/checkpoint/checkpointer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/logging.h"
#include "common/stopwatch.h"
#include "common/memory_snapshot.h"
#include "trainer/checkpoint/full_state.h"
#include "trainer/checkpoint/snapshot_adoption.h"
#include "trainer/io/safetensors.h"
#include "trainer/io/safetensors_writer.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

constexpr const char* kStateFile = "trainer_state.json";

Status WriteStateFile(const std::string& dir, const TrainerState& state) {
  return WriteFileDurably(dir + "/" + kStateFile, state.ToJson().dump(2) + "\n");
}

// The write errors no retry fixes while the storage stays as it is: the file system is full, a quota
// is reached, or a file size limit (ulimit -f) refuses the write. Status carries no errno; every
// write error of our I/O layer ends in strerror's text for it, which is matched here.
bool IsStorageFull(const Status& s) {
  if (s.ok()) return false;
  for (int err : {ENOSPC, EDQUOT, EFBIG}) {
    if (s.message().find(std::strerror(err)) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

Checkpointer::Checkpointer(CheckpointPolicy policy, Communicator* comm, ShardedLlama* model, AdamW* optimizer,
                           EventWriter* events, const DebugHooks* hooks, const Clock* clock)
    : policy_(std::move(policy)),
      comm_(comm),
      model_(model),
      optimizer_(optimizer),
      events_(events),
      hooks_(hooks),
      clock_(clock) {}

Checkpointer::~Checkpointer() {
  if (writer_.joinable()) writer_.join();
}

std::vector<UnitState> Checkpointer::Units() { return TrainableUnitStates(*model_, *optimizer_); }

std::string Checkpointer::DirFor(int64_t step, bool tmp) const {
  return policy_.root + "/step-" + std::to_string(step) + (tmp ? ".tmp" : "");
}

Result<double> Checkpointer::BeginSharded(const TrainerState& state) {
  const Stopwatch held(clock_);
  if (pending_) EFT_RETURN_IF_ERROR(Poll(false, /*wait=*/true).status());
  std::vector<UnitState> units = Units();
  // Host memory is where the state lives on the CPU: writing it in place costs neither a copy nor
  // the memory for one (12 bytes per parameter); BeforeUpdate() keeps it unchanged meanwhile.
  const bool in_place = units.front().unit->shard().device().is_cpu();
  StagedShard staged = StageShard(units, /*copy=*/!in_place);
  const std::string dir = DirFor(state.step, true);
  const std::string name = ShardFileName(comm_->rank(), comm_->world());
  const bool write_state = comm_->rank() == 0;
  pending_ = true;
  pending_step_ = state.step;
  pending_stall_ = held.Seconds();
  pending_reads_live_ = in_place;
  writer_done_ = false;
  writer_ = std::thread([this, staged = std::move(staged), dir, name, state, write_state]() mutable {
    // Written, fsynced and checksummed (as it is written) here, off the step loop: committing then
    // only needs the manifest, whose entries travel to rank 0 with the next Poll.
    const Stopwatch writing(clock_);
    hooks_->StallIfAsked("sharded_write");
    Status s;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) s = Status::IoError("creating " + dir + ": " + ec.message());
    std::vector<ManifestFile> sealed;
    WrittenFile written;
    if (s.ok()) s = WriteSafetensors(dir + "/" + name, staged.tensors, staged.metadata, &written);
    if (s.ok()) sealed.push_back(ManifestFile{name, written.bytes, written.crc32c});
    staged = StagedShard();  // the views (or copies) are not needed any more
    if (s.ok() && write_state) s = WriteStateFile(dir, state);
    if (s.ok() && write_state) {
      auto f = SealFile(dir, kStateFile);
      if (f.ok()) sealed.push_back(*f);
      s = f.status();
    }
    writer_files_ = std::move(sealed);
    writer_status_ = s;
    writer_seconds_ = writing.Seconds();
    writer_done_ = true;
  });
  return pending_stall_;
}

double Checkpointer::BeforeUpdate() {
  if (!pending_ || !pending_reads_live_ || !writer_.joinable()) return 0;
  const Stopwatch wait(clock_);
  writer_.join();
  pending_reads_live_ = false;
  const double waited = wait.Seconds();
  pending_stall_ += waited;
  return waited;
}

Result<bool> Checkpointer::Poll(bool stop_requested_here, bool wait) {
  if (pending_ && wait && writer_.joinable()) writer_.join();
  const bool done = !pending_ || writer_done_.load();
  const bool failed = pending_ && done && !writer_status_.ok();
  // [stop, done, failed, storage full, then per rank: its shard's CRC-32C and size] summed over
  // ranks. Doubles hold both exactly (< 2^53).
  const int world = comm_->world();
  at::Tensor flags = at::zeros({4 + 2 * world}, at::kDouble);
  double* f = flags.data_ptr<double>();
  f[0] = stop_requested_here ? 1 : 0;
  f[1] = done ? 1 : 0;
  f[2] = failed ? 1 : 0;
  f[3] = failed && IsStorageFull(writer_status_) ? 1 : 0;
  if (pending_ && done && !failed && !writer_files_.empty()) {
    f[4 + 2 * comm_->rank()] = writer_files_.front().crc32c;
    f[5 + 2 * comm_->rank()] = static_cast<double>(writer_files_.front().bytes);
  }
  comm_->AllReduceSum(flags);
  f = flags.data_ptr<double>();
  const bool stop = f[0] > 0;
  if (pending_ && f[1] == world) {
    if (writer_.joinable()) writer_.join();
    pending_ = false;
    if (f[2] > 0) {
      if (!writer_status_.ok()) EFT_LOG(ERROR) << "checkpoint at step " << pending_step_ << " failed: " << writer_status_;
      const int failed_ranks = static_cast<int>(f[2]);
      const std::string reason =
          !writer_status_.ok() ? writer_status_.message()
                               : std::to_string(failed_ranks) + " rank(s) could not write their files (their logs say why)";
      EFT_RETURN_IF_ERROR(SaveFailed("sharded", pending_step_, reason, f[3] > 0));
    } else {
      Status s;
      if (comm_->rank() == 0) {
        std::vector<ManifestFile> files;
        for (int r = 0; r < world; ++r) {
          files.push_back(
              {ShardFileName(r, world), static_cast<int64_t>(f[5 + 2 * r]), static_cast<uint32_t>(f[4 + 2 * r])});
        }
        files.push_back(writer_files_.back());  // trainer_state.json
        s = Commit(pending_step_, "sharded", files, writer_seconds_, pending_stall_);
        if (!s.ok()) EFT_LOG(ERROR) << "checkpoint at step " << pending_step_ << " not committed: " << s;
      }
      // Fenced off by a newer attempt: every rank stops together. Only fenced runs take part in
      // this all-reduce (every rank knows whether its run is), so unfenced ones run as before.
      if (attempt_.fenced()) {
        at::Tensor fenced = at::tensor({IsFenced(s) ? 1.0 : 0.0}, at::kDouble);
        comm_->AllReduceSum(fenced);
        if (fenced.item<double>() > 0) {
          return IsFenced(s) ? s : Fenced("rank 0 found " + attempt_.ToString() + " fenced off (see its log)");
        }
      }
      // Every rank's files were written: the streak of failures ends. Only rank 0 commits, so
      // only it knows when that fails: it reports and cleans up, but cannot stop the other ranks
      // (the streak counts the failures all ranks saw).
      consecutive_failures_ = 0;
      if (!s.ok()) ReportFailedSave("sharded", pending_step_, s.message(), IsStorageFull(s), 1);
    }
  }
  return stop;
}

int64_t Checkpointer::ReportFailedSave(const std::string& kind, int64_t step, const std::string& reason,
                                       bool storage_full, int consecutive) {
  if (comm_->rank() != 0) return 0;
  EFT_LOG(ERROR) << kind << " checkpoint at step " << step << " not committed (" << consecutive
                 << " failed in a row): " << reason;
  // Fenced off, or unable to tell: the directory is a newer attempt's now, whose save of the same
  // step may be writing into the same step-N.tmp. Nothing is touched.
  const Status held = HoldsFence();
  if (!held.ok()) EFT_LOG(WARNING) << "leaving " << policy_.root << " as it is: " << held.message();
  // Every rank is done with it: nothing half written may stay to be mistaken for a checkpoint.
  std::error_code ec;
  if (held.ok()) fs::remove_all(DirFor(step, true), ec);
  int64_t freed = 0;
  if (storage_full && held.ok()) {
    // What no resume needs: every committed checkpoint but the newest (and keep_best's).
    auto deleted = ApplyRetention(policy_.root, 1, policy_.keep_best ? BestEvaluatedCheckpoint(policy_.root, Resumable()) : "",
                                  Resumable(), attempt_);
    if (deleted.ok()) {
      for (const auto& path : *deleted) {
        if (fs::path(path).filename().string().find('.') != std::string::npos) continue;  // leftovers
        ++freed;
        events_->Emit(rank::CheckpointDeletedEvent{path, "storage full: room for the next checkpoint"});
      }
      if (freed > 0) EFT_LOG(WARNING) << "storage full: deleted " << freed << " older checkpoint(s) to make room";
    }
  }
  events_->Emit(rank::CheckpointFailedEvent{kind, step, reason, consecutive, storage_full, freed});
  return freed;
}

Status Checkpointer::SaveFailed(const std::string& kind, int64_t step, const std::string& reason, bool storage_full) {
  ++consecutive_failures_;
  ReportFailedSave(kind, step, reason, storage_full, consecutive_failures_);
  if (consecutive_failures_ < kMaxConsecutiveFailedSaves) return Status::Ok();
  const std::string what = std::to_string(consecutive_failures_) + " checkpoints in a row failed (the last at step " +
                           std::to_string(step) + ": " + reason + "); stopping rather than training on without one";
  return storage_full ? Status::ResourceExhausted("checkpoint storage " + policy_.root + " is full: " + what)
                      : Status::IoError(what);
}

Status Checkpointer::Commit(int64_t step, const std::string& kind, const std::vector<ManifestFile>& files,
                            double seconds, double stall_seconds) {
  if (comm_->rank() != 0) return Status::Ok();
  const std::string tmp = DirFor(step, true), final_dir = DirFor(step, false);
  // Fenced off already: step-N.tmp may be a newer attempt's save of the same step; not touched.
  EFT_RETURN_IF_ERROR(HoldsFence());
  // Files of an earlier attempt that crashed while writing this step are not part of this one.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(tmp, ec)) {
    std::string name = entry.path().filename().string();
    if (std::none_of(files.begin(), files.end(), [&](const ManifestFile& f) { return f.path == name; })) {
      fs::remove_all(entry.path(), ec);
    }
  }
  EFT_ASSIGN_OR_RETURN(Manifest m, WriteSealedManifest(tmp, step, kind, comm_->world(), files, attempt_));
  // The last look before the rename, so that the window in which a newer attempt can start unseen
  // is one rename wide; a directory renamed in it is never resumed from (fence.h).
  EFT_RETURN_IF_ERROR(HoldsFence());
  hooks_->StallIfAsked("commit");
  EFT_RETURN_IF_ERROR(CommitCheckpointDir(tmp, final_dir, attempt_));
  // A newer attempt that started during the rename may or may not resume from it, but this one
  // must not report it or run retention on a directory that is no longer its own.
  EFT_RETURN_IF_ERROR(HoldsFence().WithContext(final_dir + " was renamed into place as a newer attempt started"));
  EFT_LOG(INFO) << "checkpoint " << final_dir << " (" << kind << ", " << m.total_bytes() / 1048576.0 << " MiB, "
                << seconds << " s to write, the step loop waited " << stall_seconds << " s)";
  events_->Emit(rank::CheckpointEvent{kind, step, final_dir, m.total_bytes(), seconds, stall_seconds});
  auto deleted = ApplyRetention(policy_.root, std::max(1, policy_.keep_last),
                                policy_.keep_best ? BestEvaluatedCheckpoint(policy_.root, Resumable()) : std::string(),
                                Resumable(), attempt_);
  if (!deleted.ok()) {
    EFT_LOG(WARNING) << "checkpoint retention: " << deleted.status();
  } else {
    // The controller lists checkpoints; it must not offer one that no longer exists.
    for (const auto& path : *deleted) {
      const std::string name = fs::path(path).filename().string();
      if (name.find('.') != std::string::npos) continue;  // leftovers (.tmp, .replaced) were never reported
      events_->Emit(rank::CheckpointDeletedEvent{path, "retention (keep_last)"});
    }
  }
  return Status::Ok();
}

std::string Checkpointer::AdoptIfStaged(const std::string& resume_from) {
  int64_t step = 0;
  if (!snapshot::IsStagedDir(resume_from, &step)) return resume_from;
  const Stopwatch adopting(clock_);
  auto adopted = AdoptStagedSnapshot(resume_from, policy_.root, attempt_);
  if (adopted.ok()) {
    const double seconds = adopting.Seconds();
    EFT_LOG(INFO) << "memory snapshot of step " << step << " committed as " << *adopted << " in " << seconds
                  << " s (staged in " << resume_from << ")";
    // A checkpoint like any other from now on: the controller offers it to later attempts.
    auto manifest = ReadManifest(*adopted);
    if (manifest.ok()) {
      events_->Emit(rank::CheckpointEvent{"sharded", step, *adopted, manifest->total_bytes(), seconds, 0});
    }
    return *adopted;
  }
  // What the nodes staged is unusable: the disk has the newest checkpoint there is.
  EFT_LOG(WARNING) << "not resuming from the memory snapshot of step " << step << ": " << adopted.status().message()
                   << "; taking the newest checkpoint in " << policy_.root << " instead";
  return "auto";
}

Status Checkpointer::HoldsFence() const {
  if (!attempt_.fenced() || comm_->rank() != 0) return Status::Ok();
  return CheckFence(policy_.root, attempt_);
}

ResumeCheck Checkpointer::Resumable() const {
  if (!fence_) return ResumeCheck();
  return ResumableBy(*fence_, policy_.root);
}

Status Checkpointer::BeginAttempt(const AttemptId& attempt) {
  // Every rank decides alike (the same checkpoint.dir and EFT_ATTEMPT), so the broadcast is collective.
  if (!enabled() || !attempt.fenced()) return Status::Ok();
  attempt_ = attempt;
  Status raised;
  if (comm_->rank() == 0) {
    auto fence = RaiseFence(policy_.root, attempt);
    if (fence.ok()) {
      fence_ = std::move(*fence);
      EFT_LOG(INFO) << attempt.ToString() << " holds " << policy_.root << "/" << kFenceName << " ("
                    << fence_->checkpoints.size() << " earlier checkpoint(s) it may resume from)";
    } else {
      raised = fence.status();
    }
  }
  at::Tensor code = at::tensor({static_cast<int64_t>(raised.code())}, at::kLong);
  comm_->Broadcast(code, 0);
  const auto c = static_cast<StatusCode>(code.item<int64_t>());
  if (c == StatusCode::kOk) return Status::Ok();
  if (comm_->rank() == 0) return raised;
  return Status(c, "rank 0 could not take checkpoint.dir " + policy_.root + " for " + attempt.ToString() +
                       " (see its log)");
}

Status Checkpointer::SaveFull(const TrainerState& state, bool final) {
  EFT_RETURN_IF_ERROR(Poll(false, /*wait=*/true).status());
  Status s = WriteFull(state);
  if (s.ok()) {
    consecutive_failures_ = 0;
    return Status::Ok();
  }
  if (IsFenced(s)) return s;  // nothing to clean up or retry: the directory is a newer attempt's
  // Every rank knows, and agrees on whether the storage is full and whether rank 0 made room.
  bool storage_full = s.code() == StatusCode::kResourceExhausted;
  ++consecutive_failures_;
  at::Tensor freed = at::tensor(
      {static_cast<double>(ReportFailedSave("full", state.step, s.message(), storage_full, consecutive_failures_))},
      at::kDouble);
  comm_->AllReduceSum(freed);
  if (storage_full && freed.item<double>() > 0) {
    Status again = WriteFull(state);
    if (again.ok()) {
      consecutive_failures_ = 0;
      return Status::Ok();
    }
    storage_full = again.code() == StatusCode::kResourceExhausted;
    ++consecutive_failures_;
    ReportFailedSave("full", state.step, again.message(), storage_full, consecutive_failures_);
    s = again;
  }
  if (!final && consecutive_failures_ < kMaxConsecutiveFailedSaves) return Status::Ok();  // training goes on
  const std::string what = "full checkpoint at step " + std::to_string(state.step) + " failed: " + s.message();
  return storage_full ? Status::ResourceExhausted("checkpoint storage " + policy_.root + " is full: " + what)
                      : Status::IoError(what);
}

Status Checkpointer::WriteFull(const TrainerState& state) {
  const Stopwatch saving(clock_);
  const std::string tmp = DirFor(state.step, true);
  const bool writer = comm_->rank() == 0;
  Status s;
  std::vector<ManifestFile> files;
  FullSaveTimes times;
  auto written = WriteFullState(*model_, Units(), tmp, policy_.hf_files, writer, /*with_optimizer=*/true, &times,
                                policy_.full_write);
  // bench/checkpoint/full_save.sh parses rank 0's line up to "writing W s"; what follows is new.
  const bool parallel = policy_.full_write == FullWriteMode::kParallel && !model_->lora().enabled;
  if (writer && written.ok()) {
    EFT_LOG(INFO) << "full checkpoint at step " << state.step << " written in " << times.total << " s: gathers "
                  << times.gather << " s, conversion " << times.convert << " s, writing " << times.write
                  << " s, waiting for the other ranks " << times.wait << " s ("
                  << (parallel ? "parallel" : "rank0") << " write; rank 0 wrote " << times.bytes / 1048576.0 << " MiB)";
  } else if (parallel && written.ok()) {
    EFT_LOG(INFO) << "full checkpoint at step " << state.step << ": rank " << comm_->rank() << " wrote "
                  << times.bytes / 1048576.0 << " MiB in " << times.total << " s: boundary exchange " << times.gather
                  << " s, conversion " << times.convert << " s, writing " << times.write << " s, waiting " << times.wait
                  << " s";
  }
  if (!written.ok()) {
    s = written.status();
  } else if (writer) {
    files = *written;
    s = WriteStateFile(tmp, state);
    if (s.ok()) {
      auto f = SealFile(tmp, kStateFile);
      if (f.ok()) files.push_back(*f);
      s = f.status();
    }
  }
  hooks_->StallIfAsked("save");
  // Everyone learns whether the writer succeeded before it commits, so no rank goes on believing a
  // checkpoint exists that does not.
  at::Tensor failed = at::tensor({s.ok() ? 0.0 : 1.0, IsStorageFull(s) ? 1.0 : 0.0}, at::kDouble);
  comm_->AllReduceSum(failed);
  if (failed[0].item<double>() > 0) {
    const std::string reason = s.ok() ? "another rank could not write its part (its log says why)" : s.message();
    return failed[1].item<double>() > 0 ? Status::ResourceExhausted(reason) : Status::IoError(reason);
  }
  // Rank 0 commits alone; what it finds is shared, so every rank agrees the save failed or not.
  // Synchronous: the step loop waits for all of it.
  const double seconds = saving.Seconds();
  Status committed = writer ? Commit(state.step, "full", files, seconds, seconds) : Status::Ok();
  at::Tensor commit_failed = at::tensor(
      {committed.ok() ? 0.0 : 1.0, IsStorageFull(committed) ? 1.0 : 0.0, IsFenced(committed) ? 1.0 : 0.0}, at::kDouble);
  comm_->AllReduceSum(commit_failed);
  if (commit_failed[0].item<double>() == 0) return Status::Ok();
  if (commit_failed[2].item<double>() > 0) {
    return IsFenced(committed) ? committed : Fenced("rank 0 found " + attempt_.ToString() + " fenced off (see its log)");
  }
  const std::string reason = committed.ok() ? "rank 0 could not commit it (its log says why)" : committed.message();
  return commit_failed[1].item<double>() > 0 ? Status::ResourceExhausted(reason) : Status::IoError(reason);
}

Result<std::optional<TrainerState>> Checkpointer::Resume(const std::string& resume_from, const nlohmann::json& compat) {
  // Rank 0 picks and verifies the checkpoint (reading every byte once), the others take its word:
  // N ranks checksumming the same files on shared storage would read them N times.
  const Stopwatch resuming(clock_);
  constexpr int64_t kMaxPath = 4096;
  at::Tensor choice = at::zeros({kMaxPath + 2}, at::kLong);  // [status code, path length, path bytes...]
  Status resolve_status;
  int64_t* slots = choice.data_ptr<int64_t>();
  if (comm_->rank() == 0) {
    std::vector<std::string> skipped;
    auto resolved = ResolveResume(AdoptIfStaged(resume_from), policy_.root, &skipped, Resumable());
    if (resolved.ok() && resolved->empty() && !skipped.empty()) {
      // Every checkpoint there was is unusable: all progress is lost. Say it once, plainly.
      const std::string dir = policy_.root.empty() ? resume_from : policy_.root;
      if (policy_.require_resume) {
        resolved = Status::FailedPrecondition("no valid checkpoint in " + dir + " (" + std::to_string(skipped.size()) +
                                              " skipped, see the warnings above) and checkpoint.require_resume is "
                                              "set: not starting from scratch");
      } else {
        EFT_LOG(WARNING) << "no valid checkpoint in " << dir << ": starting from scratch, " << skipped.size()
                         << " checkpoint" << (skipped.size() == 1 ? "" : "s") << " skipped";
        events_->Emit(rank::NoValidCheckpointEvent{dir, static_cast<int64_t>(skipped.size())});
      }
    }
    if (!resolved.ok()) {
      resolve_status = resolved.status();
      slots[0] = static_cast<int64_t>(resolve_status.code());
    } else if (static_cast<int64_t>(resolved->size()) > kMaxPath) {
      resolve_status = Status::InvalidArgument("checkpoint path longer than 4096 bytes: " + *resolved);
      slots[0] = static_cast<int64_t>(resolve_status.code());
    } else {
      slots[1] = static_cast<int64_t>(resolved->size());
      for (size_t i = 0; i < resolved->size(); ++i) slots[2 + i] = static_cast<uint8_t>((*resolved)[i]);
    }
  }
  comm_->Broadcast(choice, 0);
  const auto code = static_cast<StatusCode>(slots[0]);
  if (code != StatusCode::kOk) {
    if (comm_->rank() == 0) return resolve_status;
    return Status(code, "rank 0 found no checkpoint to resume from (see its log)");
  }
  std::string dir(static_cast<size_t>(slots[1]), '\0');
  for (size_t i = 0; i < dir.size(); ++i) dir[i] = static_cast<char>(slots[2 + i]);
  if (dir.empty()) return std::optional<TrainerState>();
  const double verified_at = resuming.Seconds();
  EFT_ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(dir));
  std::ifstream in(dir + "/" + kStateFile);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return Status::DataLoss(dir + "/" + kStateFile + ": not JSON");
  EFT_ASSIGN_OR_RETURN(TrainerState state, TrainerState::FromJson(j));
  EFT_RETURN_IF_ERROR(CheckCompatible(state.compat, compat).WithContext("resuming from " + dir));
  if (manifest.kind == "full") {
    EFT_RETURN_IF_ERROR(LoadFullState(dir, Units()).WithContext("resuming from " + dir));
  } else {
    std::vector<std::string> files;
    for (const auto& f : manifest.files) {
      if (f.path.rfind("rank-", 0) == 0) files.push_back(dir + "/" + f.path);
    }
    EFT_RETURN_IF_ERROR(LoadShards(files, Units()).WithContext("resuming from " + dir));
  }
  optimizer_->set_step(state.optimizer_step);
  const double loaded_at = resuming.Seconds();
  if (comm_->rank() == 0) {
    EFT_LOG(INFO) << "resumed from " << dir << " (" << manifest.kind << ", step " << state.step << ", written at world size "
                  << state.world_size << ", now " << comm_->world() << "; " << manifest.total_bytes() / 1048576.0
                  << " MiB verified in " << verified_at << " s, loaded in " << loaded_at - verified_at << " s)";
    events_->Emit(rank::ResumedEvent{state.step, manifest.kind, dir, manifest.total_bytes(), verified_at,
                                     loaded_at - verified_at});
  }
  return std::optional<TrainerState>(state);
}

}  // namespace eft::trainer
