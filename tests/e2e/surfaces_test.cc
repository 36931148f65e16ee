// End-to-end tests of what users touch: eftctl against a real cluster, log streaming, WatchJob,
// and a worker that restarts under a running job.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"

namespace eft::testing {
namespace {

using namespace std::chrono_literals;


struct CommandResult {
  int exit_code = -1;
  std::string out;
};

// Runs a shell command; stdout and stderr together.
CommandResult RunShell(const std::string& command) {
  std::string cmd = command + " 2>&1";
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs eftctl with the given arguments against the cluster.
CommandResult Eftctl(TestCluster& c, const std::string& args) {
  return RunShell(BuildDir() + "/cli/eftctl --controller " + c.controller_address() + " " + args);
}

TEST(Surfaces, EftctlSubmitFollowDescribeAndErrors) {
  TestCluster c;
  c.StartAll();
  std::string spec_path = c.dir() + "/job.yaml";
  {
    std::ofstream f(spec_path);
    f << "name: cli-job\n"
      << "resources: {nodes: {min: 2, max: 2}}\n"
      << "checkpoint: {dir: " << c.checkpoint_root() << "/cli}\n"
      << "command: [" << WorkloadBinary() << ", --steps, '6', --step-ms, '20', --checkpoint-every, '3',"
      << " --checkpoint-dir, " << c.checkpoint_root() << "/cli]\n";
  }
  CommandResult submit = Eftctl(c, "job submit -f " + spec_path + " --follow");
  EXPECT_EQ(submit.exit_code, 0) << submit.out;
  EXPECT_NE(submit.out.find("job 1 submitted (cli-job)"), std::string::npos) << submit.out;
  EXPECT_NE(submit.out.find("SUCCEEDED"), std::string::npos) << submit.out;

  CommandResult list = Eftctl(c, "job list");
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.out.find("ID   NAME      STATE"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("cli-job   SUCCEEDED"), std::string::npos) << list.out;

  CommandResult describe = Eftctl(c, "job describe 1");
  EXPECT_EQ(describe.exit_code, 0);
  EXPECT_NE(describe.out.find("all 2 ranks exited 0"), std::string::npos) << describe.out;
  EXPECT_NE(describe.out.find("attempt_started: attempt 1: world size 2"), std::string::npos) << describe.out;

  CommandResult json = Eftctl(c, "job get 1 -o json");
  EXPECT_EQ(json.exit_code, 0);
  EXPECT_NE(json.out.find("\"state\": \"JOB_STATE_SUCCEEDED\""), std::string::npos) << json.out;

  CommandResult checkpoints = Eftctl(c, "checkpoint list 1");
  EXPECT_NE(checkpoints.out.find("/cli/step-6"), std::string::npos) << checkpoints.out;

  CommandResult nodes = Eftctl(c, "node list");
  EXPECT_NE(nodes.out.find("node2   READY"), std::string::npos) << nodes.out;
  EXPECT_EQ(Eftctl(c, "node drain node2").exit_code, 0);
  EXPECT_NE(Eftctl(c, "node list").out.find("READY,DRAINED"), std::string::npos);

  // Errors: a bad spec names the field (exit 2, nothing sent); an unknown job is an error (exit 1).
  {
    std::ofstream f(c.dir() + "/bad.yaml");
    f << "name: bad\ncommand: [/bin/true]\ntraining: {learning_rate: 0.1}\n";
  }
  CommandResult bad = Eftctl(c, "job submit -f " + c.dir() + "/bad.yaml");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("spec.training.learning_rate: unknown field (did you mean lr?)"), std::string::npos)
      << bad.out;
  CommandResult missing = Eftctl(c, "job get 99");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("job 99 not found"), std::string::npos) << missing.out;
  EXPECT_EQ(Eftctl(c, "job frobnicate").exit_code, 2);
}

// A job of 300 steps followed through a pipe prints a bounded number of lines (a line per state
// change and event, a progress line per tenth), and under a terminal (script(1) gives eftctl a pty)
// one status block redrawn in place.
TEST(Surfaces, FollowPrintsBoundedLinesInAPipeAndABlockOnATerminal) {
  TestCluster c;
  c.StartAll();
  auto write_spec = [&](const std::string& name) {
    std::string path = c.dir() + "/" + name + ".yaml";
    std::ofstream f(path);
    f << "name: " << name << "\n"
      << "resources: {nodes: {min: 2, max: 2}}\n"
      << "checkpoint: {dir: " << c.checkpoint_root() << "/" << name << "}\n"
      << "command: [" << WorkloadBinary() << ", --steps, '300', --step-ms, '10', --checkpoint-every, '100',"
      << " --checkpoint-dir, " << c.checkpoint_root() << "/" << name << "]\n";
    return path;
  };
  CommandResult piped = Eftctl(c, "job submit -f " + write_spec("piped") + " --follow");
  EXPECT_EQ(piped.exit_code, 0) << piped.out;
  const size_t lines = std::count(piped.out.begin(), piped.out.end(), '\n');
  EXPECT_NE(piped.out.find("job 1 step 300/300 (100%)"), std::string::npos) << piped.out;
  EXPECT_NE(piped.out.find("job 1 (piped) SUCCEEDED attempt 1"), std::string::npos) << piped.out;
  EXPECT_NE(piped.out.find("job 1 event attempt_started: attempt 1: world size 2"), std::string::npos) << piped.out;
  EXPECT_EQ(piped.out.find('\x1b'), std::string::npos) << "no terminal codes in a pipe";
  // submitted + 4 states + 11 tenths + about 6 events; 300 lines before.
  EXPECT_LE(lines, 30u) << piped.out;
  size_t progress_lines = 0;
  for (size_t at = piped.out.find("job 1 step "); at != std::string::npos; at = piped.out.find("job 1 step ", at + 1)) {
    ++progress_lines;
  }
  EXPECT_LE(progress_lines, 11u) << piped.out;
  EXPECT_NE(piped.out.find("tokens/s (MFU 25.0%)"), std::string::npos) << "the workload reports an MFU of 0.25";

  CommandResult raw = Eftctl(c, "job watch 1 --no-progress");
  EXPECT_EQ(raw.exit_code, 0) << raw.out;
  EXPECT_NE(raw.out.find("job 1 SUCCEEDED attempt 1"), std::string::npos) << raw.out;

  // On a terminal: the block is drawn, then moved over (cursor up 4 lines) instead of scrolling.
  const std::string cmd = BuildDir() + "/cli/eftctl --controller " + c.controller_address() + " job submit -f " +
                          write_spec("tty") + " --follow";
  CommandResult tty = RunShell("TERM=xterm COLUMNS=100 script -qec '" + cmd + "' /dev/null");
  EXPECT_EQ(tty.exit_code, 0) << tty.out;
  EXPECT_NE(tty.out.find("\x1b[4A"), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("] 300/300  100%"), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("job 2 (tty)  SUCCEEDED  attempt 1"), std::string::npos) << tty.out;
  // Nothing but the submit line and whole 4-line frames, each but the first drawn over the one before.
  size_t frames = 1;
  for (size_t at = tty.out.find("\x1b[4A"); at != std::string::npos; at = tty.out.find("\x1b[4A", at + 1)) ++frames;
  EXPECT_EQ(static_cast<size_t>(std::count(tty.out.begin(), tty.out.end(), '\n')), 1 + 4 * frames) << tty.out;

  // logs -f in a pipe stays exactly the ranks' logs.
  CommandResult logs = Eftctl(c, "job logs 1 -f --rank 0");
  EXPECT_EQ(logs.exit_code, 0) << logs.out;
  EXPECT_NE(logs.out.find("step 300/300"), std::string::npos) << logs.out;
  EXPECT_EQ(logs.out.find('\x1b'), std::string::npos);
}

// The loss curves: describe shows them, plot draws them (read back by python3's XML parser), and
// after a kill -9 of the controller both are still there.
TEST(Surfaces, LossHistoryInDescribeAndPlotSurvivesAControllerKill) {
  TestCluster c;
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("curve", 2, 2, 600, 2, 200), &job).ok());
  job = c.WaitForJob(job.id(), IsTerminal, 90s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DescribeJob(job);
  ASSERT_GT(job.loss_history().train_size(), 0);
  EXPECT_LE(job.loss_history().train_size(), 512) << "600 steps, at most 512 points";
  EXPECT_EQ(job.loss_history().train(job.loss_history().train_size() - 1).step(), 600);
  int64_t samples = 0;
  for (const auto& p : job.loss_history().train()) samples += p.samples();
  EXPECT_EQ(samples, 600) << "every step's report in exactly one point";
  EXPECT_GT(job.loss_history().eval_size(), 0);

  CommandResult describe = Eftctl(c, "job describe " + job.id());
  EXPECT_EQ(describe.exit_code, 0) << describe.out;
  // 600 reports over 512: merged pairwise, so the first point is the mean of steps 1 and 2.
  EXPECT_NE(describe.out.find("Loss:        train 0.75 -> "), std::string::npos) << describe.out;
  EXPECT_NE(describe.out.find("\n             eval  "), std::string::npos) << describe.out;
  EXPECT_NE(describe.out.find("\u2581"), std::string::npos) << "a sparkline: " << describe.out;

  const std::string svg = c.dir() + "/loss.svg";
  CommandResult plot = Eftctl(c, "job plot " + job.id() + " --out " + svg);
  EXPECT_EQ(plot.exit_code, 0) << plot.out;
  CommandResult points = RunShell(
      "python3 -c \"import sys, xml.etree.ElementTree as ET; r = ET.parse(sys.argv[1]).getroot(); "
      "print(' '.join(str(len(l.get('points').split())) for l in r.iter('{http://www.w3.org/2000/svg}polyline')))\" " +
      svg);
  EXPECT_EQ(points.out, std::to_string(job.loss_history().train_size()) + " " +
                            std::to_string(job.loss_history().eval_size()) + "\n");
  CommandResult png = Eftctl(c, "job plot " + job.id() + " --out " + c.dir() + "/loss.png");
  EXPECT_EQ(png.exit_code, 2);
  EXPECT_NE(png.out.find("eftctl writes SVG; name the file *.svg"), std::string::npos) << png.out;

  // The flush runs every second; the job ended longer ago than that.
  std::this_thread::sleep_for(1500ms);
  c.KillController(9);
  c.StartController();
  CommandResult again = Eftctl(c, "job describe " + job.id());
  EXPECT_EQ(again.exit_code, 0) << again.out;
  auto loss_lines = [](const std::string& text) { return text.substr(text.find("Loss:"), text.find("\nAttempts:") - text.find("Loss:")); };
  EXPECT_EQ(loss_lines(again.out), loss_lines(describe.out));
  EXPECT_EQ(c.GetJob(job.id()).loss_history().DebugString(), job.loss_history().DebugString());
}

// The first mistakes people make with the tour's commands: each answer says what is wrong and
// what to do, in two lines, with none of gRPC's internals.
TEST(Surfaces, FirstErrorsSayWhatIsWrongAndWhatToDo) {
  ClusterOptions options;
  options.workers = 1;
  options.http = true;
  TestCluster c(options);
  c.StartAll();
  const int nobody = PickFreePort();
  // No controller there.
  CommandResult none = RunShell(BuildDir() + "/cli/eftctl --controller 127.0.0.1:" + std::to_string(nobody) + " node list");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_EQ(none.out, "eftctl: listing nodes: nothing listens on 127.0.0.1:" + std::to_string(nobody) +
                          " (connection refused).\nGive eftctl the controller's --listen address (--controller "
                          "HOST:PORT, $EFT_CONTROLLER or `controller:` in ~/.config/eft/config.yaml) and check that "
                          "eft-controller runs there.\n");
  // The REST port instead of the gRPC one.
  CommandResult rest = RunShell(BuildDir() + "/cli/eftctl --controller " + c.http_address() + " job list");
  EXPECT_EQ(rest.exit_code, 1);
  EXPECT_NE(rest.out.find("eftctl: listing jobs: " + c.http_address() +
                          " answers HTTP/1, not gRPC (the controller's REST --http port?)."),
            std::string::npos)
      << rest.out;
  // A worker pointed at the wrong port says so in its log.
  ChildProcess worker;
  const std::string log = c.dir() + "/lost-worker.log";
  ASSERT_TRUE(worker.Start({BuildDir() + "/worker/eft-worker", "--controller", "127.0.0.1:" + std::to_string(nobody),
                            "--name", "lost", "--work-dir", c.dir() + "/work/lost", "--address", "127.0.0.1",
                            "--snapshot-dir", c.dir() + "/work/lost/shm"},
                           {}, log));
  EXPECT_TRUE(WaitUntil([&] { return ReadFile(log).find("cannot register") != std::string::npos; }, 10s)) << ReadFile(log);
  const std::string said = ReadFile(log);
  EXPECT_NE(said.find("cannot register: nothing listens on 127.0.0.1:" + std::to_string(nobody) +
                      " (connection refused); is eft-controller running, and is 127.0.0.1:" + std::to_string(nobody) +
                      " its --listen address?"),
            std::string::npos)
      << said;
  for (const std::string& text : {none.out, rest.out, said}) {
    EXPECT_EQ(text.find("failed to connect to all addresses"), std::string::npos) << text;
  }
  worker.KillGroup();
  // A misspelt field and a file that is not there: exit 2 before anything is sent.
  CommandResult missing = Eftctl(c, "job submit -f " + c.dir() + "/no-such.yaml");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(missing.out, "eftctl: cannot read " + c.dir() +
                             "/no-such.yaml: No such file or directory (-f takes a job spec file, YAML or JSON; "
                             "'-' reads stdin)\n");
}

TEST(Surfaces, LogsAreShippedAndStreamedAndWatchSeesEveryState) {
  TestCluster c;
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("logs", 2, 2, 8, 50, 4), &job).ok());

  // WatchJob from the start: it must end on its own when the job ends.
  std::vector<v1::JobState> states;
  std::thread watcher([&] {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_id(job.id());
    auto reader = c.jobs().WatchJob(&ctx, req);
    v1::Job seen;
    while (reader->Read(&seen)) {
      if (states.empty() || states.back() != seen.state()) states.push_back(seen.state());
    }
    EXPECT_TRUE(reader->Finish().ok());
  });

  // Follow rank 0's log while the job runs; the stream ends after the job did.
  std::string rank0;
  {
    grpc::ClientContext ctx;
    v1::GetLogsRequest req;
    req.set_job_id(job.id());
    req.set_rank(0);
    req.set_follow(true);
    auto reader = c.jobs().GetLogs(&ctx, req);
    v1::LogChunk chunk;
    int64_t expected_offset = 0;
    while (reader->Read(&chunk)) {
      EXPECT_EQ(chunk.rank(), 0);
      EXPECT_EQ(chunk.offset(), expected_offset) << "chunks are contiguous";
      expected_offset += static_cast<int64_t>(chunk.data().size());
      rank0 += chunk.data();
    }
    EXPECT_TRUE(reader->Finish().ok());
  }
  watcher.join();
  EXPECT_NE(rank0.find("step 8/8"), std::string::npos) << rank0;
  ASSERT_FALSE(states.empty());
  EXPECT_EQ(states.back(), v1::JOB_STATE_SUCCEEDED);

  // The controller's copy equals the worker's file, byte for byte.
  std::string local = ReadFile(c.dir() + "/work/node0/logs/" + job.id() + "/attempt-1/rank-0.log");
  EXPECT_EQ(rank0, local);

  // Without a rank: every rank's log.
  grpc::ClientContext ctx;
  v1::GetLogsRequest all;
  all.set_job_id(job.id());
  auto reader = c.jobs().GetLogs(&ctx, all);
  std::set<int> ranks;
  v1::LogChunk chunk;
  while (reader->Read(&chunk)) ranks.insert(chunk.rank());
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
}

TEST(Surfaces, RestartedWorkerKillsItsOldRanksAndTheJobRecovers) {
  TestCluster c;
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("bounce", 3, 3, 30, 100, 5), &job).ok());
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.checkpoints_size() >= 1 || IsTerminal(j); }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  // SIGKILL only the worker process (not its group): its rank dies through PR_SET_PDEATHSIG.
  c.KillWorker(1);
  c.StartWorker(1);  // back within the heartbeat timeout, as a new incarnation
  job = c.WaitForJob(job.id(), IsTerminal, 90s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_GE(job.attempts_size(), 2);
  EXPECT_EQ(job.attempts(job.attempts_size() - 1).world_size(), 3) << "node1 is back, so the job uses it again";
  std::string text = ReadFile(c.ResultPath("bounce"));
  EXPECT_NE(text.find("\"acc\":465"), std::string::npos) << text;
}

TEST(Surfaces, WorkerSigtermStopsItsRanksGracefullyAndTheJobMovesOn) {
  TestCluster c;
  c.StartAll();
  v1::Job job;
  ASSERT_TRUE(c.Submit(c.WorkloadJob("drain", 2, 3, 40, 100, 100), &job).ok());
  job = c.WaitForJob(job.id(), [](const v1::Job& j) { return j.progress().step() >= 5 || IsTerminal(j); }, 60s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  c.worker(2).Signal(SIGTERM);
  int status = c.worker(2).Wait(10s);
  ASSERT_NE(status, -1) << "eft-worker did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  job = c.WaitForJob(job.id(), IsTerminal, 90s);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_GE(job.attempts_size(), 2);
  EXPECT_NE(job.attempts(0).end_reason().find("exit 75"), std::string::npos) << job.attempts(0).end_reason();
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_EQ(job.attempts(1).world_size(), 2) << "the stopping node gets nothing new";
  // The ranks saved a checkpoint when they stopped, so attempt 2 resumed from there, not from step 0.
  EXPECT_FALSE(job.attempts(1).resume_from().empty());
  EXPECT_NE(ReadFile(c.ResultPath("drain")).find("\"acc\":820"), std::string::npos);
}

}  // namespace
}  // namespace eft::testing
