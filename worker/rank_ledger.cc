#include "worker/rank_ledger.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/file_util.h"
#include "common/logging.h"

namespace eft::worker {
namespace {

// First line of the file; anything else there means the file is not ours or is damaged.
constexpr char kHeader[] = "# eft rank ledger v1: <leader pid> <start time in clock ticks>";

// The start time (field 22 of /proc/<pid>/stat, clock ticks since boot) of a live or zombie
// process. NOT_FOUND if there is no such process.
Result<unsigned long long> ProcessStartTime(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  Result<std::string> read = ReadFileToString(path);
  if (!read.ok()) return Status::NotFound("no process " + std::to_string(pid));
  const std::string& stat = *read;
  // Field 2 (comm) is "(name)" and the name may itself hold spaces and parentheses, so the fields
  // that follow start after the LAST ')'.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return Status::Internal("unparsable " + path + ": '" + stat + "'");
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return Status::Internal("unparsable " + path + ": too few fields");
  }
  char* end = nullptr;
  errno = 0;
  unsigned long long start = std::strtoull(field.c_str(), &end, 10);
  if (errno != 0 || end == field.c_str() || *end != '\0') {
    return Status::Internal("unparsable start time '" + field + "' in " + path);
  }
  return start;
}

bool ParseEntryLine(const std::string& line, pid_t* pid, unsigned long long* start) {
  std::istringstream in(line);
  long long p;
  unsigned long long s;
  std::string extra;
  if (!(in >> p >> s) || (in >> extra) || p <= 1 || p > INT32_MAX) return false;
  *pid = static_cast<pid_t>(p);
  *start = s;
  return true;
}

Status FsyncDir(const std::filesystem::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("opening directory '" + dir.string() + "': " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::IoError("fsync of '" + dir.string() + "': " + std::strerror(err));
  return Status::Ok();
}

}  // namespace

RankLedger::RankLedger(std::string path) : path_(std::move(path)) {}

Status RankLedger::Record(pid_t pid) {
  EFT_ASSIGN_OR_RETURN(unsigned long long start, ProcessStartTime(pid));
  EFT_ASSIGN_OR_RETURN(std::vector<Entry> entries, Read());
  std::erase_if(entries, [pid](const Entry& e) { return e.pid == pid; });
  entries.push_back(Entry{pid, start});
  return Write(entries).WithContext("recording pid " + std::to_string(pid) + " in the rank ledger");
}

Status RankLedger::Forget(pid_t pid) {
  EFT_ASSIGN_OR_RETURN(std::vector<Entry> entries, Read());
  size_t removed = std::erase_if(entries, [pid](const Entry& e) { return e.pid == pid; });
  if (removed == 0) return Status::Ok();
  return Write(entries).WithContext("forgetting pid " + std::to_string(pid) + " in the rank ledger");
}

Result<int> RankLedger::KillLeftovers() {
  EFT_ASSIGN_OR_RETURN(std::vector<Entry> entries, Read());
  int signalled = 0;
  for (const Entry& e : entries) {
    auto start = ProcessStartTime(e.pid);
    if (!start.ok() && start.status().code() != StatusCode::kNotFound) {
      EFT_LOG(ERROR) << "rank ledger: cannot identify pid " << e.pid << ", not killing it: " << start.status();
      continue;
    }
    if (start.ok() && *start != e.start_time) {
      // The pid was recycled, so the old group (which pinned the pid while it had members) is gone.
      EFT_LOG(INFO) << "rank ledger: pid " << e.pid << " now belongs to another process; not killing it";
      continue;
    }
    if (start.ok()) {
      // Still our leader. If it left its group (setsid), kill it directly.
      if (::kill(-e.pid, SIGKILL) != 0 && ::kill(e.pid, SIGKILL) != 0) continue;
      EFT_LOG(WARNING) << "rank ledger: killed leftover process group " << e.pid
                       << " of a previous worker";
      ++signalled;
      continue;
    }
    // The leader is gone; members of its group may not be (a rank's children outlive it when the
    // worker died before it could clean up).
    if (::kill(-e.pid, SIGKILL) == 0) {
      EFT_LOG(WARNING) << "rank ledger: killed leftover members of process group " << e.pid
                       << " (its leader had already exited)";
      ++signalled;
    }
  }
  EFT_RETURN_IF_ERROR(Write({}).WithContext("emptying the rank ledger"));
  return signalled;
}

Result<std::vector<RankLedger::Entry>> RankLedger::Read() const {
  std::vector<Entry> entries;
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec) && !ec) return entries;  // nothing recorded yet
  std::ifstream in(path_);
  if (!in) return Status::IoError("reading rank ledger '" + path_ + "': " + std::strerror(errno));
  std::string line;
  int line_no = 0;
  int bad = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line_no == 1 && line == kHeader) continue;
    Entry e;
    if (line_no > 1 && ParseEntryLine(line, &e.pid, &e.start_time)) {
      entries.push_back(e);
      continue;
    }
    if (line.empty()) continue;
    ++bad;
  }
  if (bad > 0) {
    // Written atomically, so this is damage or a foreign file. Keep what still parses: every entry
    // is checked against the live process's start time before anything is killed.
    EFT_LOG(ERROR) << "rank ledger '" << path_ << "' is corrupt (" << bad
                   << " unparsable lines); keeping its " << entries.size()
                   << " valid entries, the file will be rewritten";
  }
  return entries;
}

Status RankLedger::Write(const std::vector<Entry>& entries) const {
  std::filesystem::path path(path_);
  std::filesystem::path dir = path.parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IoError("creating directory '" + dir.string() + "': " + ec.message());
  }
  std::string text = std::string(kHeader) + "\n";
  for (const Entry& e : entries) text += std::to_string(e.pid) + " " + std::to_string(e.start_time) + "\n";

  std::string tmp = path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("creating '" + tmp + "': " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::IoError("writing '" + tmp + "': " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::IoError("fsync of '" + tmp + "': " + std::strerror(err));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::IoError("renaming '" + tmp + "' to '" + path_ + "': " + std::strerror(err));
  }
  // Without this the rename itself may not survive a crash of the machine.
  return FsyncDir(dir);
}

}  // namespace eft::worker
