#include "tests/e2e/process_util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/listen_port.h"
#include "tests/unit/common/read_file_test_util.h"

extern char** environ;

namespace eft::testing {

namespace fs = std::filesystem;

ChildProcess::~ChildProcess() { KillGroup(); }

bool ChildProcess::Start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                         const std::string& log_path) {
  fs::create_directories(fs::path(log_path).parent_path());
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (!env.count(kv.substr(0, kv.find('=')))) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env_strings) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execve(cargv[0], cargv.data(), cenv.data());
    ::_exit(127);
  }
  ::close(fd);
  ::setpgid(pid, pid);
  pid_ = pid;
  reaped_ = false;
  return true;
}

bool ChildProcess::running() {
  if (pid_ <= 0 || reaped_) return false;
  int status;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    return false;
  }
  return true;
}

void ChildProcess::Signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

void ChildProcess::KillGroup() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGKILL);
  if (!reaped_) {
    int status;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
  }
}

int ChildProcess::Wait(std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    int status;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

int PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

int PortRangeBelowEphemeral(int count) {
  // The kernel hands out ephemeral ports (outgoing connections, PickFreePort's, Gloo's) from
  // ip_local_port_range; a MASTER_PORT there can be taken by any connection on the host.
  const int first = 10000;
  const int span = EphemeralPorts().first - count - first;
  if (span <= 0) return first;  // a host whose ephemeral range starts low: nothing is safe, keep it predictable
  // A different range per call (PickFreePort varies), so clusters running side by side rarely share one.
  return first + PickFreePort() % span;
}

std::string BuildDir() {
  if (const char* d = std::getenv("EFT_BUILD_DIR")) return d;
  // Run by hand: this binary lives in <build>/tests/e2e/.
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path().parent_path().string();
}

std::string WorkloadBinary() { return BuildDir() + "/tests/workload/eft-test-workload"; }
std::string TrainerBinary() { return BuildDir() + "/trainer/eft-train"; }

std::string ReadFile(const std::string& path) { return file_testing::ReadFileOrEmpty(path); }

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  // A zombie counts as gone: it no longer runs, its parent just has not reaped it yet.
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

}  // namespace eft::testing
