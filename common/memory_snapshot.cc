#include "common/memory_snapshot.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/crc32c.h"
#include "common/file_util.h"

namespace eft::snapshot {
namespace {

namespace fs = std::filesystem;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Copies `from` to `to` (created or truncated), returning the CRC-32C and size of what was read.
Status CopyChecksummed(const std::string& from, const std::string& to, uint32_t* crc, int64_t* bytes) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Status::NotFound(Errno("opening the held snapshot " + from));
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    const Status s = Status::IoError(Errno("creating " + to));
    ::close(in);
    return s;
  }
  Status s;
  std::vector<char> buf(8 << 20);
  *crc = 0;
  *bytes = 0;
  while (s.ok()) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = Status::IoError(Errno("reading " + from));
      break;
    }
    if (n == 0) break;
    *crc = Crc32c(buf.data(), static_cast<size_t>(n), *crc);
    *bytes += n;
    for (ssize_t done = 0; done < n && s.ok();) {
      const ssize_t w = ::write(out, buf.data() + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) s = Status::IoError(Errno("writing " + to));
      else done += w;
    }
  }
  if (s.ok() && ::fsync(out) != 0) s = Status::IoError(Errno("fsync " + to));
  ::close(in);
  if (::close(out) != 0 && s.ok()) s = Status::IoError(Errno("closing " + to));
  return s;
}

}  // namespace

std::string ShardFileName(int rank, int world) {
  char name[64];
  std::snprintf(name, sizeof name, "rank-%05d-of-%05d.safetensors", rank, world);
  return name;
}

std::string HeldStepDir(const std::string& snapshot_dir, int64_t step) {
  return snapshot_dir + "/step-" + std::to_string(step);
}

std::string StagedDir(const std::string& checkpoint_root, int64_t step) {
  return checkpoint_root + "/step-" + std::to_string(step) + kStagedSuffix;
}

bool IsStagedDir(const std::string& path, int64_t* step) {
  std::string name = fs::path(path).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(path).lexically_normal().parent_path().filename().string();  // trailing '/'
  const std::string suffix = kStagedSuffix;
  if (name.size() <= 5 + suffix.size() || name.rfind("step-", 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string digits = name.substr(5, name.size() - 5 - suffix.size());
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  if (step) *step = std::stoll(digits);
  return true;
}

nlohmann::json ShardRecord::ToJson() const {
  return {{"format", kFormat}, {"step", step},   {"rank", rank},
          {"world_size", world_size}, {"bytes", bytes}, {"crc32c", crc32c}};
}

Result<ShardRecord> ShardRecord::FromJson(const nlohmann::json& j) {
  auto integer = [&](const char* key, int64_t lo, int64_t hi, int64_t* out) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return false;
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
  };
  if (!j.is_object()) return Status::DataLoss("a snapshot record is not a JSON object");
  int64_t format = 0, step = 0, rank = 0, world = 0, bytes = 0, crc = 0;
  if (!integer("format", 1, 1000, &format) || !integer("step", 0, INT64_MAX, &step) ||
      !integer("world_size", 1, 1 << 20, &world) || !integer("rank", 0, world - 1, &rank) ||
      !integer("bytes", 0, INT64_MAX, &bytes) || !integer("crc32c", 0, UINT32_MAX, &crc)) {
    return Status::DataLoss("a snapshot record lacks a valid format, step, rank, world_size, bytes or crc32c: " +
                            j.dump());
  }
  if (format != kFormat) return Status::DataLoss("snapshot record format " + std::to_string(format) + " is not known");
  ShardRecord r;
  r.step = step;
  r.rank = static_cast<int>(rank);
  r.world_size = static_cast<int>(world);
  r.bytes = bytes;
  r.crc32c = static_cast<uint32_t>(crc);
  return r;
}

std::string ReplicationNotePath(const std::string& snapshot_dir, int rank) {
  char name[40];
  std::snprintf(name, sizeof name, "replicated-rank-%05d", rank);
  return snapshot_dir + "/" + name;
}

Status WriteReplicationNote(const std::string& snapshot_dir, int rank, const ReplicationNote& note) {
  const std::string path = ReplicationNotePath(snapshot_dir, rank);
  char line[96];
  std::snprintf(line, sizeof line, "%lld %.6f %lld\n", static_cast<long long>(note.step), note.seconds,
                static_cast<long long>(note.bytes));
  // In memory (tmpfs), read by one rank now and then: replaced whole, no fsync.
  const std::string tmp = path + ".tmp";
  EFT_RETURN_IF_ERROR(WriteStringToFile(tmp, line));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status s = Status::IoError(Errno("renaming " + tmp + " to " + path));
    ::unlink(tmp.c_str());
    return s;
  }
  return Status::Ok();
}

std::optional<ReplicationNote> ReadReplicationNote(const std::string& snapshot_dir, int rank) {
  auto text = ReadFileToString(ReplicationNotePath(snapshot_dir, rank));
  if (!text.ok()) return std::nullopt;
  ReplicationNote note;
  long long step = 0, bytes = 0;
  char end = 0;
  if (std::sscanf(text->c_str(), "%lld %lf %lld%c", &step, &note.seconds, &bytes, &end) != 4 || end != '\n' ||
      step < 0 || bytes < 0 || !(note.seconds >= 0)) {
    return std::nullopt;
  }
  note.step = step;
  note.bytes = bytes;
  return note;
}

Status StageShard(const std::string& held_file, const ShardRecord& record, const std::string& staged_dir) {
  std::error_code ec;
  fs::create_directories(staged_dir, ec);
  if (ec) return Status::IoError("creating " + staged_dir + ": " + ec.message());
  const std::string name = ShardFileName(record.rank, record.world_size);
  const std::string target = staged_dir + "/" + name;
  const std::string partial = target + ".partial";
  uint32_t crc = 0;
  int64_t bytes = 0;
  Status s = CopyChecksummed(held_file, partial, &crc, &bytes);
  if (s.ok() && (bytes != record.bytes || crc != record.crc32c)) {
    char expected[96];
    std::snprintf(expected, sizeof expected, "%lld bytes, CRC-32C %08x; read %lld bytes, CRC-32C %08x",
                  static_cast<long long>(record.bytes), record.crc32c, static_cast<long long>(bytes), crc);
    s = Status::DataLoss("the held snapshot " + held_file + " of rank " + std::to_string(record.rank) + " at step " +
                         std::to_string(record.step) + " is damaged (recorded " + expected + ")");
  }
  if (s.ok() && ::rename(partial.c_str(), target.c_str()) != 0) s = Status::IoError(Errno("renaming " + partial));
  if (!s.ok()) {
    fs::remove(partial, ec);
    return s;
  }
  EFT_RETURN_IF_ERROR(WriteFileDurably(target + kRecordSuffix, record.ToJson().dump() + "\n"));
  return FsyncDir(staged_dir);
}

Result<std::vector<ShardRecord>> ReadStagedRecords(const std::string& staged_dir) {
  std::error_code ec;
  if (!fs::is_directory(staged_dir, ec)) return Status::NotFound(staged_dir + ": no such staged snapshot");
  std::map<int, ShardRecord> by_rank;
  int world = 0;
  int64_t step = -1;
  const std::string suffix = kRecordSuffix;
  for (const auto& entry : fs::directory_iterator(staged_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    EFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(entry.path().string()));
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    auto record = ShardRecord::FromJson(j);
    if (!record.ok()) return Status::DataLoss(entry.path().string() + ": " + record.status().message());
    if (name != ShardFileName(record->rank, record->world_size) + suffix) {
      return Status::DataLoss(entry.path().string() + ": names rank " + std::to_string(record->rank) + " of " +
                              std::to_string(record->world_size));
    }
    if (world != 0 && (record->world_size != world || record->step != step)) {
      return Status::DataLoss(staged_dir + ": records of two snapshots (step " + std::to_string(step) + " at world size " +
                              std::to_string(world) + ", step " + std::to_string(record->step) + " at world size " +
                              std::to_string(record->world_size) + ")");
    }
    world = record->world_size;
    step = record->step;
    by_rank[record->rank] = *record;
  }
  if (ec) return Status::IoError("listing " + staged_dir + ": " + ec.message());
  if (world == 0) return Status::DataLoss(staged_dir + ": no staged shard");
  std::vector<ShardRecord> out;
  for (int r = 0; r < world; ++r) {
    auto it = by_rank.find(r);
    if (it == by_rank.end()) {
      return Status::DataLoss(staged_dir + ": rank " + std::to_string(r) + " of " + std::to_string(world) +
                              " was not staged (" + std::to_string(by_rank.size()) + " of " + std::to_string(world) +
                              " shards are there)");
    }
    if (!fs::exists(staged_dir + "/" + ShardFileName(r, world), ec)) {
      return Status::DataLoss(staged_dir + "/" + ShardFileName(r, world) + ": recorded but missing");
    }
    out.push_back(it->second);
  }
  return out;
}

}  // namespace eft::snapshot
