// End-to-end tests of eft-test-workload: real rank processes rendezvous over TCPStore on 127.0.0.1 and
// all-reduce with Gloo. The control-plane e2e tests trust this program's result file and events, so
// here we pin down the contracts they rely on: exact accumulator, committed checkpoints, resume at a
// different world size, exit codes 0/1/2/75, one event line per step from rank 0 only.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// The fd number the children see the event pipe on; high so it never collides with the parent's fds.
constexpr int kChildEventsFd = 200;
constexpr int kTimedOut = -1;
// Unloaded, every test here takes 1-3 s. The budget is generous because each rank spends ~0.5 s of CPU
// just loading LibTorch, and on a busy 2-core host a handful of ranks starting at once took 15 s.
constexpr std::chrono::seconds kBudget{30};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Ask the kernel for a free port; the tiny race until the workload binds it is acceptable in tests.
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    std::abort();
  ::close(fd);
  return ntohs(a.sin_port);
}

class WorkloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* build = std::getenv("EFT_BUILD_DIR");
    ASSERT_NE(build, nullptr) << "EFT_BUILD_DIR is not set (ctest sets it to the build directory)";
    binary_ = fs::path(build) / "tests/workload/eft-test-workload";
    ASSERT_TRUE(fs::exists(binary_)) << binary_ << " is missing: build target eft-test-workload";
    char tmpl[] = "/tmp/eft-workload-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ckpt_ = dir_ / "ckpt";
  }

  void TearDown() override {
    for (pid_t pid : live_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (events_rd_ >= 0) ::close(events_rd_);
    if (HasFailure()) std::fprintf(stderr, "--- rank logs ---\n%s", logs().c_str());
    else fs::remove_all(dir_);
  }

  // Creates the pipe every rank of the next spawn() gets as EFT_EVENTS_FD, as the worker does.
  void open_events() {
    int p[2];
    ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
    events_rd_ = p[0];
    events_wr_ = p[1];
    ::fcntl(events_rd_, F_SETFL, O_NONBLOCK);
  }
  // After spawning, drop our write end so reads see EOF once every rank has exited.
  void close_events_writer() {
    if (events_wr_ >= 0) ::close(events_wr_);
    events_wr_ = -1;
  }

  pid_t spawn(int rank, int world, int port, std::vector<std::string> args,
              std::map<std::string, std::string> env = {}) {
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e, key = kv.substr(0, kv.find('='));
      if (key == "RANK" || key == "WORLD_SIZE" || key == "LOCAL_RANK" || key.rfind("MASTER_", 0) == 0 ||
          key.rfind("EFT_", 0) == 0)
        continue;  // ours must not leak in from whatever runs the tests
      envs.push_back(kv);
    }
    std::map<std::string, std::string> rank_env = {{"RANK", std::to_string(rank)},
                                                   {"LOCAL_RANK", std::to_string(rank)},
                                                   {"WORLD_SIZE", std::to_string(world)},
                                                   {"MASTER_ADDR", "127.0.0.1"},
                                                   {"MASTER_PORT", std::to_string(port)},
                                                   {"EFT_JOB_ID", "workload-test"},
                                                   {"EFT_ATTEMPT", "0"}};
    if (events_wr_ >= 0) rank_env["EFT_EVENTS_FD"] = std::to_string(kChildEventsFd);
    for (auto& [k, v] : env) rank_env[k] = v;  // an empty value still sets the variable (EFT_RESUME_FROM=)
    for (auto& [k, v] : rank_env)
      if (v != "<unset>") envs.push_back(k + "=" + v);

    args.insert(args.begin(), binary_.string());
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);

    const std::string log = (dir_ / ("spawn" + std::to_string(spawned_++) + "-rank" + std::to_string(rank) + ".log"));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (events_wr_ >= 0) posix_spawn_file_actions_adddup2(&fa, events_wr_, kChildEventsFd);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, binary_.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(rc, 0) << "posix_spawn " << binary_ << ": " << std::strerror(rc);
    if (rc == 0) live_.push_back(pid);
    return pid;
  }

  // Exit code, 128+signal, or kTimedOut. Keeps draining the event pipe so a chatty rank never blocks on it.
  int wait_exit(pid_t pid, std::chrono::milliseconds budget) {
    const auto deadline = Clock::now() + budget;
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        std::erase(live_, pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      drain_events();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return kTimedOut;
  }

  void drain_events() {
    if (events_rd_ < 0) return;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(events_rd_, buf, sizeof buf)) > 0) events_raw_.append(buf, static_cast<size_t>(n));
  }

  std::vector<json> events() {
    drain_events();
    std::vector<json> out;
    std::istringstream in(events_raw_);
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      EXPECT_FALSE(j.is_discarded()) << "event line is not JSON: " << line;
      out.push_back(j);
    }
    return out;
  }

  static std::vector<long long> steps_of(const std::vector<json>& evs, const std::string& kind) {
    std::vector<long long> out;
    for (const auto& e : evs)
      if (e.value("event", "") == kind) out.push_back(e.at("step").get<long long>());
    return out;
  }

  std::string logs() const {
    std::string all;
    if (!fs::exists(dir_)) return all;
    for (const auto& f : fs::directory_iterator(dir_))
      if (f.path().extension() == ".log") all += "== " + f.path().filename().string() + "\n" + slurp(f.path());
    return all;
  }

  // A checkpoint counts only with a COMMITTED manifest whose sizes match, as the controller will judge it.
  void expect_committed(long long step) {
    const fs::path d = ckpt_ / ("step-" + std::to_string(step));
    ASSERT_TRUE(fs::is_directory(d)) << d;
    const json manifest = json::parse(slurp(d / "COMMITTED"));
    EXPECT_EQ(manifest.at("step"), step);
    for (const auto& f : manifest.at("files"))
      EXPECT_EQ(fs::file_size(d / f.at("path").get<std::string>()), f.at("bytes").get<uintmax_t>());
    const json state = json::parse(slurp(d / "state.json"));
    EXPECT_EQ(state.at("step"), step);
    EXPECT_EQ(state.at("acc"), step * (step + 1) / 2) << "checkpoint of step " << step << " has a wrong accumulator";
  }

  std::vector<std::string> common_args(int steps, int every) {
    return {"--steps", std::to_string(steps), "--step-ms", "20", "--checkpoint-every", std::to_string(every),
            "--checkpoint-dir", ckpt_.string(), "--result", (dir_ / "result.json").string(), "--timeout-s", "20"};
  }

  fs::path binary_, dir_, ckpt_;
  std::vector<pid_t> live_;
  int events_rd_ = -1, events_wr_ = -1, spawned_ = 0;
  std::string events_raw_;
};

// Lower-case suite name so the ctest entries ("workload.<Test>") match `ctest -R workload`.
using workload = WorkloadTest;

TEST_F(workload, ThreeRanksRunEveryStepExactlyOnce) {
  open_events();
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r) pids.push_back(spawn(r, 3, port, common_args(10, 3)));
  close_events_writer();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(wait_exit(pids[r], kBudget), 0) << "rank " << r;

  const json result = json::parse(slurp(dir_ / "result.json"));
  EXPECT_EQ(result.at("acc"), 55);
  EXPECT_EQ(result.at("expected"), 55);
  EXPECT_EQ(result.at("world_size"), 3);
  for (long long s : {3, 6, 9}) expect_committed(s);
  EXPECT_FALSE(fs::exists(ckpt_ / "step-10"));
  for (const auto& f : fs::directory_iterator(ckpt_))
    EXPECT_NE(f.path().extension(), ".tmp") << "left-over temporary checkpoint " << f.path();

  const auto evs = events();
  // Every rank holds the pipe but only rank 0 reports, so each step appears exactly once.
  EXPECT_EQ(steps_of(evs, "step"), (std::vector<long long>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(steps_of(evs, "checkpoint"), (std::vector<long long>{3, 6, 9}));
  for (const auto& e : evs) {
    if (e.at("event") == "checkpoint") {
      EXPECT_EQ(e.at("kind"), "sharded");
      EXPECT_EQ(e.at("path"), (ckpt_ / ("step-" + std::to_string(e.at("step").get<int>()))).string());
      EXPECT_GT(e.at("bytes").get<long long>(), 0);
    }
    if (e.at("event") == "step") {
      EXPECT_TRUE(e.contains("loss") && e.contains("lr") && e.contains("tokens_per_s"));
    }
  }
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().at("event"), "finished");
}

TEST_F(workload, ResumesAfterRankFailureAtSmallerWorldSize) {
  auto args = common_args(8, 3);
  for (const char* a : {"--fail-at-step", "5", "--fail-rank", "1", "--fail-code", "1"}) args.push_back(a);
  const int port = free_port();
  const pid_t r0 = spawn(0, 2, port, args), r1 = spawn(1, 2, port, args);
  EXPECT_EQ(wait_exit(r1, kBudget), 1);
  // Rank 0 sees the closed connection in its all-reduce at once; --timeout-s bounds it if it did not.
  const int rc0 = wait_exit(r0, kBudget);
  EXPECT_EQ(rc0, 1) << "a collective that loses its peer is a retryable failure";
  expect_committed(3);
  EXPECT_FALSE(fs::exists(ckpt_ / "step-6"));
  EXPECT_FALSE(fs::exists(dir_ / "result.json"));

  // Attempt 1 on one rank: steps 4..8 must run exactly once more.
  open_events();
  const pid_t solo = spawn(0, 1, free_port(), args,
                           {{"EFT_ATTEMPT", "1"}, {"EFT_RESUME_FROM", (ckpt_ / "step-3").string()}});
  close_events_writer();
  ASSERT_EQ(wait_exit(solo, kBudget), 0);
  const json result = json::parse(slurp(dir_ / "result.json"));
  EXPECT_EQ(result.at("acc"), 36);
  EXPECT_EQ(result.at("acc"), result.at("expected"));
  EXPECT_EQ(result.at("attempt"), 1);
  EXPECT_EQ(result.at("world_size"), 1);
  EXPECT_EQ(steps_of(events(), "step"), (std::vector<long long>{4, 5, 6, 7, 8}));
  expect_committed(6);
}

TEST_F(workload, FailureInjectionCanBeLimitedToOneAttempt) {
  auto args = common_args(3, 0);
  for (const char* a : {"--fail-at-step", "2", "--fail-rank", "0", "--fail-code", "7", "--fail-only-attempt", "1"})
    args.push_back(a);
  EXPECT_EQ(wait_exit(spawn(0, 1, free_port(), args, {{"EFT_ATTEMPT", "1"}}), kBudget), 7);
  EXPECT_EQ(wait_exit(spawn(0, 1, free_port(), args, {{"EFT_ATTEMPT", "2"}}), kBudget), 0);
}

TEST_F(workload, BadConfigurationExitsTwo) {
  const auto args = common_args(3, 1);
  auto bad_flag = args;
  bad_flag.push_back("--no-such-flag");
  // An interrupted write (no COMMITTED) must be refused, not silently resumed from.
  fs::create_directories(dir_ / "step-2.tmp");
  std::ofstream(dir_ / "step-2.tmp/state.json") << R"({"step":2,"acc":3})";
  const std::vector<std::tuple<std::string, std::vector<std::string>, std::map<std::string, std::string>>> cases = {
      {"missing RANK", args, {{"RANK", "<unset>"}}},
      {"non-numeric WORLD_SIZE", args, {{"WORLD_SIZE", "two"}}},
      {"RANK >= WORLD_SIZE", args, {{"RANK", "1"}}},
      {"EFT_EVENTS_FD not open", args, {{"EFT_EVENTS_FD", "987"}}},
      {"missing --checkpoint-dir", {"--steps", "3"}, {}},
      {"unknown flag", bad_flag, {}},
      {"uncommitted checkpoint", args, {{"EFT_RESUME_FROM", (dir_ / "step-2.tmp").string()}}},
  };
  // All at once: each case costs mostly LibTorch's load time, and none of them gets as far as rendezvous.
  std::vector<pid_t> pids;
  for (const auto& [what, a, env] : cases) pids.push_back(spawn(0, 1, free_port(), a, env));
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(wait_exit(pids[i], kBudget), 2) << std::get<0>(cases[i]);
}

TEST_F(workload, SigtermSavesLastStepAndExits75) {
  open_events();
  auto args = common_args(1000, 0);  // no periodic checkpoints: only the stop path writes one
  args[3] = "50";                    // --step-ms
  const int port = free_port();
  const pid_t r0 = spawn(0, 2, port, args), r1 = spawn(1, 2, port, args);
  close_events_writer();
  const auto deadline = Clock::now() + kBudget;
  while (Clock::now() < deadline && steps_of(events(), "step").size() < 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(steps_of(events(), "step").size(), 3u) << "workload made no progress";
  ::kill(r0, SIGTERM);
  ::kill(r1, SIGTERM);
  EXPECT_EQ(wait_exit(r0, kBudget), 75);
  EXPECT_EQ(wait_exit(r1, kBudget), 75);

  const auto evs = events();
  const auto steps = steps_of(evs, "step"), ckpts = steps_of(evs, "checkpoint");
  ASSERT_EQ(ckpts.size(), 1u);
  EXPECT_EQ(ckpts[0], steps.back()) << "the stop checkpoint must hold the last completed step";
  const long long last = ckpts[0];
  expect_committed(last);
  EXPECT_FALSE(fs::exists(dir_ / "result.json"));

  // The stop checkpoint is a real resume point: two more steps land on the exact total.
  const pid_t solo = spawn(0, 1, free_port(), common_args(static_cast<int>(last) + 2, 0),
                           {{"EFT_ATTEMPT", "1"}, {"EFT_RESUME_FROM", (ckpt_ / ("step-" + std::to_string(last))).string()}});
  ASSERT_EQ(wait_exit(solo, kBudget), 0);
  const json result = json::parse(slurp(dir_ / "result.json"));
  EXPECT_EQ(result.at("acc"), result.at("expected"));
}

}  // namespace
