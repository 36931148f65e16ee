#include "trainer/checkpoint/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "common/crc32c.h"
#include "common/file_util.h"
#include "common/json_int.h"
#include "common/logging.h"
#include "trainer/checkpoint/fence.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Status Errno(const std::string& what, const std::string& path) {
  return Status::IoError(what + " " + path + ": " + std::strerror(errno));
}

// Parses "step-123" (not "step-123.tmp", not "step-abc"); -1 otherwise.
int64_t StepOf(const std::string& name, const std::string& suffix) {
  if (name.rfind("step-", 0) != 0 || name.size() <= 5 + suffix.size()) return -1;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return -1;
  const std::string digits = name.substr(5, name.size() - 5 - suffix.size());
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

// Manifest present and every file of the size it says: what retention trusts without reading
// every byte back (the newest checkpoint was just written and checksummed by this process).
// Returns the manifest, or nullopt when the directory does not look complete.
std::optional<Manifest> LooksComplete(const std::string& dir) {
  Result<std::string> text = ReadFileToString(dir + "/" + kManifestName);
  if (!text.ok()) return std::nullopt;
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  auto m = Manifest::FromJson(j);
  if (!m.ok()) return std::nullopt;
  for (const auto& f : m->files) {
    std::error_code ec;
    auto size = fs::file_size(fs::path(dir) / f.path, ec);
    if (ec || static_cast<int64_t>(size) != f.bytes) return std::nullopt;
  }
  return *m;
}

}  // namespace

Result<std::pair<uint32_t, int64_t>> Crc32cFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? Status::NotFound(path + ": missing") : Errno("opening", path);
  std::vector<char> buf(4 << 20);
  uint32_t crc = 0;
  int64_t total = 0;
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = Errno("reading", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    crc = Crc32c(buf.data(), static_cast<size_t>(n), crc);
    total += n;
  }
  ::close(fd);
  return std::make_pair(crc, total);
}

std::string AttemptId::ToString() const {
  if (!fenced()) return "a run without an attempt number";
  return "attempt " + std::to_string(attempt) + (job.empty() ? std::string() : " of job " + job);
}

int64_t Manifest::total_bytes() const {
  int64_t n = 0;
  for (const auto& f : files) n += f.bytes;
  return n;
}

json Manifest::ToJson() const {
  json list = json::array();
  for (const auto& f : files) list.push_back({{"path", f.path}, {"bytes", f.bytes}, {"crc32c", f.crc32c}});
  json j = {{"format", 1}, {"step", step}, {"kind", kind}, {"world_size", world_size}};
  // Unfenced manifests stay what they were before fencing: byte for byte.
  if (writer.fenced()) {
    if (!writer.job.empty()) j["job"] = writer.job;
    j["attempt"] = writer.attempt;
  }
  j["files"] = list;
  return j;
}

namespace {

bool IsPathInsideDir(const std::string& path) {
  if (path.empty() || path.front() == '/') return false;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

Result<Manifest> Manifest::FromJson(const json& j) {
  Manifest m;
  try {
    if (JsonInt<int>(j.at("format")) != 1) return Status::DataLoss("unknown manifest format");
    m.step = JsonInt<int64_t>(j.at("step"));
    m.kind = j.at("kind").get<std::string>();
    m.world_size = JsonInt<int>(j.at("world_size"));
    // Absent in manifests written before fencing, and by unfenced runs: attempt 0.
    if (j.contains("attempt")) m.writer.attempt = JsonInt<int>(j.at("attempt"));
    if (j.contains("job")) m.writer.job = j.at("job").get<std::string>();
    if (m.writer.attempt < 0) return Status::DataLoss("manifest has a negative attempt");
    for (const auto& f : j.at("files")) {
      ManifestFile mf{f.at("path").get<std::string>(), JsonInt<int64_t>(f.at("bytes")), JsonInt<uint32_t>(f.at("crc32c"))};
      // A manifest only ever names files inside its own directory (or a folder of it, as a model's
      // additional_chat_templates/): relative, with no empty, "." or ".." component.
      if (!IsPathInsideDir(mf.path)) {
        return Status::DataLoss("manifest names a file outside the checkpoint: " + mf.path);
      }
      m.files.push_back(std::move(mf));
    }
  } catch (const std::exception& e) {
    return Status::DataLoss(std::string("malformed manifest: ") + e.what());
  }
  if (m.kind != "sharded" && m.kind != "full") return Status::DataLoss("manifest has unknown kind " + m.kind);
  return m;
}

Result<ManifestFile> SealFile(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  EFT_RETURN_IF_ERROR(FsyncFile(path));
  EFT_ASSIGN_OR_RETURN(auto crc_size, Crc32cFile(path));
  return ManifestFile{name, crc_size.second, crc_size.first};
}

Result<Manifest> WriteManifest(const std::string& dir, int64_t step, const std::string& kind, int world_size,
                               const std::vector<std::string>& files, const AttemptId& writer) {
  std::vector<ManifestFile> sealed;
  for (const auto& name : files) {
    EFT_ASSIGN_OR_RETURN(ManifestFile f, SealFile(dir, name));
    sealed.push_back(std::move(f));
  }
  return WriteSealedManifest(dir, step, kind, world_size, std::move(sealed), writer);
}

Result<Manifest> WriteSealedManifest(const std::string& dir, int64_t step, const std::string& kind,
                                     int world_size, std::vector<ManifestFile> files, const AttemptId& writer) {
  Manifest m;
  m.step = step;
  m.kind = kind;
  m.world_size = world_size;
  m.writer = writer;
  m.files = std::move(files);
  EFT_RETURN_IF_ERROR(WriteFileDurably(dir + "/" + kManifestName, m.ToJson().dump(2) + "\n"));
  EFT_RETURN_IF_ERROR(FsyncDir(dir));
  return m;
}

Result<Manifest> ReadManifest(const std::string& dir) {
  Result<std::string> text = ReadFileToString(dir + "/" + kManifestName);
  if (!text.ok()) return Status::NotFound(dir + ": no " + std::string(kManifestName) + " manifest (incomplete checkpoint)");
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Status::DataLoss(dir + "/" + kManifestName + ": not JSON (truncated?)");
  auto m = Manifest::FromJson(j);
  if (!m.ok()) return m.status().WithContext(dir + "/" + kManifestName);
  return m;
}

Result<Manifest> VerifyCheckpoint(const std::string& dir) {
  EFT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
  for (const auto& f : m.files) {
    const std::string path = dir + "/" + f.path;
    auto crc_size = Crc32cFile(path);
    if (!crc_size.ok()) {
      return Status::DataLoss(crc_size.status().code() == StatusCode::kNotFound
                                  ? path + ": listed in the manifest but missing"
                                  : crc_size.status().message());
    }
    if (crc_size->second != f.bytes) {
      return Status::DataLoss(path + ": " + std::to_string(crc_size->second) + " bytes, the manifest says " +
                              std::to_string(f.bytes) + " (truncated?)");
    }
    if (crc_size->first != f.crc32c) return Status::DataLoss(path + ": checksum mismatch (corrupted)");
  }
  return m;
}

std::vector<CheckpointDir> ListCheckpointDirs(const std::string& root) {
  std::vector<CheckpointDir> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory(ec)) continue;
    int64_t step = StepOf(entry.path().filename().string(), "");
    if (step >= 0) out.push_back({step, entry.path().string()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return out;
}

namespace {

// The check first (a manifest is a few hundred bytes), then every byte of every file.
Status Usable(const std::string& dir, const ResumeCheck& resumable) {
  if (resumable) {
    EFT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
    if (std::string why = resumable(dir, m); !why.empty()) return Status::FailedPrecondition(why);
  }
  return VerifyCheckpoint(dir).status();
}

}  // namespace

std::string NewestValidCheckpoint(const std::string& root, std::vector<std::string>* skipped,
                                  const ResumeCheck& resumable) {
  for (const auto& d : ListCheckpointDirs(root)) {
    Status s = Usable(d.path, resumable);
    if (s.ok()) return d.path;
    EFT_LOG(WARNING) << "skipping checkpoint " << d.path << ": " << s.message();
    if (skipped) skipped->push_back(d.path);
  }
  return "";
}

Result<std::string> ResolveResume(const std::string& resume_from, const std::string& root,
                                  std::vector<std::string>* skipped, const ResumeCheck& resumable) {
  if (resume_from.empty()) return std::string();
  if (resume_from == "auto") {
    if (root.empty()) return Status::InvalidArgument("resume from auto needs checkpoint.dir");
    return NewestValidCheckpoint(root, skipped, resumable);
  }
  Status usable = Usable(resume_from, resumable);
  if (usable.ok()) return resume_from;
  EFT_LOG(WARNING) << "skipping checkpoint " << resume_from << ": " << usable.message();
  if (skipped) skipped->push_back(resume_from);
  // Fall back to the newest valid checkpoint of the same run: the one asked for may have been
  // damaged after it was reported, or deleted by retention in an attempt whose later checkpoints
  // were never reported (its node lost to the controller while its ranks trained on). A newer one
  // came from the same deterministic steps, so it is as good a start and loses fewer of them; the
  // fence keeps out any that attempt committed after a newer one started (fence.h).
  const fs::path path = fs::path(resume_from).lexically_normal();
  std::string parent = (path.has_filename() ? path : path.parent_path()).parent_path().string();
  const std::string name = (path.has_filename() ? path : path.parent_path()).filename().string();
  if (StepOf(name, "") < 0 && !root.empty()) parent = root;
  std::string fallback = NewestValidCheckpoint(parent, skipped, resumable);
  if (fallback.empty()) {
    return Status::NotFound("cannot resume from " + resume_from + " (" + usable.message() +
                            ") and no valid checkpoint exists in " + parent);
  }
  return fallback;
}

Status CommitCheckpointDir(const std::string& tmp, const std::string& final_dir, const AttemptId& writer) {
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    // A newer attempt's checkpoint is never replaced by an older attempt (one that has not yet
    // noticed it was fenced off): it may be what the newer attempt resumes from.
    if (writer.fenced()) {
      auto existing = ReadManifest(final_dir);
      if (existing.ok() && existing->writer.fenced() && existing->writer.job == writer.job &&
          existing->writer.attempt > writer.attempt) {
        return Fenced(final_dir + " was committed by " + existing->writer.ToString() + ", newer than this " +
                      writer.ToString() + ": not replacing it");
      }
    }
    // A checkpoint of this step from an earlier attempt (possibly damaged): the new one replaces it.
    const std::string old = final_dir + ".replaced";
    fs::remove_all(old, ec);
    fs::rename(final_dir, old, ec);
    if (ec) return Status::IoError("moving aside " + final_dir + ": " + ec.message());
  }
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) return Errno("renaming", tmp);
  const std::string parent = fs::path(final_dir).parent_path().string();
  EFT_RETURN_IF_ERROR(FsyncDir(parent.empty() ? "." : parent));
  fs::remove_all(final_dir + ".replaced", ec);
  return Status::Ok();
}

std::string BestEvaluatedCheckpoint(const std::string& root, const ResumeCheck& resumable) {
  std::string best;
  double best_loss = 0;
  for (const auto& d : ListCheckpointDirs(root)) {  // newest first: a later equal loss does not win
    std::optional<Manifest> m = LooksComplete(d.path);
    if (!m || (resumable && !resumable(d.path, *m).empty())) continue;
    Result<std::string> text = ReadFileToString(d.path + "/trainer_state.json");
    if (!text.ok()) continue;
    nlohmann::json state = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!state.is_object() || !state.contains("eval_loss") || !state["eval_loss"].is_number()) continue;
    const double loss = state["eval_loss"].get<double>();
    if (!std::isfinite(loss)) continue;
    if (best.empty() || loss < best_loss) {
      best = d.path;
      best_loss = loss;
    }
  }
  return best;
}

Result<std::vector<std::string>> ApplyRetention(const std::string& root, int keep_last, const std::string& also_keep,
                                                const ResumeCheck& resumable, const AttemptId& self) {
  if (keep_last < 1) return Status::InvalidArgument("keep_last must be at least 1");
  std::vector<std::string> deleted;
  std::set<std::string> keep;       // the newest keep_last checkpoints
  std::set<std::string> not_ours;   // rejected by the check and not this attempt's to delete
  int64_t newest_kept = -1;
  auto dirs = ListCheckpointDirs(root);
  for (const auto& d : dirs) {
    std::optional<Manifest> m = LooksComplete(d.path);
    if (!m) continue;
    if (resumable && !resumable(d.path, *m).empty()) {
      // Not a checkpoint to this attempt, so it counts for nothing. Only an earlier attempt of its
      // own job wrote one it may delete (committed after this attempt started, fenced off); a
      // newer attempt's (this one being the fenced-off one), or another job's, stays.
      const bool superseded = m->writer.fenced() && m->writer.job == self.job && m->writer.attempt < self.attempt;
      if (!superseded) not_ours.insert(d.path);
      continue;
    }
    if (static_cast<int>(keep.size()) >= keep_last) continue;
    keep.insert(d.path);
    newest_kept = std::max(newest_kept, d.step);
  }
  if (keep.empty()) return deleted;  // nothing known good: delete nothing
  keep.insert(not_ours.begin(), not_ours.end());
  if (!also_keep.empty()) keep.insert(also_keep);
  std::error_code ec;
  for (const auto& d : dirs) {
    if (keep.count(d.path)) continue;
    fs::remove_all(d.path, ec);
    if (ec) return Status::IoError("deleting " + d.path + ": " + ec.message());
    deleted.push_back(d.path);
  }
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = StepOf(name, ".tmp");
    if (step < 0) step = StepOf(name, ".replaced");
    if (step < 0) step = StepOf(name, ".snapshot");  // a staged memory snapshot never adopted
    if (step >= 0 && step < newest_kept) {
      fs::remove_all(entry.path(), ec);
      if (ec) return Status::IoError("deleting " + entry.path().string() + ": " + ec.message());
      deleted.push_back(entry.path().string());
    }
  }
  return deleted;
}

}  // namespace eft::trainer
