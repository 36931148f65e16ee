#include "worker/gpu_monitor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/logging.h"

extern char** environ;

namespace eft::worker {

namespace {

constexpr size_t kMaxOutputBytes = 1 << 20;  // a few hundred bytes per GPU; more means something else answered

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// nullopt for nvidia-smi's "[N/A]" / "[Not Supported]"; an error for anything else that is not a number.
Result<std::optional<double>> ParseValue(std::string_view field, const char* what, size_t line_no) {
  if (field.empty() || field.front() == '[' || field == "N/A") return std::optional<double>();
  std::string text(field);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size()) {
    return Status::InvalidArgument("nvidia-smi line " + std::to_string(line_no) + ": " + what + " '" + text +
                                   "' is not a number");
  }
  return std::optional<double>(v);
}

std::optional<double> Scaled(std::optional<double> v, double factor) {
  return v ? std::optional<double>(*v * factor) : std::nullopt;
}

class NvidiaSmiQuery final : public GpuQuery {
 public:
  explicit NvidiaSmiQuery(std::string program) : program_(std::move(program)) {}

  Result<std::string> Run(std::chrono::milliseconds timeout) override {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Internal(std::string("pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    // The worker blocks SIGTERM/SIGINT for its sigwait; the child must not inherit that.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    std::vector<char*> argv = {program_.data()};
    for (const char* a : kNvidiaSmiQueryArgs) argv.push_back(const_cast<char*>(a));
    argv.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, program_.c_str(), &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      return Status::Unavailable("cannot run " + program_ + ": " + std::strerror(rc));
    }
    std::string out;
    bool timed_out = false;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        break;
      }
      pollfd p{fds[0], POLLIN, 0};
      int n = ::poll(&p, 1, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        timed_out = n == 0;
        break;
      }
      char buf[4096];
      ssize_t got = ::read(fds[0], buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;  // EOF: it closed stdout, normally by exiting
      out.append(buf, static_cast<size_t>(got));
      if (out.size() > kMaxOutputBytes) break;
    }
    ::close(fds[0]);
    if (timed_out) ::kill(pid, SIGKILL);
    int status = 0;
    // Only our own pid: the process supervisor reaps its ranks by pid, never waitpid(-1), and so do we.
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out) {
      return Status::Unavailable(program_ + " did not answer within " + std::to_string(timeout.count()) + " ms");
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return Status::Unavailable(program_ + " failed (" +
                                 (WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                                                    : "signal " + std::to_string(WTERMSIG(status))) +
                                 ")");
    }
    if (out.size() > kMaxOutputBytes) return Status::Unavailable(program_ + " wrote more than 1 MiB");
    return out;
  }

 private:
  std::string program_;
};

}  // namespace

Result<std::vector<GpuReading>> ParseNvidiaSmiCsv(std::string_view text) {
  std::vector<GpuReading> out;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = Trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty()) continue;
    std::vector<std::string_view> fields;
    for (size_t start = 0;;) {
      size_t comma = line.find(',', start);
      fields.push_back(Trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (fields.size() != 5 || fields[0].empty()) {
      return Status::InvalidArgument("nvidia-smi line " + std::to_string(line_no) + ": expected 'index, uuid, "
                                     "utilization.gpu, memory.used, memory.total', got '" + std::string(line) + "'");
    }
    GpuReading r;
    r.index = std::string(fields[0]);
    r.uuid = std::string(fields[1]);
    EFT_ASSIGN_OR_RETURN(auto util, ParseValue(fields[2], "utilization.gpu", line_no));
    EFT_ASSIGN_OR_RETURN(auto used, ParseValue(fields[3], "memory.used", line_no));
    EFT_ASSIGN_OR_RETURN(auto total, ParseValue(fields[4], "memory.total", line_no));
    // nounits: percent and MiB.
    r.utilization_ratio = Scaled(util, 0.01);
    r.memory_used_bytes = Scaled(used, 1024.0 * 1024.0);
    r.memory_total_bytes = Scaled(total, 1024.0 * 1024.0);
    out.push_back(std::move(r));
  }
  return out;
}

std::unique_ptr<GpuQuery> MakeNvidiaSmiQuery(std::string program) {
  return std::make_unique<NvidiaSmiQuery>(std::move(program));
}

GpuMonitor::GpuMonitor(std::unique_ptr<GpuQuery> query, std::chrono::milliseconds interval,
                       std::chrono::milliseconds timeout)
    : query_(std::move(query)), interval_(interval), timeout_(timeout) {}

GpuMonitor::~GpuMonitor() { Stop(); }

void GpuMonitor::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void GpuMonitor::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void GpuMonitor::Loop() {
  while (true) {
    (void)PollOnce();
    MutexLock lock(&mu_);
    if (cv_.WaitFor(&mu_, interval_, [&]() REQUIRES(mu_) { return stop_; })) return;
  }
}

Status GpuMonitor::PollOnce() {
  Result<std::string> text = query_->Run(timeout_);
  Result<std::vector<GpuReading>> readings =
      text.ok() ? ParseNvidiaSmiCsv(*text) : Result<std::vector<GpuReading>>(text.status());
  MutexLock lock(&mu_);
  if (!readings.ok()) {
    ++failures_;
    latest_.clear();
    // Once per failure streak: a node without working GPUs would otherwise log every interval.
    if (!logged_failure_) EFT_LOG(WARNING) << "GPU metrics: " << readings.status() << " (retrying quietly)";
    logged_failure_ = true;
    return readings.status();
  }
  if (logged_failure_) EFT_LOG(INFO) << "GPU metrics: nvidia-smi answers again";
  logged_failure_ = false;
  latest_ = std::move(readings).value();
  return Status::Ok();
}

std::vector<GpuReading> GpuMonitor::Latest() const {
  MutexLock lock(&mu_);
  return latest_;
}

uint64_t GpuMonitor::failures() const {
  MutexLock lock(&mu_);
  return failures_;
}

std::vector<GpuUse> JoinGpusToJobs(const std::vector<GpuReading>& readings, const std::vector<std::string>& gpu_ids,
                                   const std::map<int, std::string>& slot_jobs) {
  std::vector<GpuUse> out;
  for (const GpuReading& r : readings) {
    for (size_t slot = 0; slot < gpu_ids.size(); ++slot) {
      if (gpu_ids[slot] != r.index && gpu_ids[slot] != r.uuid) continue;
      auto job = slot_jobs.find(static_cast<int>(slot));
      out.push_back(GpuUse{r.index, job == slot_jobs.end() ? "" : job->second, r});
      break;
    }
  }
  return out;
}

}  // namespace eft::worker
