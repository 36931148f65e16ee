// ControllerProcess: a real eft-controller for the control-plane benchmarks (controller_load_bench,
// control_plane_soak), on a free loopback port with its own database, SIGKILLed on destruction. The
// binary is found under $EFT_BUILD_DIR, else relative to this program (<build>/bench/).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "eft/v1/job.grpc.pb.h"

extern char** environ;

namespace eft::bench {

inline std::string BuildDir() {
  if (const char* d = std::getenv("EFT_BUILD_DIR")) return d;
  std::error_code ec;  // this binary lives in <build>/bench/
  return std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().parent_path().string();
}

inline int FreePort() {
  // Bind to port 0 and let go: the kernel picks a free port and does not hand it out again at once.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class ControllerProcess {
 public:
  // `settings`: flags beyond --listen and --db. The default is controller_load_bench's: a timeout
  // long enough that workers registered first do not expire while the rest register; {} runs the
  // controller's defaults. Only warnings are logged: a line per registered node would be part of
  // what is measured.
  explicit ControllerProcess(const std::string& dir,
                             std::vector<std::string> settings = {"--heartbeat-timeout", "3600"})
      : address_("127.0.0.1:" + std::to_string(FreePort())), db_(dir + "/controller.db") {
    std::string bin = BuildDir() + "/controller/eft-controller", log = dir + "/controller.log";
    std::vector<std::string> args = {bin, "--listen", address_, "--db", db_};
    args.insert(args.end(), settings.begin(), settings.end());
    args.insert(args.end(), {"--log-level", "warning"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~ControllerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  const std::string& address() const { return address_; }
  const std::string& db_path() const { return db_; }
  pid_t pid() const { return pid_; }
  // Waits until it answers an RPC (each probe on a fresh channel: a refused one backs off for long).
  bool WaitUp() {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (pid_ > 0 && std::chrono::steady_clock::now() < until) {
      auto stub = eft::v1::JobService::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      eft::v1::ListJobsRequest req;
      eft::v1::ListJobsResponse resp;
      if (stub->ListJobs(&ctx, req, &resp).ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // User + system CPU the controller used so far (/proc/<pid>/stat fields 14 and 15).
  double CpuSeconds() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::istringstream fields(text.substr(text.rfind(')') + 2));
    std::string f;
    double ticks = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i) {
      if (i >= 14) ticks += std::stod(f);
    }
    return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  // A "kB" line of /proc/<pid>/status, e.g. "VmRSS" (resident now) or "VmHWM" (its peak); -1 if gone.
  long StatusKb(const std::string& field) const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.compare(0, field.size() + 1, field + ":") == 0) return std::stol(line.substr(field.size() + 1));
    }
    return -1;
  }

 private:
  std::string address_, db_;
  pid_t pid_ = -1;
};

}  // namespace eft::bench
