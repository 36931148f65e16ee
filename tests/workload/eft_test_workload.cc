// eft-test-workload: a tiny but real distributed c10d (Gloo) job for the control-plane tests.
//
// The controller/worker end-to-end tests run this instead of eft-train: it starts in seconds, needs no
// model or data, yet speaks every contract a real rank does (torchrun-style environment, TCPStore
// rendezvous, Gloo collectives, JSON-lines events on EFT_EVENTS_FD, step-N.tmp -> step-N checkpoints with
// a COMMITTED manifest, resume from EFT_RESUME_FROM, SIGTERM -> save -> exit 75, exit 2 for bad input).
//
// Its result is a known function of the step count: every step s adds s to an accumulator, so the final
// value equals N(N+1)/2 only if every step ran exactly once across all attempts. A lost step (resuming
// from too new a checkpoint) or a repeated one (resuming from too old a state without rolling back acc)
// shows up as a wrong number in the --result file, which is what the orchestration tests assert on.
//
// Fault injection (--fail-at-step/--fail-rank/--fail-code/--fail-only-attempt) makes one rank die
// mid-run so tests can exercise detection and restart.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/listen_port.h"
#include "common/net_address.h"
#include "common/rank_protocol.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using eft::rank::ExitCode;
using eft::rank::ToInt;
namespace rank_env = eft::rank::env;
constexpr int kExitFailure = ToInt(ExitCode::kFailure), kExitConfig = ToInt(ExitCode::kBadInput),
              kExitStopped = ToInt(ExitCode::kStoppedOnRequest), kExitPortBusy = ToInt(ExitCode::kRendezvousPortBusy);

// Thrown for bad flags, environment or resume input: the job can never succeed, so exit 2 (no retry).
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

volatile sig_atomic_t g_stop_requested = 0;
void on_sigterm(int) { g_stop_requested = 1; }

long long parse_int(const std::string& what, const std::string& text, long long lo, long long hi) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < lo || v > hi)
    throw ConfigError(what + "='" + text + "': expected an integer in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
  return v;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  if (v) return v;
  if (fallback) return fallback;
  throw ConfigError(std::string("environment variable ") + name +
                    " is not set (the worker, torchrun or srun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
}

struct Config {
  int rank = 0, world = 1, local_rank = 0, master_port = 0, attempt = 0, events_fd = -1;
  std::string master_addr, job_id, resume_from;
  std::string node_address;  // EFT_NODE_ADDRESS: what Gloo binds (docs/architecture.md, "Rank traffic ...")
  long long steps = 20, step_ms = 100, ckpt_every = 5, timeout_s = 30;
  long long fail_at = -1, fail_rank = 0, fail_code = 1, fail_only_attempt = -1;
  std::string ckpt_dir, result_file;
  std::string pid_dir;  // tests find each rank's pid here: <pid_dir>/attempt-<A>/rank-<R>.pid
};

Config parse(int argc, char** argv) {
  Config c;
  const long long kMax = 1LL << 40;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag.rfind("--", 0) != 0) throw ConfigError("unexpected argument '" + flag + "' (flags look like --steps 20)");
    if (auto eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw ConfigError(flag + " needs a value");
    }
    if (flag == "--steps") c.steps = parse_int(flag, value, 1, kMax);
    else if (flag == "--step-ms") c.step_ms = parse_int(flag, value, 0, 3600000);
    else if (flag == "--checkpoint-every") c.ckpt_every = parse_int(flag, value, 0, kMax);  // 0: never
    else if (flag == "--checkpoint-dir") c.ckpt_dir = value;
    else if (flag == "--result") c.result_file = value;
    else if (flag == "--pid-dir") c.pid_dir = value;
    else if (flag == "--fail-at-step") c.fail_at = parse_int(flag, value, 1, kMax);
    else if (flag == "--fail-rank") c.fail_rank = parse_int(flag, value, 0, 1 << 20);
    else if (flag == "--fail-code") c.fail_code = parse_int(flag, value, 0, 255);
    else if (flag == "--fail-only-attempt") c.fail_only_attempt = parse_int(flag, value, 0, 1 << 30);
    else if (flag == "--timeout-s") c.timeout_s = parse_int(flag, value, 1, 86400);
    else
      throw ConfigError("unknown flag " + flag +
                        " (known: --steps --step-ms --checkpoint-every --checkpoint-dir --result --pid-dir --fail-at-step"
                        " --fail-rank --fail-code --fail-only-attempt --timeout-s)");
  }
  if (c.ckpt_dir.empty()) throw ConfigError("--checkpoint-dir is required (rank 0 writes step-N/ directories there)");

  c.world = parse_int("WORLD_SIZE", env_or(rank_env::kWorldSize, nullptr), 1, 1 << 20);
  c.rank = parse_int("RANK", env_or(rank_env::kRank, nullptr), 0, c.world - 1);
  c.local_rank = parse_int("LOCAL_RANK", env_or(rank_env::kLocalRank, "0"), 0, 1 << 20);
  c.master_addr = env_or(rank_env::kMasterAddr, nullptr);
  if (c.master_addr.empty()) throw ConfigError("MASTER_ADDR is empty");
  c.master_port = parse_int("MASTER_PORT", env_or(rank_env::kMasterPort, nullptr), 1, 65535);
  c.job_id = env_or(rank_env::kJobId, "");
  c.node_address = env_or(rank_env::kNodeAddress, "");
  // The rank protocol's rule for loopback addresses across hosts, as eft-train applies it.
  eft::net::RankAddresses addresses;
  addresses.world = c.world;
  addresses.local_world = static_cast<int>(parse_int("LOCAL_WORLD_SIZE", env_or(rank_env::kLocalWorldSize, "1"), 1,
                                                     1 << 20));
  addresses.node_name = env_or(rank_env::kNodeName, "");
  addresses.node_address = c.node_address;
  addresses.master_addr = c.master_addr;
  auto master = eft::net::ResolveNumeric(c.master_addr);
  addresses.master_is_loopback = eft::net::IsLoopback(master.ok() ? *master : c.master_addr);
  if (std::string share = env_or(rank_env::kNodesShareLoopback, ""); !share.empty()) {
    addresses.nodes_share_loopback = share == "1";
  }
  if (eft::Status s = eft::net::CheckRankAddresses(addresses); !s.ok()) throw ConfigError(s.message());
  c.attempt = parse_int("EFT_ATTEMPT", env_or(rank_env::kAttempt, "0"), 0, 1 << 30);
  c.resume_from = env_or(rank_env::kResumeFrom, "");
  if (std::string fd = env_or(rank_env::kEventsFd, ""); !fd.empty()) {
    c.events_fd = parse_int("EFT_EVENTS_FD", fd, 0, 1 << 20);
    if (fcntl(c.events_fd, F_GETFD) < 0)
      throw ConfigError("EFT_EVENTS_FD=" + fd + " is not an open file descriptor in this process");
  }
  return c;
}

// One write() per line: a pipe write of <= PIPE_BUF bytes is atomic, so lines from several writers never
// interleave. A vanished reader (EPIPE) must not kill training, so events are then dropped.
void emit(const Config& c, const eft::rank::Event& event) {
  if (c.events_fd < 0) return;
  std::string line = eft::rank::EncodeEvent(event) + "\n";
  ssize_t n;
  do n = ::write(c.events_fd, line.data(), line.size());
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(line.size()))
    std::fprintf(stderr, "eft-test-workload: event write to fd %d failed: %s\n", c.events_fd, std::strerror(errno));
}

void fsync_path(const fs::path& p, int flags) {
  int fd = ::open(p.c_str(), flags | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    int e = errno;
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("fsync " + p.string() + ": " + std::strerror(e));
  }
  ::close(fd);
}

void write_durable(const fs::path& p, const std::string& data) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("open " + p.string() + ": " + std::strerror(errno));
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      throw std::runtime_error("write " + p.string() + ": " + std::strerror(e));
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) throw std::runtime_error("fsync " + p.string() + ": " + std::strerror(errno));
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw ConfigError("cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string fnv1a64(const std::string& data) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : data) h = (h ^ ch) * 1099511628211ULL;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Same protocol as eft-train: build step-N.tmp/, fsync, COMMITTED manifest last, rename, fsync parent.
// A directory without a valid COMMITTED is an interrupted write and must never be resumed from.
void save_checkpoint(const Config& c, long long step, long long acc) {
  const auto started = std::chrono::steady_clock::now();
  const fs::path dir(c.ckpt_dir), tmp = dir / ("step-" + std::to_string(step) + ".tmp"),
      final_dir = dir / ("step-" + std::to_string(step));
  fs::remove_all(tmp);  // leftovers of an attempt that died mid-write
  fs::create_directories(tmp);
  const std::string state = json{{"step", step}, {"acc", acc}}.dump() + "\n";
  write_durable(tmp / "state.json", state);
  json manifest = {{"step", step},
                   {"files", json::array({{{"path", "state.json"}, {"bytes", state.size()}, {"fnv1a64", fnv1a64(state)}}})}};
  const std::string committed = manifest.dump() + "\n";
  write_durable(tmp / "COMMITTED", committed);
  fsync_path(tmp, O_RDONLY | O_DIRECTORY);
  fs::remove_all(final_dir);  // the same step saved by an earlier attempt: ours is equally valid
  fs::rename(tmp, final_dir);
  fsync_path(dir, O_RDONLY | O_DIRECTORY);
  eft::rank::CheckpointEvent event;
  event.step = step;
  event.path = final_dir.string();
  event.bytes = static_cast<int64_t>(state.size() + committed.size());
  event.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  emit(c, event);
  std::printf("checkpoint step %lld -> %s\n", step, final_dir.c_str());
  std::fflush(stdout);
}

void load_checkpoint(const Config& c, long long& step, long long& acc) {
  const fs::path dir(c.resume_from);
  try {
    const json manifest = json::parse(read_file(dir / "COMMITTED"));
    for (const auto& f : manifest.at("files")) {
      const std::string data = read_file(dir / f.at("path").get<std::string>());
      if (data.size() != f.at("bytes").get<size_t>() || fnv1a64(data) != f.at("fnv1a64").get<std::string>())
        throw ConfigError(f.at("path").get<std::string>() + " does not match its size/checksum in COMMITTED");
    }
    const json state = json::parse(read_file(dir / "state.json"));
    step = state.at("step").get<long long>();
    acc = state.at("acc").get<long long>();
  } catch (const std::exception& e) {
    throw ConfigError("EFT_RESUME_FROM=" + c.resume_from +
                      " is not a committed checkpoint of this workload (need COMMITTED + state.json): " + e.what());
  }
  if (step < 0 || step > c.steps)
    throw ConfigError("EFT_RESUME_FROM=" + c.resume_from + " holds step " + std::to_string(step) +
                      ", outside [0, --steps=" + std::to_string(c.steps) + "]");
}

// The node's address when the worker gives one (EFT_NODE_ADDRESS), as eft-train binds. Without it, a
// rank bound to MASTER_ADDR's interface is only right on the master host; on loopback that is exactly
// what we want, elsewhere Gloo's default (this host's name) or GLOO_SOCKET_IFNAME is.
std::shared_ptr<::gloo::transport::Device> make_device(const Config& c) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (!c.node_address.empty()) return c10d::ProcessGroupGloo::createDeviceForHostname(c.node_address);
  if (c.master_addr == "localhost" || c.master_addr.rfind("127.", 0) == 0)
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

int run(const Config& c) {
  at::set_num_threads(1);
  long long step = 0, acc = 0;
  if (!c.resume_from.empty()) load_checkpoint(c, step, acc);
  if (c.rank == 0) {
    std::error_code ec;
    fs::create_directories(c.ckpt_dir, ec);
    if (ec) throw ConfigError("--checkpoint-dir " + c.ckpt_dir + ": " + ec.message());
  }
  const auto timeout = std::chrono::milliseconds(c.timeout_s * 1000);

  // Store and Gloo start helper threads; keep SIGTERM away from them so the main thread sees it.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);
  // A port another program holds is not this job's failure: say so with the protocol's own exit
  // code, and the controller retries on another port without counting a restart.
  if (c.rank == 0 && c.world > 1) {
    eft::Status port = eft::CheckPortFreeToListen(c.master_port);
    if (port.code() == eft::StatusCode::kAlreadyExists) {
      std::fprintf(stderr, "eft-test-workload: rendezvous port %d (MASTER_PORT) is in use by another program\n",
                   c.master_port);
      emit(c, eft::rank::ErrorEvent{"rendezvous port " + std::to_string(c.master_port) +
                                        " (MASTER_PORT) is in use by another program",
                                    kExitPortBusy});
      return kExitPortBusy;
    }
  }
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(c.master_port);
  so.isServer = c.rank == 0;
  so.numWorkers = static_cast<size_t>(c.world);
  so.waitWorkers = true;
  so.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(c.master_addr, so);
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(make_device(c));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, c.rank, c.world, opts);
  pthread_sigmask(SIG_UNBLOCK, &term, nullptr);

  // Every rank says hello, so each has a log to ship; only rank 0 reports progress.
  std::printf("eft-test-workload job=%s attempt=%d rank=%d/%d start_step=%lld steps=%lld\n", c.job_id.c_str(),
              c.attempt, c.rank, c.world, step + 1, c.steps);
  std::fflush(stdout);
  long long last_ckpt = step;
  while (step < c.steps) {
    const long long s = step + 1;
    if (s == c.fail_at && c.rank == c.fail_rank && (c.fail_only_attempt < 0 || c.fail_only_attempt == c.attempt)) {
      std::fprintf(stderr, "eft-test-workload rank %d: injected failure before step %lld, exit %lld\n", c.rank, s,
                   c.fail_code);
      std::fflush(nullptr);
      ::_exit(static_cast<int>(c.fail_code));
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(c.step_ms));
    // Element 1 carries the stop request so every rank stops after the same step even when SIGTERM
    // reaches the ranks at different moments (a lone rank stopping would strand the others in a collective).
    std::vector<at::Tensor> t{at::tensor({1.0, g_stop_requested ? 1.0 : 0.0}, at::kDouble)};
    pg->allreduce(t)->wait();
    const double ones = t[0][0].item<double>(), stops = t[0][1].item<double>();
    if (ones != static_cast<double>(c.world)) {
      std::fprintf(stderr, "eft-test-workload rank %d: step %lld all-reduce sum %g, expected WORLD_SIZE=%d\n", c.rank,
                   s, ones, c.world);
      return kExitFailure;
    }
    acc += s;
    step = s;
    if (c.rank == 0) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Every field a real trainer reports, so dashboards and metrics tests see each series
      // (grad_norm and mfu are stand-in values).
      eft::rank::StepEvent event;
      event.step = s;
      event.total_steps = c.steps;
      event.loss = 1.0 / static_cast<double>(s);
      event.lr = 0.001;
      event.grad_norm = 2.0 / static_cast<double>(s);
      event.mfu = 0.25;
      event.tokens = s * 1000;
      event.tokens_per_s = secs > 0 ? 1000.0 / secs : 0.0;
      emit(c, event);
      std::printf("step %lld/%lld acc=%lld\n", s, c.steps, acc);
      std::fflush(stdout);
      if (c.ckpt_every > 0 && s % c.ckpt_every == 0) {
        // An evaluation before each checkpoint, as eft-train does by default (stand-in loss).
        emit(c, eft::rank::EvalEvent{s, 1.5 / static_cast<double>(s), 500});
        save_checkpoint(c, s, acc);
        last_ckpt = s;
      }
    }
    if (stops > 0) {
      if (c.rank == 0 && step != last_ckpt) save_checkpoint(c, step, acc);
      std::fprintf(stderr, "eft-test-workload rank %d: stop requested, exiting after step %lld\n", c.rank, step);
      return kExitStopped;
    }
  }
  if (c.rank == 0) {
    const long long expected = c.steps * (c.steps + 1) / 2;
    if (!c.result_file.empty()) {
      const fs::path out(c.result_file), tmp = out.string() + ".tmp";
      if (out.has_parent_path()) fs::create_directories(out.parent_path());
      write_durable(tmp, json{{"steps", c.steps}, {"acc", acc}, {"expected", expected}, {"world_size", c.world},
                              {"attempt", c.attempt}}.dump() + "\n");
      fs::rename(tmp, out);
      fsync_path(out.has_parent_path() ? out.parent_path() : fs::path("."), O_RDONLY | O_DIRECTORY);
    }
    emit(c, eft::rank::FinishedEvent{step});
    std::printf("finished acc=%lld expected=%lld\n", acc, expected);
  }
  return 0;
}

// The error event of the rank protocol, from wherever the failure happened (the configuration may
// not have been parsed: EFT_EVENTS_FD is read again here).
void report_fatal(const std::string& message, int code) {
  Config c;
  const char* fd = std::getenv(rank_env::kEventsFd);
  if (fd == nullptr || *fd == '\0') return;
  c.events_fd = std::atoi(fd);
  if (fcntl(c.events_fd, F_GETFD) < 0) return;
  emit(c, eft::rank::ErrorEvent{message, code});
}

}  // namespace

int main(int argc, char** argv) {
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a dead event reader shows up as EPIPE, handled in emit()

  int code;
  try {
    Config config = parse(argc, argv);
    if (!config.pid_dir.empty()) {
      fs::path dir = fs::path(config.pid_dir) / ("attempt-" + std::to_string(config.attempt));
      fs::create_directories(dir);
      write_durable(dir / ("rank-" + std::to_string(config.rank) + ".pid"), std::to_string(::getpid()));
    }
    code = run(config);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "eft-test-workload: configuration error: %s\n", e.what());
    code = kExitConfig;
    report_fatal(std::string("configuration error: ") + e.what(), code);
  } catch (const std::exception& e) {
    // Typically a peer rank died mid-collective or the rendezvous timed out: a retryable failure.
    std::fprintf(stderr, "eft-test-workload: failed: %s\n", e.what());
    code = kExitFailure;
    report_fatal(std::string("failed: ") + e.what(), code);
  }
  // _exit: after a failed collective Gloo's threads may still hold the dead connection, and running
  // static destructors under them can hang; nothing left needs unwinding.
  std::fflush(nullptr);
  ::_exit(code);
}
