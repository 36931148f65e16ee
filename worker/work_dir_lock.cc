#include "worker/work_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>

namespace eft::worker {

namespace {

// The file's "key value" lines; a torn or foreign file yields what parses.
std::map<std::string, std::string> ReadFields(int fd) {
  std::string text;
  char buf[512];
  ssize_t n;
  off_t at = 0;
  while ((n = ::pread(fd, buf, sizeof(buf), at)) > 0 && text.size() < 4096) {
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    auto space = line.find(' ');
    if (space != std::string::npos) out[line.substr(0, space)] = line.substr(space + 1);
  }
  return out;
}

}  // namespace

Result<WorkDirLock> WorkDirLock::Acquire(const std::string& work_dir, const std::string& node,
                                         const std::string& incarnation) {
  const std::string path = work_dir + "/worker.lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("opening " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    auto holder = ReadFields(fd);
    ::close(fd);
    if (err != EWOULDBLOCK) return Status::IoError("locking " + path + ": " + std::strerror(err));
    return Status::FailedPrecondition(
        "another eft-worker (pid " + (holder.count("pid") ? holder["pid"] : "?") + ", node " +
        (holder.count("node") ? holder["node"] : "?") + ") is running with work dir " + work_dir +
        ": give every worker on a machine its own --work-dir and --name");
  }
  std::string previous = ReadFields(fd)["incarnation"];
  const std::string mine = "pid " + std::to_string(::getpid()) + "\nnode " + node + "\nincarnation " + incarnation + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, mine.data(), mine.size(), 0) != static_cast<ssize_t>(mine.size())) {
    const int err = errno;
    ::close(fd);
    return Status::IoError("writing " + path + ": " + std::strerror(err));
  }
  return WorkDirLock(fd, std::move(previous));
}

WorkDirLock::WorkDirLock(WorkDirLock&& other) noexcept
    : fd_(other.fd_), previous_incarnation_(std::move(other.previous_incarnation_)) {
  other.fd_ = -1;
}

WorkDirLock& WorkDirLock::operator=(WorkDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    previous_incarnation_ = std::move(other.previous_incarnation_);
    other.fd_ = -1;
  }
  return *this;
}

WorkDirLock::~WorkDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace eft::worker
