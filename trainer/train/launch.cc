#include "trainer/train/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/listen_port.h"
#include "common/net_address.h"
#include "common/rank_protocol.h"

extern char** environ;

namespace eft::trainer {
namespace {

Result<int> ParseInt(const std::map<std::string, std::string>& env, const std::string& name, int lo, int hi) {
  auto it = env.find(name);
  if (it == env.end()) return Status::NotFound(name);
  char* end = nullptr;
  long v = std::strtol(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || v < lo || v > hi) {
    return Status::InvalidArgument(name + "='" + it->second + "': expected an integer in [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "]");
  }
  return static_cast<int>(v);
}

std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

}  // namespace

std::string FirstSlurmHost(const std::string& nodelist) {
  std::string first = nodelist.substr(0, nodelist.find(','));
  auto bracket = nodelist.find('[');
  if (bracket == std::string::npos || bracket > nodelist.find(',')) return first;
  // prefix[03-05,07] -> prefix03
  std::string prefix = nodelist.substr(0, bracket);
  size_t i = bracket + 1;
  std::string number;
  while (i < nodelist.size() && std::isdigit(static_cast<unsigned char>(nodelist[i]))) number += nodelist[i++];
  return prefix + number;
}

Result<RankEnv> RankEnvFromEnvironment(const std::map<std::string, std::string>* given) {
  std::map<std::string, std::string> env = given ? *given : ProcessEnvironment();
  RankEnv r;
  auto get = [&](const std::string& k) { auto it = env.find(k); return it == env.end() ? std::string() : it->second; };
  if (env.count(rank::env::kRank) || env.count(rank::env::kWorldSize)) {
    r.source = env.count(rank::env::kJobId) ? "eft-worker" : "torchrun";
    EFT_ASSIGN_OR_RETURN(r.world, ParseInt(env, rank::env::kWorldSize, 1, 1 << 20));
    EFT_ASSIGN_OR_RETURN(r.rank, ParseInt(env, rank::env::kRank, 0, r.world - 1));
    auto lr = ParseInt(env, rank::env::kLocalRank, 0, 1 << 20);
    r.local_rank = lr.ok() ? *lr : 0;
    if (!lr.ok() && lr.status().code() != StatusCode::kNotFound) return lr.status();
    auto lw = ParseInt(env, rank::env::kLocalWorldSize, 1, 1 << 20);
    r.local_world = lw.ok() ? *lw : 1;
  } else if (env.count("SLURM_PROCID") && env.count("SLURM_NTASKS")) {
    r.source = "slurm";
    EFT_ASSIGN_OR_RETURN(r.world, ParseInt(env, "SLURM_NTASKS", 1, 1 << 20));
    EFT_ASSIGN_OR_RETURN(r.rank, ParseInt(env, "SLURM_PROCID", 0, r.world - 1));
    auto lr = ParseInt(env, "SLURM_LOCALID", 0, 1 << 20);
    r.local_rank = lr.ok() ? *lr : 0;
    // SLURM_NTASKS_PER_NODE may be "4" or "4(x2)": the leading number is what we need.
    r.local_world = std::max(1, std::atoi(get("SLURM_NTASKS_PER_NODE").c_str()));
    if (get(rank::env::kMasterAddr).empty() && !get("SLURM_JOB_NODELIST").empty()) {
      env[rank::env::kMasterAddr] = FirstSlurmHost(get("SLURM_JOB_NODELIST"));
    }
  } else {
    // Alone, but maybe still under a launcher that reads events or hands a checkpoint.
    r.source = "single process";
  }
  if (r.world > 1) {
    if (get(rank::env::kMasterAddr).empty()) return Status::InvalidArgument("MASTER_ADDR is not set (needed for world size > 1)");
    if (!env.count(rank::env::kMasterPort)) return Status::InvalidArgument("MASTER_PORT is not set (needed for world size > 1)");
  }
  if (!get(rank::env::kMasterAddr).empty()) r.master_addr = get(rank::env::kMasterAddr);
  if (env.count(rank::env::kMasterPort)) {
    EFT_ASSIGN_OR_RETURN(r.master_port, ParseInt(env, rank::env::kMasterPort, 1, 65535));
  }
  r.job_id = get(rank::env::kJobId);
  if (env.count(rank::env::kAttempt)) {
    EFT_ASSIGN_OR_RETURN(r.attempt, ParseInt(env, rank::env::kAttempt, 0, 1 << 30));
  }
  r.resume_from = get(rank::env::kResumeFrom);
  r.snapshot_dir = get(rank::env::kSnapshotDir);
  r.node_name = get(rank::env::kNodeName);
  r.node_address = get(rank::env::kNodeAddress);
  if (const std::string share = get(rank::env::kNodesShareLoopback); !share.empty()) {
    if (share != "0" && share != "1") {
      return Status::InvalidArgument(std::string(rank::env::kNodesShareLoopback) + "='" + share +
                                     "': expected 0 or 1");
    }
    r.nodes_share_loopback = share == "1";
  }
  r.gloo_interface_given = !get("GLOO_SOCKET_IFNAME").empty();
  EFT_ASSIGN_OR_RETURN(r.gpu_collectives, ParseGpuCollectives(get("EFT_GPU_COLLECTIVES")));
  if (!get(rank::env::kEventsFd).empty()) {
    EFT_ASSIGN_OR_RETURN(r.events_fd, ParseInt(env, rank::env::kEventsFd, 0, 1 << 20));
    if (given == nullptr && ::fcntl(r.events_fd, F_GETFD) < 0) {
      return Status::InvalidArgument("EFT_EVENTS_FD=" + get(rank::env::kEventsFd) + " is not an open file descriptor");
    }
  }
  return r;
}

Status CheckRankAddresses(const RankEnv& env, bool gloo) {
  net::RankAddresses r;
  r.world = env.world;
  r.local_world = env.local_world;
  r.master_addr = env.master_addr;
  Result<std::string> master = net::ResolveNumeric(env.master_addr);
  r.master_is_loopback = master.ok() ? net::IsLoopback(*master) : net::IsLoopback(env.master_addr);
  r.nodes_share_loopback = env.nodes_share_loopback;
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  r.node_name = env.node_name.empty() ? host : env.node_name;
  if (!env.node_address.empty()) {
    r.node_address = env.node_address;
  } else if (gloo && !env.gloo_interface_given && !r.master_is_loopback && env.world > env.local_world) {
    // What Gloo's default device binds (CreateCpuCommunicator): the host name's address.
    Result<std::string> own = net::ResolveNumeric(host);
    if (own.ok()) {
      r.node_address = *own;
      r.node_address_from_host_name = true;
    }
  }
  return net::CheckRankAddresses(r);
}

namespace {

constexpr int kExitStoppedOnRequest = rank::ToInt(rank::ExitCode::kStoppedOnRequest);
volatile sig_atomic_t g_forward_signal = 0;
void RememberSignal(int sig) { g_forward_signal = sig; }
constexpr int kExitRendezvousPortBusy = rank::ToInt(rank::ExitCode::kRendezvousPortBusy);

// One launch of the N ranks on `port`: forks them, forwards SIGTERM/SIGINT, stops the rest when one
// fails. The first failing rank's exit code, or 0 (75 when they stopped on request).
int RunRanksOnce(int nproc, const std::string& program, const std::vector<std::string>& argv, int port) {
  std::vector<pid_t> pids;
  const pid_t launcher = ::getpid();
  for (int r = 0; r < nproc; ++r) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) env_strings.push_back(*e);
    for (const auto& [k, v] : std::map<std::string, std::string>{{rank::env::kRank, std::to_string(r)},
                                                                  {rank::env::kLocalRank, std::to_string(r)},
                                                                  {rank::env::kWorldSize, std::to_string(nproc)},
                                                                  {rank::env::kLocalWorldSize, std::to_string(nproc)},
                                                                  {rank::env::kMasterAddr, "127.0.0.1"},
                                                                  {rank::env::kMasterPort, std::to_string(port)}}) {
      env_strings.push_back(k + "=" + v);
    }
    std::vector<char*> cargv, cenv;
    cargv.push_back(const_cast<char*>(program.c_str()));
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (auto& e : env_strings) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    // SIGTERM/SIGINT blocked across fork(): one sent to the child before it execs (a rank that
    // fails at once stops the others) must not run this launcher's handler there and be lost; it
    // waits, pending, until the child has the default action back.
    sigset_t stop_signals, saved;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    ::sigprocmask(SIG_BLOCK, &stop_signals, &saved);
    pid_t pid = ::fork();
    if (pid == 0) {
      // Ranks get signals only through this launcher (Ctrl-C at a terminal would otherwise reach
      // them twice: a second SIGINT means "die now"), and die with it.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(1);  // the launcher died before prctl
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGINT, SIG_DFL);
      ::sigprocmask(SIG_SETMASK, &saved, nullptr);
      ::execve(program.c_str(), cargv.data(), cenv.data());
      std::perror("eft-train: exec");
      ::_exit(127);
    }
    ::sigprocmask(SIG_SETMASK, &saved, nullptr);
    pids.push_back(pid);
  }
  int result = 0;
  size_t alive = pids.size();
  bool stopping = false;
  while (alive > 0) {
    // Checked before each wait too: a signal handled while the ranks were being forked (it was
    // blocked across each fork) interrupts no wait.
    if (g_forward_signal && !stopping) {
      stopping = true;
      for (pid_t p : pids) ::kill(p, g_forward_signal);
    }
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;  // the signal is forwarded above
      break;
    }
    --alive;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    // 75: a rank stopped on request after saving; the others are finishing the same save.
    if (code == kExitStoppedOnRequest) {
      if (result == 0) result = code;
      continue;
    }
    if (code != 0 && (result == 0 || result == kExitStoppedOnRequest)) {
      result = code;
      // One rank failed: the others would wait for it in a collective until the timeout.
      if (!stopping) {
        stopping = true;
        for (pid_t p : pids) ::kill(p, SIGTERM);
      }
    }
  }
  return result;
}

}  // namespace

int SpawnLocalRanks(int nproc, const std::vector<std::string>& argv, const LocalLaunchOptions& options) {
  const std::string program =
      options.program.empty() ? std::filesystem::read_symlink("/proc/self/exe").string() : options.program;
  g_forward_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = RememberSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  const int tries = std::max(1, options.port_tries);
  for (int attempt = 1;; ++attempt) {
    const int port = options.pick_port ? options.pick_port() : PickFreeLoopbackPort();
    const int code = RunRanksOnce(nproc, program, argv, port);
    // Rank 0 exits with this code only before its rendezvous, so nothing has been trained or written:
    // the port was free when picked and another program took it since.
    if (code != kExitRendezvousPortBusy || g_forward_signal || attempt >= tries) return code;
    std::fprintf(stderr, "eft-train: rendezvous port %d was taken before rank 0 listened on it; starting the %d ranks "
                 "again on another port (try %d of %d)\n", port, nproc, attempt + 1, tries);
  }
}

}  // namespace eft::trainer
