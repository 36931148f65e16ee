// ProcessSupervisor: starts rank processes and watches them on the worker's io_context.
//
// Each child runs in its own process group (so a stop reaches everything it spawned), with
// stdout+stderr appended to a log file, and EFT_EVENTS_FD naming the write end of a pipe whose
// lines the supervisor reads and hands to on_event_line. It dies with the worker (PR_SET_PDEATHSIG):
// a rank whose worker is gone is useless, and the restarted worker would kill it anyway.
// on_exit fires once per child, after the child has exited AND every event line it wrote has been
// delivered (or 1 s after its exit if a grandchild keeps the pipe open).
// All methods and callbacks run on the io_context's thread, which must be long-lived: the kernel
// sends PR_SET_PDEATHSIG when the *thread* that forked a child exits, not the process, so spawning
// from a short-lived thread would kill the child with it.
// Callbacks may call back into the supervisor (e.g. Spawn the same id again from on_exit).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/status.h"

namespace eft::worker {

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  // Added to (and overriding) the worker's own environment.
  std::map<std::string, std::string> env;
  std::string log_path;  // created (with parent directories) and appended to; empty: discarded
  std::string cwd;       // empty: the worker's
};

struct ProcessExit {
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // the terminating signal, 0 if it exited normally
};

class ProcessSupervisor {
 public:
  using Id = int64_t;
  struct Callbacks {
    std::function<void(Id, const std::string& line)> on_event_line;  // without the '\n'
    std::function<void(Id, ProcessExit)> on_exit;
  };

  ProcessSupervisor(boost::asio::io_context& io, Callbacks callbacks);
  ~ProcessSupervisor();  // SIGKILLs every child's process group still running

  // Starts a child. Errors (e.g. the program does not exist or is not executable, or `cwd` is
  // missing) are returned here, not through on_exit: Spawn returns only once the child has exec'd.
  // Returns the child's pid (== its process group id). ALREADY_EXISTS while `id` is still known.
  Result<pid_t> Spawn(Id id, const LaunchSpec& spec);

  // SIGTERM to the child's process group now, SIGKILL to the group after `grace` if it still runs.
  // No-op for unknown or already-exited ids; a second Stop only ever brings the SIGKILL forward.
  // Whenever a child exits (stopped or not), the rest of its process group is SIGKILLed.
  void Stop(Id id, std::chrono::milliseconds grace);

  // SIGKILL to every child's process group, without waiting.
  void KillAll();

  // True from a successful Spawn until its on_exit is delivered (the id stays taken until then).
  bool IsRunning(Id id) const;
  size_t running_count() const;

 private:
  struct Child;
  void WaitForSigchld();
  void SchedulePoll();
  void OnSigchld();
  void ReadEvents(const std::shared_ptr<Child>& child);
  // Returns false if a callback destroyed the supervisor.
  bool DeliverEvents(const std::shared_ptr<Child>& child, std::string_view data);
  void OnPipeEof(const std::shared_ptr<Child>& child);
  void DrainAfterLinger(const std::shared_ptr<Child>& child);
  void MaybeFinish(Id id);
  boost::asio::io_context& io_;
  Callbacks callbacks_;
  std::map<Id, std::shared_ptr<Child>> children_;
  struct SignalWatcher;
  std::unique_ptr<SignalWatcher> sigchld_;
  // Handlers still queued on io_ after the supervisor is gone hold a weak_ptr to this.
  std::shared_ptr<bool> alive_;
};

}  // namespace eft::worker
