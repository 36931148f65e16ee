#include "controller/log_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "controller/records.h"

namespace eft::controller {

namespace fs = std::filesystem;

LogStore::LogStore(std::string root) : root_(std::move(root)) {}

std::string LogStore::PathOf(const LogId& id) const {
  return root_ + "/" + id.job_id + "/attempt-" + std::to_string(id.attempt) + "/rank-" +
         std::to_string(id.rank) + ".log";
}

Result<int64_t> LogStore::Append(const LogId& id, int64_t offset, std::string_view data) {
  if (!IsJobId(id.job_id) || id.attempt < 0 || id.rank < 0 || offset < 0) {
    return Status::InvalidArgument("bad log id or offset");
  }
  MutexLock lock(&append_mu_);
  std::string path = PathOf(id);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Status::IoError("creating " + fs::path(path).parent_path().string() + ": " + ec.message());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("opening " + path + ": " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  int64_t end = st.st_size;
  // Only the part of the chunk past our end is new; a chunk that starts past the end would leave a hole.
  if (offset <= end && offset + static_cast<int64_t>(data.size()) > end) {
    std::string_view fresh = data.substr(static_cast<size_t>(end - offset));
    while (!fresh.empty()) {
      ssize_t n = ::write(fd, fresh.data(), fresh.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        Status s = Status::IoError("writing " + path + ": " + std::strerror(errno));
        ::close(fd);
        return s;
      }
      fresh.remove_prefix(static_cast<size_t>(n));
      end += n;
    }
  }
  ::close(fd);
  return end;
}

int64_t LogStore::Size(const LogId& id) const {
  struct stat st {};
  if (::stat(PathOf(id).c_str(), &st) != 0) return 0;
  return st.st_size;
}

Result<std::string> LogStore::Read(const LogId& id, int64_t offset, size_t max_bytes) const {
  std::string path = PathOf(id);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::string();
    return Status::IoError("opening " + path + ": " + std::strerror(errno));
  }
  std::string out(max_bytes, '\0');
  ssize_t n = ::pread(fd, out.data(), max_bytes, offset);
  int err = errno;
  ::close(fd);
  if (n < 0) return Status::IoError("reading " + path + ": " + std::strerror(err));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::vector<LogId> LogStore::List(const std::string& job_id) const {
  std::vector<LogId> ids;
  if (!IsJobId(job_id)) return ids;
  std::error_code ec;
  for (const auto& attempt_dir : fs::directory_iterator(root_ + "/" + job_id, ec)) {
    std::string a = attempt_dir.path().filename().string();
    if (a.rfind("attempt-", 0) != 0) continue;
    int attempt = std::atoi(a.c_str() + 8);
    std::error_code ec2;
    for (const auto& f : fs::directory_iterator(attempt_dir.path(), ec2)) {
      std::string r = f.path().filename().string();
      if (r.rfind("rank-", 0) != 0 || f.path().extension() != ".log") continue;
      ids.push_back(LogId{job_id, attempt, std::atoi(r.c_str() + 5)});
    }
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace eft::controller
