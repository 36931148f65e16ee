#include "trainer/checkpoint/memory_snapshot.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "common/memory_snapshot.h"
#include "common/stopwatch.h"
#include "trainer/io/safetensors.h"
#include "trainer/io/safetensors_writer.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

std::string Mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  return text;
}

}  // namespace

MemorySnapshotter::MemorySnapshotter(MemorySnapshotPolicy policy, Communicator* comm, ShardedLlama* model,
                                     AdamW* optimizer, EventWriter* events, const DebugHooks* hooks,
                                     const Clock* clock)
    : policy_(std::move(policy)),
      comm_(comm),
      model_(model),
      optimizer_(optimizer),
      events_(events),
      hooks_(hooks),
      clock_(clock) {
  enabled_ = !policy_.dir.empty() && policy_.every_steps != 0;
  if (enabled_ && policy_.every_steps > 0) interval_ = policy_.every_steps;
}

MemorySnapshotter::~MemorySnapshotter() {
  if (writer_.joinable()) writer_.join();
}

void MemorySnapshotter::AfterStep(const TrainerState& state, double step_seconds) {
  if (!enabled_) return;
  if (interval_ == 0) {
    // auto: the first boundary of the attempt takes a snapshot to measure, the next one decides.
    if (!measuring_) {
      measuring_ = true;
      Start(state);
      return;
    }
    DecideInterval(step_seconds);
    if (!enabled_) return;
  } else if (policy_.every_steps < 0 && state.step % kRedecideEvery == 0) {
    DecideInterval(step_seconds, /*first=*/false);
    if (!enabled_) return;
  }
  if (state.step % interval_ == 0) Start(state);
}

void MemorySnapshotter::DecideInterval(double step_seconds, bool first) {
  // Every rank reaches this boundary: the all-reduce is collective. A rank whose write failed offers
  // a cost of -1, and snapshots stop everywhere (a step every rank lacks is no snapshot). Each rank
  // puts its replication time in its own slot, so the sum carries every rank's.
  Join();
  const int world = comm_->world();
  std::vector<double> values(3 + static_cast<size_t>(world), 0.0);
  values[0] = failed_ ? 0.0 : last_cost_seconds_;
  values[1] = step_seconds;
  values[2] = failed_ ? 1.0 : 0.0;
  if (!first) {
    if (auto note = snapshot::ReadReplicationNote(policy_.dir, comm_->rank())) values[3 + comm_->rank()] = note->seconds;
  }
  at::Tensor sums = at::tensor(values, at::kDouble);
  comm_->AllReduceSum(sums);
  const double cost = sums[0].item<double>() / world, step = sums[1].item<double>() / world;
  if (sums[2].item<double>() > 0) {
    enabled_ = false;
    if (comm_->rank() == 0) EFT_LOG(WARNING) << "memory snapshots off for this attempt: a rank could not write one";
    return;
  }
  double replication = 0;
  for (int r = 0; r < world; ++r) replication = std::max(replication, sums[3 + r].item<double>());
  const double budget = kOverheadBudget * std::max(step, 1e-9);
  int64_t interval = static_cast<int64_t>(std::ceil(cost / budget - 1e-9));
  if (replication > 0) interval = std::max(interval, static_cast<int64_t>(std::ceil(replication / std::max(step, 1e-9) - 1e-9)));
  interval = std::clamp<int64_t>(interval, 1, kMaxAutoInterval);
  if (!first && interval == interval_) return;
  interval_ = interval;
  if (comm_->rank() == 0) {
    std::ostringstream why;
    why << "a snapshot costs " << cost << " s, a step takes " << step << " s; budget " << kOverheadBudget * 100
        << "% of a step";
    if (replication > 0) why << "; sending one to a peer takes " << replication << " s, and each must arrive before the next";
    EFT_LOG(INFO) << "memory snapshots " << (first ? "" : "now ") << "every " << interval_ << " step"
                  << (interval_ == 1 ? "" : "s") << " (checkpoint.memory_every_steps auto: " << why.str() << ")";
  }
}

std::string MemorySnapshotter::OwnShardPath(int64_t step) const {
  return snapshot::HeldStepDir(policy_.dir, step) + "/" + snapshot::ShardFileName(comm_->rank(), comm_->world());
}

void MemorySnapshotter::Start(const TrainerState& state) {
  const Stopwatch held(clock_);
  Join();  // a snapshot still being written (a GPU's copy path) is finished first
  if (failed_) return;
  WaitForTakeOver();
  std::vector<UnitState> units = TrainableUnitStates(*model_, *optimizer_);
  const bool in_place = units.front().unit->shard().device().is_cpu();
  StagedShard staged = StageShard(units, /*copy=*/!in_place);
  const nlohmann::json record = {{"format", snapshot::kFormat},
                                 {"step", state.step},
                                 {"rank", comm_->rank()},
                                 {"world_size", comm_->world()},
                                 {"job", policy_.attempt.job},
                                 {"attempt", policy_.attempt.attempt},
                                 {"trainer_state", state.ToJson()}};
  staged.metadata[snapshot::kMetadataKey] = record.dump();
  pending_ = true;
  pending_step_ = state.step;
  pending_reads_live_ = in_place;
  pending_stall_ = held.Seconds();
  const std::string dir = snapshot::HeldStepDir(policy_.dir, state.step);
  const std::string path = OwnShardPath(state.step);
  writer_ = std::thread([this, staged = std::move(staged), dir, path, step = state.step]() mutable {
    const Stopwatch writing(clock_);
    hooks_->StallIfAsked("memory_snapshot");
    Status s;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) s = Status::IoError("creating " + dir + ": " + ec.message());
    WrittenFile written;
    // Memory (tmpfs): nothing to gain from fsyncs, and a directory on a disk (tests) must not make
    // every step wait on it.
    if (s.ok()) s = WriteSafetensors(path, staged.tensors, staged.metadata, &written, Durability::kVolatile);
    staged = StagedShard();
    writer_status_ = s;
    writer_seconds_ = writing.Seconds();
    writer_bytes_ = written.bytes;
    if (!s.ok()) return;
    // This rank's own files beyond the newest two (the worker normally took them over already).
    own_steps_.push_back(step);
    while (own_steps_.size() > 2) {
      fs::remove(OwnShardPath(own_steps_.front()), ec);
      // The step's directory only when empty: other ranks of this node may still have files there.
      fs::remove(snapshot::HeldStepDir(policy_.dir, own_steps_.front()), ec);
      own_steps_.pop_front();
    }
    rank::MemorySnapshotEvent e;
    e.step = step;
    e.rank = comm_->rank();
    e.world_size = comm_->world();
    e.path = path;
    e.bytes = written.bytes;
    e.crc32c = written.crc32c;
    e.seconds = writer_seconds_;
    e.stall_seconds = pending_stall_;
    events_->Emit(e);
  });
}

void MemorySnapshotter::WaitForTakeOver() {
  if (own_steps_.empty()) return;
  const int64_t step = own_steps_.back();
  const std::string previous = OwnShardPath(step);
  std::error_code ec;
  if (!fs::exists(previous, ec)) {
    worker_takes_over_ = true;
    return;
  }
  if (!worker_takes_over_) return;
  const Stopwatch waited;  // real time, whatever clock_ is: this sleeps
  bool said = false;
  while (fs::exists(previous, ec)) {
    if (waited.Seconds() >= kTakeOverPatience) {
      EFT_LOG(WARNING) << "the worker has not taken over the memory snapshot of step " << step << " in "
                       << kTakeOverPatience << " s; snapshots go on without waiting for it";
      worker_takes_over_ = false;
      return;
    }
    if (!said && waited.Seconds() >= 1.0) {
      EFT_LOG(WARNING) << "waiting for this node's worker to take over the memory snapshot of step " << step
                       << " before the next (a frozen worker stops its ranks here)";
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (said) EFT_LOG(INFO) << "the worker took over the memory snapshot of step " << step << " after " << waited.Seconds() << " s";
}

double MemorySnapshotter::Join() {
  if (!pending_) return 0;
  const Stopwatch wait(clock_);
  if (writer_.joinable()) writer_.join();
  pending_ = false;
  const double waited = wait.Seconds();
  if (!writer_status_.ok()) {
    EFT_LOG(WARNING) << "memory snapshot at step " << pending_step_ << " failed: " << writer_status_.message()
                     << "; this rank takes no more memory snapshots in this attempt, disk checkpoints go on";
    failed_ = true;
    return waited;
  }
  last_cost_seconds_ = pending_stall_ + writer_seconds_;
  if (!logged_first_ && comm_->rank() == 0) {
    logged_first_ = true;
    EFT_LOG(INFO) << "memory snapshot at step " << pending_step_ << ": " << Mib(writer_bytes_) << " on rank 0 in "
                  << writer_seconds_ << " s, into " << policy_.dir;
  }
  return waited;
}

double MemorySnapshotter::BeforeUpdate() {
  if (!pending_ || !pending_reads_live_) return 0;
  return Join();
}

void MemorySnapshotter::Wait() { Join(); }

}  // namespace eft::trainer
