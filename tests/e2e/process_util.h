// Processes and files for end-to-end tests: start a program in its own process group with its
// output in a log file, find the build tree, poll for a condition. No gRPC here, so tests of the
// trainer (which is built without it) use it too.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace eft::testing {

// A child process in its own process group; SIGKILLed (group) on destruction.
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts argv with stdout+stderr appended to log_path; `env` is added to this process's.
  bool Start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             const std::string& log_path);
  pid_t pid() const { return pid_; }
  bool running();
  void Signal(int sig);  // to the process only
  void KillGroup();      // SIGKILL the whole group, then reap
  // Waits for exit; returns the wait status, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

int PickFreePort();
// The first of `count` ports below the kernel's ephemeral range, varying from call to call.
int PortRangeBelowEphemeral(int count);
std::string BuildDir();  // $EFT_BUILD_DIR
std::string WorkloadBinary();
std::string TrainerBinary();  // eft-train
// Reads a whole file ("" if missing).
std::string ReadFile(const std::string& path);
// Polls `pred` every 20 ms until true or timeout; returns its last value.
bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout);
bool ProcessAlive(pid_t pid);

}  // namespace eft::testing
