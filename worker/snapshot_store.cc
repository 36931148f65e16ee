#include "worker/snapshot_store.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "common/crc32c.h"
#include "common/logging.h"

namespace eft::worker {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxDropped = 1024;  // dropped attempts remembered, to refuse their late pushes

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Job ids become directory names: nothing that could climb out of the root.
bool ValidJobId(const std::string& id) {
  if (id.empty() || id.size() > 64 || id[0] == '.') return false;
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

std::string Describe(const AttemptId& a) { return "job " + a.first + " attempt " + std::to_string(a.second); }

// Removes `dir` if it is empty (a step directory whose last file went).
void RemoveIfEmpty(const std::string& dir) { ::rmdir(dir.c_str()); }

}  // namespace

std::string MibText(int64_t bytes) {
  char text[48];
  if (bytes < (1 << 20)) {
    std::snprintf(text, sizeof text, "%lld bytes", static_cast<long long>(bytes));
  } else {
    const double mib = static_cast<double>(bytes) / (1 << 20);
    std::snprintf(text, sizeof text, mib < 10 ? "%.1f MiB" : "%.0f MiB", mib);
  }
  return text;
}

int64_t DefaultSnapshotBudget(const std::string& meminfo) {
  std::ifstream in(meminfo);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    long long kib = 0;
    if (fields >> kib && kib > 0) return static_cast<int64_t>(kib) * 1024 / 4;
  }
  return int64_t{1} << 30;
}

int64_t FitSnapshotBudget(int64_t budget, const std::string& dir, std::string* why) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return budget;  // Open says what is wrong with the directory
  const int64_t size = static_cast<int64_t>(fs.f_blocks) * static_cast<int64_t>(fs.f_frsize);
  if (size <= 0 || budget <= size) return budget;
  *why = dir + "'s filesystem holds only " + MibText(size) + ", less than the snapshot budget of " + MibText(budget) +
         ": the budget is cut to that (a container's /dev/shm is 64 MiB unless given --shm-size; docs/docker.md)";
  return size;
}

HeldShardReader::~HeldShardReader() { ::close(fd_); }

Status HeldShardReader::Read(size_t max, std::string* out) {
  out->resize(max);
  while (true) {
    const ssize_t n = ::read(fd_, out->data(), max);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IoError(Errno("reading a held snapshot"));
    out->resize(static_cast<size_t>(n));
    return Status::Ok();
  }
}

// ---------------------------------------------------------------------------------------------

Result<std::unique_ptr<SnapshotStore>> SnapshotStore::Open(SnapshotStoreOptions options) {
  if (options.root.empty()) return Status::InvalidArgument("memory snapshots: no directory");
  if (options.budget_bytes <= 0) return Status::InvalidArgument("memory snapshots: the budget must be > 0");
  if (options.clock == nullptr) options.clock = RealClock::Get();
  std::error_code ec;
  fs::create_directories(options.root, ec);
  if (ec) return Status::IoError("creating " + options.root + ": " + ec.message());
  // A previous worker's holdings: nobody knows their records any more.
  RemoveLeftovers(options.root);
  fs::create_directories(options.root + "/staging", ec);
  if (ec) return Status::IoError("creating " + options.root + "/staging: " + ec.message());
  return std::unique_ptr<SnapshotStore>(new SnapshotStore(std::move(options)));
}

SnapshotStore::~SnapshotStore() = default;

void SnapshotStore::RemoveLeftovers(const std::string& root) {
  std::error_code ec;
  std::vector<fs::path> doomed;  // only what this class names: the root may be shared (/dev/shm)
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("job-", 0) == 0 || name == "staging") doomed.push_back(entry.path());
  }
  for (const auto& p : doomed) fs::remove_all(p, ec);
}

std::string SnapshotStore::AttemptDir(const AttemptId& a) const {
  return options_.root + "/job-" + a.first + "/attempt-" + std::to_string(a.second);
}

std::string SnapshotStore::HeldPath(const AttemptId& a, int64_t step, int rank, int world) const {
  return snapshot::HeldStepDir(AttemptDir(a) + "/held", step) + "/" + snapshot::ShardFileName(rank, world);
}

SnapshotStore::Attempt& SnapshotStore::AttemptOf(const AttemptId& a) {
  auto [it, added] = attempts_.try_emplace(a);
  if (added) it->second.first_seen = options_.clock->Now();
  return it->second;
}

std::string SnapshotStore::RoomText(int64_t need, int64_t freed) const {
  const int64_t free = std::max<int64_t>(0, options_.budget_bytes - UsedLocked() + freed);
  return "needs " + MibText(need) + ", " + MibText(free) + " of the " + MibText(options_.budget_bytes) +
         " budget free (--snapshot-memory-mb)";
}

void SnapshotStore::DropFile(Kind kind, const HeldFile& f) {
  ::unlink(f.path.c_str());
  RemoveIfEmpty(fs::path(f.path).parent_path().string());
  (kind == Kind::kOwn ? own_bytes_ : replica_bytes_) -= f.record.bytes;
}

std::set<int64_t> SnapshotStore::Required(Kind kind, const Shard& shard, int64_t keep_step) {
  std::set<int64_t> keep;
  if (shard.complete.empty()) return keep;
  keep.insert(shard.complete.rbegin()->first);
  if (keep_step > 0 && shard.complete.count(keep_step)) {
    keep.insert(keep_step);
  } else if (kind == Kind::kOwn && shard.complete.size() >= 2) {
    keep.insert(std::next(shard.complete.rbegin())->first);
  }
  return keep;
}

void SnapshotStore::Trim(Kind kind, Shard& shard, int64_t keep_step) {
  if (shard.complete.empty()) return;
  const std::set<int64_t> keep = Required(kind, shard, keep_step);
  const SteadyTime newest = shard.complete.rbegin()->second.taken;
  for (auto it = shard.complete.begin(); it != shard.complete.end();) {
    const bool history = kind == Kind::kOwn && own_history_.count() > 0 && it->second.taken + own_history_ >= newest;
    if (keep.count(it->first) || history) {
      ++it;
      continue;
    }
    DropFile(kind, it->second);
    it = shard.complete.erase(it);
  }
}

bool SnapshotStore::MakeRoom(int64_t need) {
  while (UsedLocked() + need > options_.budget_bytes) {
    // The oldest own file that is history (not required by its shard's retention).
    Shard* from = nullptr;
    std::map<int64_t, HeldFile>::iterator oldest;
    for (auto& [a, attempt] : attempts_) {
      for (auto& [key, shard] : attempt.shards) {
        if (key.second != Kind::kOwn) continue;
        const std::set<int64_t> keep = Required(Kind::kOwn, shard, attempt.keep_step);
        for (auto it = shard.complete.begin(); it != shard.complete.end(); ++it) {
          if (keep.count(it->first)) continue;
          if (from == nullptr || it->second.taken < oldest->second.taken) {
            from = &shard;
            oldest = it;
          }
          break;  // a shard's files are in step order: its first candidate is its oldest
        }
      }
    }
    if (from == nullptr) return false;
    DropFile(Kind::kOwn, oldest->second);
    from->complete.erase(oldest);
  }
  return true;
}

void SnapshotStore::SetOwnHistory(std::chrono::milliseconds window) {
  MutexLock lock(&mu_);
  if (window == own_history_) return;
  own_history_ = window;
  for (auto& [a, attempt] : attempts_) {
    for (auto& [key, shard] : attempt.shards) Trim(key.second, shard, attempt.keep_step);
  }
}

void SnapshotStore::SetKeepSteps(const std::map<AttemptId, int64_t>& keep_steps) {
  MutexLock lock(&mu_);
  for (auto& [a, attempt] : attempts_) {
    auto it = keep_steps.find(a);
    const int64_t step = it == keep_steps.end() ? 0 : it->second;
    if (step == attempt.keep_step) continue;
    attempt.keep_step = step;
    for (auto& [key, shard] : attempt.shards) Trim(key.second, shard, step);
  }
}

Result<std::string> SnapshotStore::IncomingDir(const AttemptId& a) {
  if (!ValidJobId(a.first)) return Status::InvalidArgument("job id '" + a.first + "' cannot name a directory");
  const std::string dir = AttemptDir(a) + "/incoming";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("creating " + dir + ": " + ec.message());
  MutexLock lock(&mu_);
  if (closed_) return Status::FailedPrecondition("the worker is stopping");
  dropped_.erase(a);  // ranks of it run here again: the controller wants it
  AttemptOf(a);
  return dir;
}

Status SnapshotStore::TakeOver(const AttemptId& a, int rank, const rank::MemorySnapshotEvent& e) {
  if (!ValidJobId(a.first)) return Status::InvalidArgument("job id '" + a.first + "' cannot name a directory");
  if (e.rank != rank || e.world_size < 1 || e.rank < 0 || e.rank >= e.world_size || e.step < 0 || e.bytes < 0) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " reported a snapshot of rank " +
                                   std::to_string(e.rank) + " of " + std::to_string(e.world_size) + " at step " +
                                   std::to_string(e.step) + ": not its own");
  }
  const std::string expected = snapshot::HeldStepDir(AttemptDir(a) + "/incoming", e.step) + "/" +
                               snapshot::ShardFileName(e.rank, e.world_size);
  if (fs::path(e.path).lexically_normal() != fs::path(expected).lexically_normal()) {
    return Status::InvalidArgument("the snapshot " + e.path + " is not in the rank's EFT_SNAPSHOT_DIR (expected " +
                                   expected + "); left where it is");
  }
  // From here on the file is the worker's: a refused one is deleted, so the rank cannot fill memory.
  auto refuse = [&](Status s) {
    ::unlink(expected.c_str());
    return s;
  };
  struct stat st;
  if (::stat(expected.c_str(), &st) != 0) return Status::NotFound(Errno(expected));
  if (st.st_size != e.bytes) {
    return refuse(Status::DataLoss(expected + " has " + std::to_string(st.st_size) + " bytes, the event says " +
                                   std::to_string(e.bytes)));
  }
  const std::string target = HeldPath(a, e.step, e.rank, e.world_size);
  MutexLock lock(&mu_);
  if (closed_) return refuse(Status::FailedPrecondition("the worker is stopping"));
  if (dropped_.count(a)) return refuse(Status::FailedPrecondition(Describe(a) + " is no longer kept on this node"));
  Shard& shard = AttemptOf(a).shards[{e.rank, Kind::kOwn}];
  if (auto same = shard.complete.find(e.step); same != shard.complete.end()) {
    DropFile(Kind::kOwn, same->second);
    shard.complete.erase(same);
  }
  // History goes first; then the oldest of two is dropped once this one is in, so its bytes count as free.
  MakeRoom(e.bytes);
  const int64_t freed = shard.complete.size() >= 2 ? shard.complete.begin()->second.record.bytes : 0;
  if (UsedLocked() - freed + e.bytes > options_.budget_bytes) {
    return refuse(Status::ResourceExhausted(RoomText(e.bytes, freed)));
  }
  std::error_code ec;
  fs::create_directories(fs::path(target).parent_path(), ec);
  if (ec || ::rename(expected.c_str(), target.c_str()) != 0) {
    return refuse(Status::IoError(ec ? "creating the directory of " + target + ": " + ec.message()
                                     : Errno("renaming " + expected + " to " + target)));
  }
  snapshot::ShardRecord record{e.step, e.rank, e.world_size, e.bytes, e.crc32c};
  shard.complete[e.step] = HeldFile{record, target, options_.clock->Now()};
  own_bytes_ += e.bytes;
  Trim(Kind::kOwn, shard, AttemptOf(a).keep_step);
  return Status::Ok();
}

Result<std::unique_ptr<SnapshotStore::Receiver>> SnapshotStore::BeginReplica(const v1::SnapshotHeader& h) {
  if (!ValidJobId(h.job_id()) || h.attempt() < 0 || h.world_size() < 1 || h.rank() < 0 || h.rank() >= h.world_size() ||
      h.step() < 0 || h.bytes() < 0) {
    return Status::InvalidArgument("a snapshot header without a valid job, attempt, step, rank, world size or size");
  }
  const AttemptId a{h.job_id(), h.attempt()};
  const std::string what = "rank " + std::to_string(h.rank()) + " of " + Describe(a);
  MutexLock lock(&mu_);
  if (closed_) return Status::FailedPrecondition("the worker is stopping");
  if (dropped_.count(a)) return Status::FailedPrecondition(Describe(a) + " is no longer kept on this node");
  Shard& shard = AttemptOf(a).shards[{h.rank(), Kind::kReplica}];
  if (shard.receiving != 0) {
    return Status::AlreadyExists("step " + std::to_string(receives_.at(shard.receiving).step) + " of " + what +
                                 " is being received");
  }
  if (!shard.complete.empty() && shard.complete.rbegin()->first >= h.step()) {
    return Status::AlreadyExists("step " + std::to_string(shard.complete.rbegin()->first) + " of " + what +
                                 " is held here already");
  }
  if (!MakeRoom(h.bytes())) return Status::ResourceExhausted(RoomText(h.bytes(), 0));
  Receive r;
  r.attempt = a;
  r.rank = h.rank();
  r.step = h.step();
  r.reserved = h.bytes();
  r.path = HeldPath(a, h.step(), h.rank(), h.world_size());
  r.partial = r.path + ".partial";
  std::error_code ec;
  fs::create_directories(fs::path(r.path).parent_path(), ec);
  if (ec) return Status::IoError("creating the directory of " + r.path + ": " + ec.message());
  const int fd = ::open(r.partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(Errno("creating " + r.partial));
  const uint64_t id = next_id_++;
  receives_[id] = std::move(r);
  shard.receiving = id;
  receiving_bytes_ += h.bytes();
  snapshot::ShardRecord record{h.step(), h.rank(), h.world_size(), h.bytes(), h.crc32c()};
  return std::unique_ptr<Receiver>(new Receiver(this, id, fd, record));
}

void SnapshotStore::EndReceive(uint64_t id) {
  auto it = receives_.find(id);
  if (it == receives_.end()) return;
  receiving_bytes_ -= it->second.reserved;
  if (auto a = attempts_.find(it->second.attempt); a != attempts_.end()) {
    auto s = a->second.shards.find({it->second.rank, Kind::kReplica});
    if (s != a->second.shards.end() && s->second.receiving == id) s->second.receiving = 0;
  }
  receives_.erase(it);
}

Status SnapshotStore::WriteReceived(uint64_t id, int fd, const std::string& data) {
  {
    MutexLock lock(&mu_);
    auto it = receives_.find(id);
    if (it == receives_.end() || it->second.cancelled) {
      return Status::FailedPrecondition("its attempt is no longer kept on this node");
    }
  }
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IoError(Errno("writing a received snapshot"));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status SnapshotStore::CommitReceived(uint64_t id, const snapshot::ShardRecord& record) {
  MutexLock lock(&mu_);
  auto it = receives_.find(id);
  if (it == receives_.end()) return Status::Internal("unknown transfer");
  const Receive r = it->second;
  if (r.cancelled || attempts_.count(r.attempt) == 0) {
    ::unlink(r.partial.c_str());
    EndReceive(id);
    return Status::FailedPrecondition(Describe(r.attempt) + " is no longer kept on this node");
  }
  if (::rename(r.partial.c_str(), r.path.c_str()) != 0) {
    const Status s = Status::IoError(Errno("renaming " + r.partial));
    ::unlink(r.partial.c_str());
    EndReceive(id);
    return s;
  }
  EndReceive(id);
  Attempt& attempt = attempts_.at(r.attempt);
  Shard& shard = attempt.shards[{r.rank, Kind::kReplica}];
  shard.complete[record.step] = HeldFile{record, r.path};
  replica_bytes_ += record.bytes;
  Trim(Kind::kReplica, shard, attempt.keep_step);
  return Status::Ok();
}

void SnapshotStore::AbandonReceived(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = receives_.find(id);
  if (it == receives_.end()) return;
  ::unlink(it->second.partial.c_str());
  RemoveIfEmpty(fs::path(it->second.path).parent_path().string());
  EndReceive(id);
}

SnapshotStore::Receiver::~Receiver() {
  CloseFd();
  if (!done_) store_->AbandonReceived(id_);
}

void SnapshotStore::Receiver::CloseFd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status SnapshotStore::Receiver::Write(const std::string& data) {
  if (done_) return Status::FailedPrecondition("the transfer is over");
  if (received_ + static_cast<int64_t>(data.size()) > record_.bytes) {
    return Status::DataLoss("damaged in transit: more bytes than the " + std::to_string(record_.bytes) + " announced");
  }
  EFT_RETURN_IF_ERROR(store_->WriteReceived(id_, fd_, data));
  crc_ = Crc32c(data.data(), data.size(), crc_);
  received_ += static_cast<int64_t>(data.size());
  return Status::Ok();
}

Status SnapshotStore::Receiver::Commit() {
  if (done_) return Status::FailedPrecondition("the transfer is over");
  done_ = true;
  CloseFd();
  if (received_ != record_.bytes || crc_ != record_.crc32c) {
    store_->AbandonReceived(id_);
    char text[160];
    std::snprintf(text, sizeof text, "received %lld bytes with CRC-32C %08x, the header says %lld bytes, %08x",
                  static_cast<long long>(received_), crc_, static_cast<long long>(record_.bytes), record_.crc32c);
    return Status::DataLoss(std::string("damaged in transit: ") + text);
  }
  return store_->CommitReceived(id_, record_);
}

void SnapshotStore::NoteReplicated(const AttemptId& a, int rank, const snapshot::ReplicationNote& note) {
  const std::string incoming = AttemptDir(a) + "/incoming";
  MutexLock lock(&mu_);  // against DropAttempt removing the directory meanwhile
  if (closed_ || attempts_.count(a) == 0 || !fs::is_directory(incoming)) return;
  const Status s = snapshot::WriteReplicationNote(incoming, rank, note);
  if (!s.ok()) EFT_LOG(WARNING) << "cannot tell rank " << rank << " of " << Describe(a) << " its replication time: " << s;
}

Result<std::unique_ptr<HeldShardReader>> SnapshotStore::OpenOwn(const AttemptId& a, int rank, int64_t step) {
  MutexLock lock(&mu_);
  auto at = attempts_.find(a);
  if (at != attempts_.end()) {
    auto shard = at->second.shards.find({rank, Kind::kOwn});
    if (shard != at->second.shards.end()) {
      auto f = shard->second.complete.find(step);
      if (f != shard->second.complete.end()) {
        const int fd = ::open(f->second.path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return Status::IoError(Errno("opening " + f->second.path));
        return std::make_unique<HeldShardReader>(fd, f->second.record);
      }
    }
  }
  return Status::NotFound("step " + std::to_string(step) + " of rank " + std::to_string(rank) + " of " + Describe(a) +
                          " is no longer held");
}

std::vector<v1::HeldSnapshot> SnapshotStore::Held() const {
  // (job, attempt, step, world size) -> ranks, bytes
  std::map<std::tuple<std::string, int, int64_t, int>, std::pair<std::set<int>, int64_t>> groups;
  {
    MutexLock lock(&mu_);
    for (const auto& [a, attempt] : attempts_) {
      for (const auto& [key, shard] : attempt.shards) {
        for (const auto& [step, f] : shard.complete) {
          auto& g = groups[{a.first, a.second, step, f.record.world_size}];
          if (g.first.insert(f.record.rank).second) g.second += f.record.bytes;
        }
      }
    }
  }
  std::vector<v1::HeldSnapshot> out;
  for (const auto& [key, g] : groups) {
    v1::HeldSnapshot h;
    h.set_job_id(std::get<0>(key));
    h.set_attempt(std::get<1>(key));
    h.set_step(std::get<2>(key));
    h.set_world_size(std::get<3>(key));
    for (int r : g.first) h.add_ranks(r);
    h.set_bytes(g.second);
    out.push_back(std::move(h));
  }
  return out;
}

v1::StageResult SnapshotStore::Stage(const v1::StageOrder& order) {
  v1::StageResult result;
  result.set_job_id(order.job_id());
  result.set_attempt(order.attempt());
  result.set_step(order.step());
  *result.mutable_ranks() = order.ranks();
  if (order.dir().empty()) {
    result.set_error("the stage order names no directory");
    return result;
  }
  const AttemptId a{order.job_id(), order.attempt()};
  std::vector<std::pair<std::string, snapshot::ShardRecord>> links;  // staging link, record
  std::string missing, error;
  {
    MutexLock lock(&mu_);
    auto at = attempts_.find(a);
    for (int rank : order.ranks()) {
      const HeldFile* held = nullptr;
      for (Kind kind : {Kind::kOwn, Kind::kReplica}) {
        if (at == attempts_.end() || held != nullptr) break;
        auto shard = at->second.shards.find({rank, kind});
        if (shard == at->second.shards.end()) continue;
        auto f = shard->second.complete.find(order.step());
        if (f != shard->second.complete.end() && f->second.record.world_size == order.world_size()) held = &f->second;
      }
      if (held == nullptr) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(rank);
        continue;
      }
      const std::string link = options_.root + "/staging/" + std::to_string(next_id_++);
      if (::link(held->path.c_str(), link.c_str()) != 0) {
        error = Errno("linking " + held->path + " to " + link);
        break;
      }
      links.emplace_back(link, held->record);
    }
  }
  if (!missing.empty()) {
    error = "rank " + missing + " of " + Describe(a) + " at step " + std::to_string(order.step()) + " (world size " +
            std::to_string(order.world_size()) + ") is not held on this node";
  }
  for (const auto& [link, record] : links) {
    if (error.empty()) {
      const Status s = snapshot::StageShard(link, record, order.dir());
      if (!s.ok()) error = s.message();
    }
    ::unlink(link.c_str());
  }
  result.set_error(error);
  return result;
}

void SnapshotStore::DropAttempt(const AttemptId& a) {
  auto it = attempts_.find(a);
  if (it == attempts_.end()) return;
  for (auto& [id, r] : receives_) {
    if (r.attempt == a) r.cancelled = true;  // the transfer fails; its reservation ends with it
  }
  for (const auto& [key, shard] : it->second.shards) {
    for (const auto& [step, f] : shard.complete) (key.second == Kind::kOwn ? own_bytes_ : replica_bytes_) -= f.record.bytes;
  }
  std::error_code ec;
  fs::remove_all(AttemptDir(a), ec);
  RemoveIfEmpty(options_.root + "/job-" + a.first);
  attempts_.erase(it);
  if (dropped_.insert(a).second) dropped_order_.push_back(a);
  while (dropped_order_.size() > kMaxDropped) {
    dropped_.erase(dropped_order_.front());
    dropped_order_.pop_front();
  }
}

void SnapshotStore::Keep(const std::vector<AttemptId>& attempts) {
  const std::set<AttemptId> keep(attempts.begin(), attempts.end());
  const SteadyTime now = options_.clock->Now();
  MutexLock lock(&mu_);
  for (const AttemptId& a : keep) {
    dropped_.erase(a);
    if (auto it = attempts_.find(a); it != attempts_.end()) it->second.listed = true;
  }
  std::vector<AttemptId> drop;
  for (const auto& [a, attempt] : attempts_) {
    if (keep.count(a) == 0 && (attempt.listed || now - attempt.first_seen >= options_.unlisted_grace)) drop.push_back(a);
  }
  for (const AttemptId& a : drop) {
    int64_t bytes = 0;
    for (const auto& [key, shard] : attempts_.at(a).shards) {
      for (const auto& [step, f] : shard.complete) bytes += f.record.bytes;
    }
    if (bytes > 0) {
      EFT_LOG(INFO) << "deleting the memory snapshots of " << Describe(a) << " (" << MibText(bytes)
                    << "): the controller no longer needs them";
    }
    DropAttempt(a);
  }
}

void SnapshotStore::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
  std::vector<AttemptId> all;
  for (const auto& [a, attempt] : attempts_) all.push_back(a);
  for (const AttemptId& a : all) DropAttempt(a);
  RemoveLeftovers(options_.root);
  RemoveIfEmpty(options_.root);
}

SnapshotStoreStats SnapshotStore::Stats() const {
  MutexLock lock(&mu_);
  return {own_bytes_, replica_bytes_, receiving_bytes_, options_.budget_bytes};
}

}  // namespace eft::worker
