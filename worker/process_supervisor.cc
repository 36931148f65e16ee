#include "worker/process_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>
#include <utility>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/logging.h"

extern char** environ;

namespace eft::worker {
namespace {

namespace asio = boost::asio;

// The fd number the child sees its event pipe on (EFT_EVENTS_FD).
constexpr int kEventsFd = 3;
// Fds the parent prepares for the child are moved at or above this, so that the child's dup2()s
// onto 0..kEventsFd can never overwrite one it still needs.
constexpr int kHighFd = 10;
// How long on_exit waits for event-pipe EOF after the child was reaped: a grandchild that
// inherited the write end may hold it open for ever.
constexpr auto kPipeLinger = std::chrono::seconds(1);
// Reaping normally rides on SIGCHLD; this poll covers a SIGCHLD that never reaches us (e.g. every
// thread of the worker blocks it).
constexpr auto kReapPoll = std::chrono::seconds(1);
// A single line longer than this is handed over in pieces rather than buffered without bound.
constexpr size_t kMaxLineBytes = 1 << 20;

// What a child that failed before execve() reports through the status pipe.
enum class ChildStage : int { kDup = 1, kChdir = 2, kExec = 3 };
struct ChildFailure {
  ChildStage stage;
  int err;
};

std::string ErrnoText(int err) { return std::strerror(err); }

// Owns one fd; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Moves `fd` to a close-on-exec descriptor numbered >= kHighFd.
Result<Fd> MoveHigh(Fd fd) {
  if (fd.get() >= kHighFd) return fd;
  int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, kHighFd);
  if (moved < 0) return Status::Internal("fcntl(F_DUPFD_CLOEXEC): " + ErrnoText(errno));
  return Fd(moved);
}

Result<std::pair<Fd, Fd>> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::ResourceExhausted("pipe2: " + ErrnoText(errno));
  Fd r(fds[0]), w(fds[1]);
  EFT_ASSIGN_OR_RETURN(r, MoveHigh(std::move(r)));
  EFT_ASSIGN_OR_RETURN(w, MoveHigh(std::move(w)));
  return std::make_pair(std::move(r), std::move(w));
}

Result<Fd> OpenLog(const std::string& path) {
  if (path.empty()) {
    int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Status::Internal("open /dev/null: " + ErrnoText(errno));
    return MoveHigh(Fd(fd));
  }
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) return Status::IoError("creating log directory '" + parent.string() + "': " + ec.message());
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("opening log file '" + path + "': " + ErrnoText(errno));
  return MoveHigh(Fd(fd));
}

// execvpe()-style lookup of argv[0], against the PATH the child will get. Done in the parent so the
// child only needs execve(), and so "not found" is a clear error rather than an exit code 127.
Result<std::string> ResolveProgram(const std::string& program, const std::string& path_var) {
  if (program.empty()) return Status::InvalidArgument("argv[0] is empty");
  if (program.find('/') != std::string::npos) return program;  // execve reports what is wrong
  bool saw_eacces = false;
  size_t begin = 0;
  while (true) {
    size_t end = path_var.find(':', begin);
    std::string dir = path_var.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      saw_eacces = true;
    }
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  if (saw_eacces) {
    return Status::PermissionDenied("program '" + program + "' found in PATH but not executable");
  }
  return Status::NotFound("program '" + program + "' not found in PATH (" + path_var + ")");
}

// Strings for execve(), built before fork() because the child may not allocate.
struct ExecImage {
  std::string path;
  std::vector<std::string> argv_storage, env_storage;
  std::vector<char*> argv, envp;
};

Result<ExecImage> BuildImage(const LaunchSpec& spec) {
  if (spec.argv.empty()) return Status::InvalidArgument("LaunchSpec.argv is empty: nothing to run");
  ExecImage image;
  std::map<std::string, std::string> overrides = spec.env;
  for (const auto& [key, value] : overrides) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return Status::InvalidArgument("LaunchSpec.env has an invalid variable name '" + key + "'");
    }
  }
  overrides["EFT_EVENTS_FD"] = std::to_string(kEventsFd);
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    if (overrides.count(std::string(entry.substr(0, eq))) != 0) continue;
    image.env_storage.emplace_back(entry);
  }
  for (const auto& [key, value] : overrides) image.env_storage.push_back(key + "=" + value);

  const char* inherited_path = ::getenv("PATH");
  std::string path_var = inherited_path != nullptr ? inherited_path : "/usr/local/bin:/usr/bin:/bin";
  if (auto it = spec.env.find("PATH"); it != spec.env.end()) path_var = it->second;
  EFT_ASSIGN_OR_RETURN(image.path, ResolveProgram(spec.argv[0], path_var));

  image.argv_storage = spec.argv;
  for (auto& s : image.argv_storage) image.argv.push_back(s.data());
  image.argv.push_back(nullptr);
  for (auto& s : image.env_storage) image.envp.push_back(s.data());
  image.envp.push_back(nullptr);
  return image;
}

// Runs in the forked child: only async-signal-safe calls from here to execve().
[[noreturn]] void ChildFail(int status_fd, ChildStage stage) {
  ChildFailure failure{stage, errno};
  ssize_t ignored = ::write(status_fd, &failure, sizeof(failure));
  (void)ignored;
  ::_exit(127);
}

[[noreturn]] void ChildExec(const ExecImage& image, const char* cwd, pid_t parent, long max_fd,
                            int null_fd, int log_fd, int events_fd, int status_fd) {
  ::setpgid(0, 0);
  // Dies with the thread that forked us; if the worker already died before prctl, go now.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);

  // The worker installs handlers (asio's SIGCHLD) and may ignore signals; give the rank defaults.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);  // EINVAL for glibc's own
  }

  if (::dup2(null_fd, 0) < 0 || ::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0 ||
      ::dup2(events_fd, kEventsFd) < 0) {
    ChildFail(status_fd, ChildStage::kDup);
  }
  // Everything else the worker has open (gRPC sockets, other ranks' pipes) must not leak into the
  // rank. Marking it close-on-exec rather than closing keeps status_fd usable until execve().
  if (::close_range(kEventsFd + 1, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {  // kernels before 5.11
    for (int fd = kEventsFd + 1; fd < max_fd; ++fd) {
      if (fd != status_fd) ::close(fd);
    }
  }
  if (cwd != nullptr && ::chdir(cwd) != 0) ChildFail(status_fd, ChildStage::kChdir);

  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(image.path.c_str(), image.argv.data(), image.envp.data());
  ChildFail(status_fd, ChildStage::kExec);
}

}  // namespace

struct ProcessSupervisor::SignalWatcher {
  explicit SignalWatcher(asio::io_context& io) : signals(io, SIGCHLD), poll(io) {}
  asio::signal_set signals;
  asio::steady_timer poll;
};

struct ProcessSupervisor::Child {
  Child(asio::io_context& io, Id id_, pid_t pid_, int read_fd)
      : id(id_), pid(pid_), events(io, read_fd), kill_timer(io), linger_timer(io) {}

  Id id;
  pid_t pid;  // also the process group id
  asio::posix::stream_descriptor events;
  std::array<char, 64 * 1024> read_buf;
  std::string partial;  // bytes after the last '\n'
  asio::steady_timer kill_timer;
  asio::steady_timer linger_timer;
  std::chrono::steady_clock::time_point kill_deadline = std::chrono::steady_clock::time_point::max();
  bool stopping = false;
  bool reaped = false;
  bool pipe_eof = false;
  bool linger_expired = false;
  ProcessExit exit;
};

namespace {

// Splits `data` into lines, keeping the unterminated tail in `partial`. Returns false as soon as
// `deliver` does (the supervisor went away inside a callback).
template <typename Deliver>
bool DeliverLines(std::string& partial, std::string_view data, const Deliver& deliver) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      partial.append(data);
      while (partial.size() >= kMaxLineBytes) {
        std::string piece = partial.substr(0, kMaxLineBytes);
        partial.erase(0, kMaxLineBytes);
        if (!deliver(piece)) return false;
      }
      return true;
    }
    std::string line = std::move(partial);
    partial.clear();
    line.append(data.substr(0, nl));
    data.remove_prefix(nl + 1);
    if (!deliver(line)) return false;
  }
  return true;
}

}  // namespace

ProcessSupervisor::ProcessSupervisor(asio::io_context& io, Callbacks callbacks)
    : io_(io), callbacks_(std::move(callbacks)), sigchld_(std::make_unique<SignalWatcher>(io)),
      alive_(std::make_shared<bool>(true)) {
  WaitForSigchld();
  SchedulePoll();
}

ProcessSupervisor::~ProcessSupervisor() {
  KillAll();
  // Reap what died at once so the worker does not accumulate zombies; a child stuck in
  // uninterruptible sleep is not worth blocking shutdown for.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  for (auto& [id, child] : children_) {
    while (!child->reaped) {
      int status;
      pid_t r = ::waitpid(child->pid, &status, WNOHANG);
      if (r == child->pid || (r < 0 && errno != EINTR)) break;
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    boost::system::error_code ignored;
    child->kill_timer.cancel();
    child->linger_timer.cancel();
    child->events.close(ignored);
  }
  boost::system::error_code ignored;
  sigchld_->signals.cancel(ignored);
  sigchld_->poll.cancel();
}

Result<pid_t> ProcessSupervisor::Spawn(Id id, const LaunchSpec& spec) {
  if (children_.count(id) != 0) {
    return Status::AlreadyExists("process id " + std::to_string(id) + " is already running");
  }
  const std::string what = spec.argv.empty() ? std::string("<empty argv>") : spec.argv[0];
  auto context = [&](const Status& s) { return s.WithContext("spawning '" + what + "'"); };

  auto image = BuildImage(spec);
  if (!image.ok()) return context(image.status());
  auto log = OpenLog(spec.log_path);
  if (!log.ok()) return context(log.status());
  int null_raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_raw < 0) return context(Status::Internal("open /dev/null: " + ErrnoText(errno)));
  auto null_fd = MoveHigh(Fd(null_raw));
  if (!null_fd.ok()) return context(null_fd.status());
  auto events = MakePipe();
  if (!events.ok()) return context(events.status());
  auto status_pipe = MakePipe();
  if (!status_pipe.ok()) return context(status_pipe.status());
  auto& [events_r, events_w] = *events;
  auto& [status_r, status_w] = *status_pipe;
  const char* cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  const pid_t self = ::getpid();
  const long max_fd = ::sysconf(_SC_OPEN_MAX);

  // Block every signal across fork() so no handler of the worker's runs in the child before it has
  // reset dispositions; the child unblocks just before execve().
  sigset_t all, saved;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &saved);
  pid_t pid = ::fork();
  if (pid == 0) {
    ChildExec(*image, cwd, self, max_fd, null_fd->get(), log->get(), events_w.get(), status_w.get());
  }
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) return context(Status::ResourceExhausted("fork: " + ErrnoText(fork_errno)));

  events_w.reset();
  status_w.reset();
  // EOF on the status pipe means execve() succeeded (close-on-exec); a record means it did not.
  ChildFailure failure;
  size_t got = 0;
  while (got < sizeof(failure)) {
    ssize_t n = ::read(status_r.get(), reinterpret_cast<char*>(&failure) + got, sizeof(failure) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == sizeof(failure)) {
    int ignored;
    while (::waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
    }
    std::string message;
    switch (failure.stage) {
      case ChildStage::kDup: message = "setting up stdio: "; break;
      case ChildStage::kChdir: message = "chdir to '" + spec.cwd + "': "; break;
      case ChildStage::kExec: message = "exec '" + image->path + "': "; break;
    }
    message += ErrnoText(failure.err);
    StatusCode code = failure.err == ENOENT ? StatusCode::kNotFound
                      : failure.err == EACCES ? StatusCode::kPermissionDenied
                                              : StatusCode::kFailedPrecondition;
    return context(Status(code, message));
  }

  auto child = std::make_shared<Child>(io_, id, pid, events_r.release());
  children_.emplace(id, child);
  EFT_LOG(INFO) << "started process " << id << " (pid " << pid << "): " << image->path
                << (spec.log_path.empty() ? "" : ", log " + spec.log_path);
  ReadEvents(child);
  return pid;
}

void ProcessSupervisor::ReadEvents(const std::shared_ptr<Child>& child) {
  std::weak_ptr<bool> alive = alive_;
  child->events.async_read_some(
      asio::buffer(child->read_buf), [this, alive, child](const boost::system::error_code& ec, size_t n) {
        if (alive.expired()) return;
        if (n > 0 && !DeliverEvents(child, std::string_view(child->read_buf.data(), n))) return;
        if (child->linger_expired) {  // the linger timer cancelled this read
          DrainAfterLinger(child);
          return;
        }
        if (!ec) {
          ReadEvents(child);
          return;
        }
        if (ec == asio::error::operation_aborted) return;  // closed by our destructor
        if (ec != asio::error::eof) {
          EFT_LOG(WARNING) << "reading events of process " << child->id << ": " << ec.message();
        }
        OnPipeEof(child);
      });
}

bool ProcessSupervisor::DeliverEvents(const std::shared_ptr<Child>& child, std::string_view data) {
  std::weak_ptr<bool> alive = alive_;
  return DeliverLines(child->partial, data, [&](const std::string& line) {
    if (callbacks_.on_event_line) callbacks_.on_event_line(child->id, line);
    return !alive.expired();
  });
}

void ProcessSupervisor::OnPipeEof(const std::shared_ptr<Child>& child) {
  child->pipe_eof = true;
  if (!child->partial.empty()) {  // a last line without '\n'
    std::string line = std::move(child->partial);
    child->partial.clear();
    std::weak_ptr<bool> alive = alive_;
    if (callbacks_.on_event_line) callbacks_.on_event_line(child->id, line);
    if (alive.expired()) return;
  }
  MaybeFinish(child->id);
}

void ProcessSupervisor::DrainAfterLinger(const std::shared_ptr<Child>& child) {
  // A leftover process holds the write end, so EOF may never come. Hand over whatever is already
  // in the pipe (no read is pending now, so read_buf is ours) and treat that as the end.
  EFT_LOG(WARNING) << "process " << child->id << " exited " << kPipeLinger.count()
                   << " s ago but its event pipe is still open (a leftover process holds it)";
  boost::system::error_code ec;
  child->events.non_blocking(true, ec);
  while (!ec) {
    size_t n = child->events.read_some(asio::buffer(child->read_buf), ec);
    if (n > 0 && !DeliverEvents(child, std::string_view(child->read_buf.data(), n))) return;
  }
  OnPipeEof(child);
}

void ProcessSupervisor::WaitForSigchld() {
  std::weak_ptr<bool> alive = alive_;
  sigchld_->signals.async_wait([this, alive](const boost::system::error_code& ec, int) {
    if (alive.expired() || ec) return;
    WaitForSigchld();
    OnSigchld();
  });
}

void ProcessSupervisor::SchedulePoll() {
  std::weak_ptr<bool> alive = alive_;
  sigchld_->poll.expires_after(kReapPoll);
  sigchld_->poll.async_wait([this, alive](const boost::system::error_code& ec) {
    if (alive.expired() || ec) return;
    SchedulePoll();
    OnSigchld();
  });
}

void ProcessSupervisor::OnSigchld() {
  // SIGCHLDs coalesce, so one signal may stand for several exits: check every child we own. Never
  // waitpid(-1): other parts of the worker may have children of their own.
  std::vector<Id> exited;
  for (auto& [id, child] : children_) {
    if (child->reaped) continue;
    // Peek without reaping first: while the zombie leader exists its pgid cannot be reused, so
    // killing the group is guaranteed to hit only the rank's own leftovers.
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    if (::waitid(P_PID, static_cast<id_t>(child->pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0) {
      if (info.si_pid == 0) continue;  // still running
      // Children of a rank must not outlive it (they would hold GPUs and ports).
      ::kill(-child->pid, SIGKILL);
      int status = 0;
      pid_t r;
      do {
        r = ::waitpid(child->pid, &status, 0);
      } while (r < 0 && errno == EINTR);
      if (r == child->pid && WIFSIGNALED(status)) {
        child->exit = ProcessExit{0, WTERMSIG(status)};
      } else if (r == child->pid && WIFEXITED(status)) {
        child->exit = ProcessExit{WEXITSTATUS(status), 0};
      } else {
        child->exit = ProcessExit{-1, 0};
      }
    } else {
      // ECHILD: someone else reaped it (a waitpid(-1) elsewhere in the worker); its status is lost.
      EFT_LOG(ERROR) << "process " << id << " (pid " << child->pid
                     << ") was reaped elsewhere: " << ErrnoText(errno) << "; reporting exit code -1";
      child->exit = ProcessExit{-1, 0};
    }
    child->reaped = true;
    child->kill_timer.cancel();
    EFT_LOG(INFO) << "process " << id << " (pid " << child->pid << ") "
                  << (child->exit.signal != 0 ? "killed by signal " + std::to_string(child->exit.signal)
                                              : "exited with code " + std::to_string(child->exit.exit_code));
    exited.push_back(id);
  }
  std::weak_ptr<bool> alive = alive_;
  for (Id id : exited) {
    auto it = children_.find(id);
    if (it == children_.end()) continue;
    std::shared_ptr<Child> child = it->second;
    if (!child->pipe_eof) {
      child->linger_timer.expires_after(kPipeLinger);
      child->linger_timer.async_wait([alive, child](const boost::system::error_code& ec) {
        if (alive.expired() || ec || child->pipe_eof) return;
        // The read handler runs next (with data or aborted) and finishes the child.
        child->linger_expired = true;
        boost::system::error_code ignored;
        child->events.cancel(ignored);
      });
    }
    MaybeFinish(id);
    if (alive.expired()) return;
  }
}

void ProcessSupervisor::MaybeFinish(Id id) {
  auto it = children_.find(id);
  if (it == children_.end()) return;
  std::shared_ptr<Child> child = it->second;
  if (!child->reaped || !child->pipe_eof) return;
  children_.erase(it);
  boost::system::error_code ignored;
  child->linger_timer.cancel();
  child->kill_timer.cancel();
  child->events.close(ignored);
  if (callbacks_.on_exit) callbacks_.on_exit(id, child->exit);
}

void ProcessSupervisor::Stop(Id id, std::chrono::milliseconds grace) {
  auto it = children_.find(id);
  if (it == children_.end() || it->second->reaped) return;
  std::shared_ptr<Child> child = it->second;
  auto deadline = std::chrono::steady_clock::now() + grace;
  if (child->stopping && deadline >= child->kill_deadline) return;  // a stop is already due sooner
  if (grace.count() <= 0) {
    EFT_LOG(INFO) << "killing process " << id << " (pgid " << child->pid << ")";
    ::kill(-child->pid, SIGKILL);
    child->stopping = true;
    child->kill_deadline = deadline;
    child->kill_timer.cancel();
    return;
  }
  if (!child->stopping) {
    EFT_LOG(INFO) << "stopping process " << id << " (pgid " << child->pid << "), grace " << grace.count()
                  << " ms";
    ::kill(-child->pid, SIGTERM);
  }
  child->stopping = true;
  child->kill_deadline = deadline;
  std::weak_ptr<bool> alive = alive_;
  child->kill_timer.expires_at(deadline);
  child->kill_timer.async_wait([alive, child](const boost::system::error_code& ec) {
    if (alive.expired() || ec || child->reaped) return;
    EFT_LOG(WARNING) << "process " << child->id << " (pgid " << child->pid
                     << ") still running after its grace period: SIGKILL";
    ::kill(-child->pid, SIGKILL);
  });
}

void ProcessSupervisor::KillAll() {
  for (auto& [id, child] : children_) {
    // Only while the leader is unreaped: afterwards its pgid may belong to someone else.
    if (!child->reaped) ::kill(-child->pid, SIGKILL);
  }
}

bool ProcessSupervisor::IsRunning(Id id) const { return children_.count(id) != 0; }

size_t ProcessSupervisor::running_count() const { return children_.size(); }

}  // namespace eft::worker
