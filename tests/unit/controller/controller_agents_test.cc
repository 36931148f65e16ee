// What workers are told (the rank protocol's controller side, docs/architecture.md): typed fields in
// each RankAssignment, only the job's own spec.env in env, and the spec once per attempt and node
// (AttemptSpec) until the worker lists a rank of the attempt. And WaitForJobChange, the one wait on
// the controller's condition variable.
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "controller/controller.h"

namespace eft::controller {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class ControllerAgentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-controller-agents-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ControllerConfig config;
    config.db_path = (dir_ / "c.db").string();
    config.heartbeat_interval = 1000ms;
    config.heartbeat_timeout = 3000ms;
    auto c = Controller::Create(config, &clock_);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = std::move(c).value();
  }
  void TearDown() override {
    c_.reset();
    fs::remove_all(dir_);
  }

  std::string Submit(const std::string& name, int gpus, std::map<std::string, std::string> env = {}) {
    v1::JobSpec s;
    s.set_name(name);
    s.add_command("/bin/true");
    s.mutable_resources()->mutable_nodes()->set_min(1);
    s.mutable_resources()->mutable_nodes()->set_max(1);
    s.mutable_resources()->set_gpus_per_node(gpus);
    for (const auto& [k, v] : env) (*s.mutable_env())[k] = v;
    auto job = c_->SubmitJob(s, "");
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  v1::RegisterResponse Register(const std::string& node, int slots, const std::string& incarnation,
                                const std::vector<v1::RankStatus>& ranks = {}, const std::string& previous = "") {
    v1::RegisterRequest req;
    req.set_node_name(node);
    req.set_address(incarnation + ".host");
    req.set_slots(slots);
    req.set_incarnation(incarnation);
    req.set_previous_incarnation(previous);
    for (const auto& r : ranks) *req.add_ranks() = r;
    auto resp = c_->Register(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::RegisterResponse();
  }

  v1::HeartbeatResponse Heartbeat(const std::string& node, const std::string& incarnation,
                                  const std::vector<v1::RankStatus>& ranks = {},
                                  const std::vector<v1::RankEvent>& events = {}) {
    v1::HeartbeatRequest req;
    req.set_node_name(node);
    req.set_incarnation(incarnation);
    for (const auto& r : ranks) *req.add_ranks() = r;
    for (const auto& e : events) *req.add_events() = e;
    auto resp = c_->Heartbeat(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::HeartbeatResponse();
  }

  static v1::RankStatus Rank(const v1::RankAssignment& a, v1::RankState state, int code = 0) {
    v1::RankStatus s;
    *s.mutable_key() = a.key();
    s.set_state(state);
    s.set_exit_code(code);
    s.set_slot(a.slot());
    return s;
  }

  static std::vector<v1::RankStatus> AllRunning(const google::protobuf::RepeatedPtrField<v1::RankAssignment>& desired) {
    std::vector<v1::RankStatus> out;
    for (const auto& a : desired) out.push_back(Rank(a, v1::RANK_STATE_RUNNING));
    return out;
  }

  template <typename Reply>
  static std::set<std::pair<std::string, int>> SpecKeys(const Reply& reply) {
    std::set<std::pair<std::string, int>> out;
    for (const auto& s : reply.attempt_specs()) out.insert({s.job_id(), s.attempt()});
    return out;
  }

  static void ExpectOnlyTheJobsEnv(const v1::RankAssignment& a, const std::map<std::string, std::string>& job_env) {
    std::map<std::string, std::string> env(a.env().begin(), a.env().end());
    EXPECT_EQ(env, job_env) << "rank " << a.key().rank() << " of job " << a.key().job_id();
    for (const auto& [k, v] : env) EXPECT_NE(k.rfind("EFT_", 0), 0u) << k << " comes from the worker, not the controller";
  }

  static bool Registered(const v1::RegisterResponse& r) { return r.fenced().empty() && r.retry_after_ms() == 0; }

  // A 1-rank job RUNNING on n1 under incarnation "a"; returns its id and fills `running`.
  std::string JobRunningOnN1(std::vector<v1::RankStatus>* running) {
    std::string id = Submit("j", 1);
    auto reg = Register("n1", 1, "a");
    *running = AllRunning(reg.desired());
    Heartbeat("n1", "a", *running);
    EXPECT_EQ(c_->GetJob(id)->state(), v1::JOB_STATE_RUNNING);
    return id;
  }

  fs::path dir_;
  ManualClock clock_;
  std::unique_ptr<Controller> c_;
};

TEST_F(ControllerAgentsTest, EveryAttemptOnANodeGetsOneSpecUntilItsRanksAreListed) {
  const std::map<std::string, std::string> env_a = {{"HF_HOME", "/cache/hf"}};
  std::string a = Submit("a", 2, env_a);
  std::string b = Submit("b", 1);
  auto reg = Register("n1", 3, "inc1");
  ASSERT_EQ(reg.desired_size(), 3);
  EXPECT_EQ(reg.attempt_specs_size(), 2) << "one per attempt, not one per rank";
  EXPECT_EQ(SpecKeys(reg), (std::set<std::pair<std::string, int>>{{a, 1}, {b, 1}}));
  for (const auto& s : reg.attempt_specs()) {
    EXPECT_EQ(s.spec().name(), s.job_id() == a ? "a" : "b");
  }
  for (const auto& r : reg.desired()) ExpectOnlyTheJobsEnv(r, r.key().job_id() == a ? env_a : std::map<std::string, std::string>{});

  // The worker started b's rank and one of a's two: a's spec is still needed, b's is not.
  std::vector<v1::RankStatus> some;
  for (const auto& r : reg.desired()) {
    if (r.key().job_id() == b || r.key().rank() == 0) some.push_back(Rank(r, v1::RANK_STATE_RUNNING));
  }
  auto hb = Heartbeat("n1", "inc1", some);
  EXPECT_EQ(SpecKeys(hb), (std::set<std::pair<std::string, int>>{{a, 1}}));

  // Everything listed: no spec, in heartbeats and in a re-registration alike.
  auto all = AllRunning(reg.desired());
  hb = Heartbeat("n1", "inc1", all);
  EXPECT_EQ(hb.desired_size(), 3);
  EXPECT_EQ(hb.attempt_specs_size(), 0);
  auto again = Register("n1", 3, "inc1", all);
  EXPECT_EQ(again.desired_size(), 3);
  EXPECT_EQ(again.attempt_specs_size(), 0);
}

TEST_F(ControllerAgentsTest, ANewAttemptGetsItsOwnSpecAndTypedResumeFromWhileTheOldRankIsStillListed) {
  std::string id = Submit("r", 1);
  auto reg = Register("n1", 1, "inc1");
  ASSERT_EQ(reg.desired_size(), 1);
  const v1::RankAssignment first = reg.desired(0);
  EXPECT_EQ(first.resume_from(), "");
  v1::RankEvent ckpt;
  *ckpt.mutable_key() = first.key();
  ckpt.set_seq(1);
  ckpt.set_time_ms(1);
  ckpt.set_json(R"({"event":"checkpoint","step":5,"kind":"sharded","path":"/ck/step-5","bytes":1})");
  EXPECT_EQ(Heartbeat("n1", "inc1", {Rank(first, v1::RANK_STATE_RUNNING)}, {ckpt}).attempt_specs_size(), 0);

  // Stopped after saving (exit 75): the next attempt starts at once, and the worker still lists the
  // old rank's exit in the same heartbeat that learns of the new one.
  auto hb = Heartbeat("n1", "inc1", {Rank(first, v1::RANK_STATE_EXITED, 75)});
  ASSERT_EQ(hb.desired_size(), 1);
  const v1::RankAssignment second = hb.desired(0);
  EXPECT_EQ(second.key().attempt(), 2);
  EXPECT_EQ(second.resume_from(), "/ck/step-5");
  ExpectOnlyTheJobsEnv(second, {});
  EXPECT_EQ(SpecKeys(hb), (std::set<std::pair<std::string, int>>{{id, 2}}))
      << "the listed rank is attempt 1's: attempt 2 still needs its spec";

  hb = Heartbeat("n1", "inc1", {Rank(first, v1::RANK_STATE_EXITED, 75), Rank(second, v1::RANK_STATE_RUNNING)});
  EXPECT_EQ(hb.attempt_specs_size(), 0);
}

// Two workers, one name (docs/architecture.md): the second of two live workers is fenced and the
// job on the first never notices; before this, they took the node from each other on every
// heartbeat and each take-over restarted the job.
TEST_F(ControllerAgentsTest, ASecondLiveWorkerUnderOneNameIsFencedAndTheJobRunsOn) {
  std::vector<v1::RankStatus> running;
  std::string id = JobRunningOnN1(&running);

  auto second = Register("n1", 1, "b");
  EXPECT_TRUE(second.fenced().empty());
  EXPECT_GT(second.retry_after_ms(), 0) << "the holder heartbeated just now: the newcomer waits";
  EXPECT_LE(second.retry_after_ms(), 1500);
  EXPECT_EQ(second.desired_size(), 0) << "nothing to run before it holds the name";

  clock_.Advance(900ms);
  EXPECT_FALSE(Heartbeat("n1", "a", running).reregister()) << "the holder keeps the name";
  clock_.Advance(300ms);
  second = Register("n1", 1, "b");
  EXPECT_NE(second.fenced().find("two workers share --name n1"), std::string::npos) << second.fenced();
  EXPECT_NE(second.fenced().find("incarnation a, address a.host"), std::string::npos) << second.fenced();
  EXPECT_EQ(second.desired_size(), 0);
  // Fenced for good: asking again, or heartbeating, gets the same answer.
  clock_.Advance(5s);
  Heartbeat("n1", "a", running);
  EXPECT_FALSE(Register("n1", 1, "b").fenced().empty());
  auto hb = Heartbeat("n1", "b");
  EXPECT_FALSE(hb.fenced().empty());
  EXPECT_FALSE(hb.reregister());

  auto hb_a = Heartbeat("n1", "a", running);
  EXPECT_FALSE(hb_a.reregister());
  EXPECT_EQ(hb_a.desired_size(), 1);
  v1::Job job = *c_->GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job.attempts_size(), 1) << "the job never restarted";
}

TEST_F(ControllerAgentsTest, AHolderThatMissesItsHeartbeatIsTakenOverAndFencedIfItWakes) {
  std::vector<v1::RankStatus> running;
  std::string id = JobRunningOnN1(&running);

  auto next = Register("n1", 1, "b");
  ASSERT_GT(next.retry_after_ms(), 0);
  clock_.Advance(std::chrono::milliseconds(next.retry_after_ms()));  // "a" says nothing meanwhile
  next = Register("n1", 1, "b");
  EXPECT_TRUE(Registered(next)) << next.fenced() << " retry " << next.retry_after_ms();
  v1::Job job = *c_->GetJob(id);
  ASSERT_GE(job.attempts_size(), 1);
  EXPECT_NE(job.attempts(0).end_reason().find("vanished"), std::string::npos) << job.attempts(0).end_reason();
  EXPECT_EQ(v1::AttemptEnd_Name(job.attempts(0).end()), "ATTEMPT_END_RANK_LOST");

  // "a" was frozen, not dead: it wakes up and is told to stop instead of taking the name back.
  auto woke = Heartbeat("n1", "a", running);
  EXPECT_FALSE(woke.reregister());
  EXPECT_NE(woke.fenced().find("taken over by a newer eft-worker (incarnation b"), std::string::npos) << woke.fenced();
  EXPECT_FALSE(Register("n1", 1, "a", running).fenced().empty());
  EXPECT_FALSE(Heartbeat("n1", "b").reregister()) << "b holds the name";
}

TEST_F(ControllerAgentsTest, ARestartInTheWorkDirOrOfALostNodeTakesTheNameAtOnce) {
  std::vector<v1::RankStatus> running;
  JobRunningOnN1(&running);
  // Restarted in place: it names the incarnation whose work dir lock it inherited.
  EXPECT_TRUE(Registered(Register("n1", 1, "b", {}, "a")));
  EXPECT_FALSE(Heartbeat("n1", "a").fenced().empty());
  // A holder declared LOST gives the name up at once, to anyone.
  clock_.Advance(4s);
  c_->Tick();
  ASSERT_EQ(c_->ListNodes().nodes(0).state(), v1::NODE_STATE_LOST);
  EXPECT_TRUE(Registered(Register("n1", 1, "c")));
  EXPECT_FALSE(Heartbeat("n1", "b").fenced().empty());
  EXPECT_FALSE(Heartbeat("n1", "c").reregister());
}

// The workers' lease (agent.proto, HeartbeatResponse.lease_ms) is the heartbeat timeout after which
// this side declares a node LOST, in every reply: accepted, told to wait, to re-register, fenced.
TEST_F(ControllerAgentsTest, EveryReplyCarriesTheLeaseWhichIsTheHeartbeatTimeout) {
  std::vector<v1::RankStatus> running;
  JobRunningOnN1(&running);
  const auto again = Register("n1", 1, "a", running);
  ASSERT_TRUE(Registered(again));
  EXPECT_EQ(again.lease_ms(), 3000);
  EXPECT_EQ(Heartbeat("n1", "a", running).lease_ms(), 3000);

  const auto wait = Register("n1", 1, "b");
  ASSERT_GT(wait.retry_after_ms(), 0);
  EXPECT_EQ(wait.lease_ms(), 3000);
  const auto unknown = Heartbeat("n2", "x");
  ASSERT_TRUE(unknown.reregister());
  EXPECT_EQ(unknown.lease_ms(), 3000);

  clock_.Advance(900ms);
  Heartbeat("n1", "a", running);  // the holder is alive: "b" is fenced
  clock_.Advance(300ms);
  const auto fenced = Register("n1", 1, "b");
  ASSERT_FALSE(fenced.fenced().empty());
  EXPECT_EQ(fenced.lease_ms(), 3000);
  const auto fenced_heartbeat = Heartbeat("n1", "b");
  ASSERT_FALSE(fenced_heartbeat.fenced().empty());
  EXPECT_EQ(fenced_heartbeat.lease_ms(), 3000);
}

TEST_F(ControllerAgentsTest, WaitForJobChangeWakesOnAChangeAndTimesOutWithoutOne) {
  std::string id = Submit("w", 1);
  uint64_t version = 0;
  bool changed = false;
  auto job = c_->WaitForJobChange(id, &version, 10s, &changed);  // version 0: at once
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(changed);
  EXPECT_GT(version, 0u);

  const uint64_t seen = version;
  auto quiet = c_->WaitForJobChange(id, &version, 50ms, &changed);
  ASSERT_TRUE(quiet.ok());
  EXPECT_FALSE(changed);
  EXPECT_EQ(version, seen);

  std::thread canceller([&] {
    std::this_thread::sleep_for(50ms);
    EXPECT_TRUE(c_->CancelJob(id).ok());
  });
  auto start = std::chrono::steady_clock::now();
  auto woken = c_->WaitForJobChange(id, &version, 30s, &changed);
  canceller.join();
  ASSERT_TRUE(woken.ok());
  EXPECT_TRUE(changed);
  EXPECT_GT(version, seen);
  EXPECT_EQ(woken->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "woken by the change, not by the timeout";

  EXPECT_EQ(c_->WaitForJobChange("999", &version, 10ms, &changed).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c_->WaitForJobChange("no-such-job", &version, 10ms, &changed).status().code(),
            StatusCode::kInvalidArgument);
}

// A heartbeat's copy that the network delayed (a hedged attempt whose connection came back late)
// arrives after a newer heartbeat: its older view of the ranks (one it no longer runs, none of a
// newer attempt) is dropped, not taken as the rank having vanished. A copy of the newest one is taken
// again, as hedging needs; a restarted worker's numbers start anew.
TEST_F(ControllerAgentsTest, AHeartbeatOlderThanOneTakenIsDroppedUnread) {
  std::string id = Submit("j", 1);
  v1::RegisterRequest reg;
  reg.set_node_name("n1");
  reg.set_address("a.host");
  reg.set_slots(1);
  reg.set_incarnation("a");
  reg.set_report_seq(1);
  auto registered = c_->Register(reg);
  ASSERT_TRUE(registered.ok()) << registered.status();
  ASSERT_EQ(registered->desired_size(), 1);
  const std::vector<v1::RankStatus> running = AllRunning(registered->desired());
  auto send = [&](uint64_t seq, const std::vector<v1::RankStatus>& ranks) {
    v1::HeartbeatRequest req;
    req.set_node_name("n1");
    req.set_incarnation("a");
    req.set_report_seq(seq);
    for (const auto& r : ranks) *req.add_ranks() = r;
    return c_->Heartbeat(req);
  };
  ASSERT_TRUE(send(2, {}).ok());  // prepared before the rank started: delayed, it arrives after seq 3
  ASSERT_TRUE(send(3, running).ok());
  ASSERT_EQ(c_->GetJob(id)->state(), v1::JOB_STATE_RUNNING);
  auto late = send(2, {});
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(late.status().message(), "report 2 of node n1 arrived after report 3 (a copy delayed in the network): dropped");
  auto copy = send(3, running);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->desired_size(), 1) << "a copy of the newest report is answered as it was";
  v1::Job job = *c_->GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job.attempts_size(), 1) << job.attempts(0).end_reason();
  // A stale registration is dropped the same way.
  reg.set_report_seq(1);
  EXPECT_EQ(c_->Register(reg).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c_->GetJob(id)->attempts_size(), 1);
  // The worker restarts in place: a new incarnation counts from 1 again.
  reg.set_incarnation("b");
  reg.set_previous_incarnation("a");
  reg.set_report_seq(1);
  auto again = c_->Register(reg);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(Registered(*again));
}

}  // namespace
}  // namespace eft::controller
