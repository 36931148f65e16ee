#include "trainer/checkpoint/fence.h"

#include <filesystem>

#include "common/file_util.h"
#include "common/json_int.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json IdToJson(const AttemptId& id) { return {{"job", id.job}, {"attempt", id.attempt}}; }

AttemptId IdFromJson(const json& j) {
  return AttemptId{j.at("job").get<std::string>(), JsonInt<int>(j.at("attempt"))};
}

// The same directory however it was spelled ("/ckpt/", "/ckpt/./run/.."), symbolic links resolved
// where the path exists.
std::string Canonical(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::path(path), ec);
  if (ec) p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.string();
}

}  // namespace

json Fence::ToJson() const {
  json list = json::object();
  for (const auto& [name, writer] : checkpoints) list[name] = IdToJson(writer);
  json j = IdToJson(holder);
  j["checkpoints"] = list;
  return j;
}

Result<Fence> Fence::FromJson(const json& j) {
  Fence f;
  try {
    f.holder = IdFromJson(j);
    for (const auto& [name, writer] : j.at("checkpoints").items()) f.checkpoints[name] = IdFromJson(writer);
  } catch (const std::exception& e) {
    return Status::DataLoss(std::string("malformed fence: ") + e.what());
  }
  if (!f.holder.fenced()) return Status::DataLoss("malformed fence: attempt must be at least 1");
  return f;
}

Status Fenced(std::string message) { return Status(StatusCode::kCancelled, std::move(message)); }

bool IsFenced(const Status& s) { return s.code() == StatusCode::kCancelled; }

Result<std::optional<Fence>> ReadFence(const std::string& root) {
  const std::string path = root + "/" + kFenceName;
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) return std::optional<Fence>();
  if (!text.ok()) return text.status();
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::DataLoss(path + ": not JSON");
  auto fence = Fence::FromJson(j);
  if (!fence.ok()) return fence.status().WithContext(path);
  return std::optional<Fence>(std::move(*fence));
}

Result<Fence> RaiseFence(const std::string& root, const AttemptId& self) {
  if (!self.fenced()) return Status::InvalidArgument("an unfenced run raises no fence");
  auto previous = ReadFence(root);
  if (!previous.ok()) {
    return previous.status().WithContext("the fence of checkpoint.dir " + root +
                                         " is unreadable; if no other attempt of this job runs, delete it");
  }
  const std::optional<Fence>& before = *previous;
  if (before && before->holder.job == self.job && before->holder.attempt > self.attempt) {
    return Fenced(self.ToString() + " is stale: " + before->holder.ToString() + " started since and holds " + root +
                  "/" + kFenceName + "; not training");
  }
  Fence fence;
  fence.holder = self;
  for (const CheckpointDir& d : ListCheckpointDirs(root)) {
    auto m = ReadManifest(d.path);
    if (!m.ok()) continue;  // not a checkpoint
    const std::string name = fs::path(d.path).filename().string();
    const AttemptId& w = m->writer;
    bool resumable = !before || !w.fenced();  // the first fence takes what is there; unfenced are trusted
    if (!resumable && before) {
      auto listed = before->checkpoints.find(name);
      // What the previous holder could resume from, unless replaced since...
      resumable = listed != before->checkpoints.end() && listed->second == w;
      // ...and what it, or an attempt since, committed while holding the fence. An older attempt's
      // is never taken: it was committed after the previous holder started.
      const AttemptId& h = before->holder;
      resumable = resumable ||
                  (w.job == h.job && w.attempt >= h.attempt && (w.job != self.job || w.attempt <= self.attempt));
    }
    if (resumable) fence.checkpoints[name] = w;
  }
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Status::IoError("creating " + root + ": " + ec.message());
  EFT_RETURN_IF_ERROR(WriteFileDurably(root + "/" + kFenceName, fence.ToJson().dump(2) + "\n"));
  EFT_RETURN_IF_ERROR(FsyncDir(root));
  return fence;
}

Status CheckFence(const std::string& root, const AttemptId& self) {
  auto read = ReadFence(root);
  if (!read.ok()) {
    return Fenced(self.ToString() + " cannot read the fence (" + read.status().message() +
                  ") to tell whether a newer attempt took over; committing nothing more and stopping");
  }
  const std::optional<Fence>& fence = *read;
  if (!fence) {
    return Fenced(root + "/" + kFenceName + " is gone: " + self.ToString() +
                  " cannot tell whether a newer attempt took over; committing nothing more and stopping");
  }
  if (fence->holder == self) return Status::Ok();
  return Fenced(self.ToString() + " was fenced off: " + fence->holder.ToString() + " took over " + root +
                " after it started; committing nothing more and stopping");
}

std::string WhyNotResumable(const Fence& fence, const std::string& name, const AttemptId& writer) {
  if (!writer.fenced() || writer == fence.holder) return "";
  auto listed = fence.checkpoints.find(name);
  if (listed != fence.checkpoints.end() && listed->second == writer) return "";
  if (writer.job == fence.holder.job && writer.attempt > fence.holder.attempt) {
    return "written by " + writer.ToString() + ", newer than this " + fence.holder.ToString();
  }
  return "written by " + writer.ToString() + " after " + fence.holder.ToString() +
         " started (fenced off; docs/checkpoints.md, \"Fencing\")";
}

ResumeCheck ResumableBy(const Fence& fence, const std::string& root) {
  return [fence, root = Canonical(root)](const std::string& dir, const Manifest& m) -> std::string {
    fs::path p = fs::path(dir).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();
    if (Canonical(p.parent_path().string()) != root) return "";
    return WhyNotResumable(fence, p.filename().string(), m.writer);
  };
}

}  // namespace eft::trainer
