// ProgressView (cli/progress_view.h): the exact text eftctl writes while following a job, from a
// sequence of job snapshots and a fake clock.
#include "cli/progress_view.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace eft::cli {
namespace {

using google::protobuf::util::TimeUtil;

v1::Job Job(v1::JobState state, int attempt = 1, int world = 2) {
  v1::Job j;
  j.set_id("7");
  j.mutable_spec()->set_name("capitals");
  j.set_state(state);
  j.set_attempt(attempt);
  j.set_world_size(world);
  return j;
}

// Step `step` of `total`, reported at `ms` (the worker's clock, which the ETA is measured on).
v1::Job AtStep(int64_t step, int64_t total, int64_t ms, double loss = 0.5) {
  v1::Job j = Job(v1::JOB_STATE_RUNNING);
  auto* p = j.mutable_progress();
  p->set_step(step);
  p->set_total_steps(total);
  p->set_loss(loss);
  p->set_tokens_per_s(1234);
  *p->mutable_time() = TimeUtil::MillisecondsToTimestamp(ms);
  return j;
}

void AddEvent(v1::Job* j, const std::string& type, const std::string& message) {
  auto* e = j->add_events();
  e->set_type(type);
  e->set_message(message);
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ProgressViewLines, TwoHundredStepsGiveElevenProgressLines) {
  ProgressView view(ProgressView::Mode::kLines);
  std::string out;
  v1::Job queued = Job(v1::JOB_STATE_QUEUED, 0, 0);
  AddEvent(&queued, "submitted", "by anonymous");
  out += view.Update(queued, 0);
  for (int step = 1; step <= 200; ++step) {
    v1::Job j = AtStep(step, 200, 1000 + step * 100);
    AddEvent(&j, "submitted", "by anonymous");
    out += view.Update(j, 0.1 * step);  // 20 s in all: only the tenths print
  }
  v1::Job done = Job(v1::JOB_STATE_SUCCEEDED, 1, 0);
  *done.mutable_progress() = AtStep(200, 200, 21000).progress();
  AddEvent(&done, "submitted", "by anonymous");
  AddEvent(&done, "attempt_ended", "attempt 1: succeeded");
  out += view.Update(done, 20.5);
  out += view.Finish(done, 20.5);

  const std::vector<std::string> lines = SplitLines(out);
  EXPECT_EQ(Count(out, " step "), 11u) << out;  // 1, 20, 40, ..., 200
  EXPECT_EQ(lines.size(), 16u) << out;          // + 3 states + 2 events
  EXPECT_EQ(lines[0], "job 7 (capitals) QUEUED");
  EXPECT_EQ(lines[1], "job 7 event submitted: by anonymous");
  EXPECT_EQ(lines[2], "job 7 (capitals) RUNNING attempt 1 world 2");
  EXPECT_EQ(lines[3], "job 7 step 1/200 (0%) loss 0.5 1234 tokens/s");
  // By step 20 the pace is known: 0.1 s per step on the worker's clock, 180 steps to go.
  EXPECT_EQ(lines[4], "job 7 step 20/200 (10%) loss 0.5 1234 tokens/s ETA 18s");
  EXPECT_EQ(lines[13], "job 7 step 200/200 (100%) loss 0.5 1234 tokens/s");
  EXPECT_EQ(lines[14], "job 7 event attempt_ended: attempt 1: succeeded");
  EXPECT_EQ(lines[15], "job 7 (capitals) SUCCEEDED attempt 1");
}

TEST(ProgressViewLines, AJobThatEndsShowsItsLastStepThenHowItEnded) {
  ProgressView view(ProgressView::Mode::kLines);
  (void)view.Update(AtStep(10, 300, 1000), 0);
  v1::Job done = AtStep(300, 300, 5000);
  done.set_state(v1::JOB_STATE_SUCCEEDED);
  done.set_world_size(0);
  done.set_reason("all 2 ranks exited 0");
  AddEvent(&done, "succeeded", "all 2 ranks exited 0");
  EXPECT_EQ(view.Update(done, 1),
            "job 7 step 300/300 (100%) loss 0.5 1234 tokens/s\n"
            "job 7 event succeeded: all 2 ranks exited 0\n"
            "job 7 (capitals) SUCCEEDED attempt 1 (all 2 ranks exited 0)\n");
  EXPECT_EQ(view.Finish(done, 2), "");
}

TEST(ProgressViewLines, WithoutATotalAProgressLineEveryThirtySeconds) {
  ProgressView view(ProgressView::Mode::kLines);
  std::string out;
  for (int step = 1; step <= 100; ++step) out += view.Update(AtStep(step, 0, step * 1000), step);
  // Steps 1, 31, 61, 91, then the last one on Finish.
  out += view.Finish(AtStep(100, 0, 100000), 100.5);
  EXPECT_EQ(Count(out, " step "), 5u) << out;
  EXPECT_NE(out.find("job 7 step 31 loss 0.5"), std::string::npos) << out;
  EXPECT_NE(out.find("job 7 step 100 loss 0.5"), std::string::npos) << out;
}

TEST(ProgressViewLines, LongJobStaysBounded) {
  // 100,000 steps over 10 hours, seen every step: 11 tenths + one line per 30 s at most.
  ProgressView view(ProgressView::Mode::kLines);
  size_t lines = 0;
  for (int step = 1; step <= 100000; ++step) {
    lines += SplitLines(view.Update(AtStep(step, 100000, step * 360), step * 0.36)).size();
  }
  EXPECT_LE(lines, 1 + 11 + 36000 / 30 + 1);
  EXPECT_GE(lines, 1000u) << "every 30 s there is a line, so a slow job still shows life";
}

TEST(ProgressViewLines, EventsOnceAndABoundedBacklog) {
  ProgressView view(ProgressView::Mode::kLines);
  v1::Job j = AtStep(5, 10, 5000);
  for (int i = 0; i < 15; ++i) AddEvent(&j, "e" + std::to_string(i), "m");
  std::string first = view.Update(j, 0);
  EXPECT_NE(first.find("job 7: 5 earlier events (eftctl job describe 7)"), std::string::npos) << first;
  EXPECT_EQ(first.find("event e4:"), std::string::npos) << first;
  EXPECT_NE(first.find("event e5: m"), std::string::npos) << first;
  EXPECT_NE(first.find("event e14: m"), std::string::npos) << first;
  EXPECT_EQ(view.Update(j, 1), "") << "nothing changed";
  AddEvent(&j, "resized", "grow: node2 is back, 2 -> 3 nodes");
  EXPECT_EQ(view.Update(j, 2), "job 7 event resized: grow: node2 is back, 2 -> 3 nodes\n");
}

TEST(ProgressViewLines, StateChangesAndReasons) {
  ProgressView view(ProgressView::Mode::kLines);
  v1::Job j = AtStep(5, 10, 5000);
  (void)view.Update(j, 0);
  v1::Job recovering = j;
  recovering.set_state(v1::JOB_STATE_RECOVERING);
  recovering.set_world_size(0);
  recovering.set_reason("node node1 lost (no heartbeat for 3.0 s)");
  EXPECT_EQ(view.Update(recovering, 1),
            "job 7 (capitals) RECOVERING attempt 1 (node node1 lost (no heartbeat for 3.0 s))\n");
  v1::Job next = AtStep(3, 10, 9000);  // attempt 2 resumed at step 3: a new tenth
  next.set_attempt(2);
  next.set_world_size(1);
  EXPECT_EQ(view.Update(next, 2),
            "job 7 (capitals) RUNNING attempt 2 world 1\njob 7 step 3/10 (30%) loss 0.5 1234 tokens/s\n");
  v1::Job on_gpu = AtStep(4, 10, 10000);  // a trainer that knows its GPU's peak reports the MFU
  on_gpu.set_attempt(2);
  on_gpu.set_world_size(1);
  on_gpu.mutable_progress()->set_mfu(0.4127);
  EXPECT_EQ(view.Update(on_gpu, 3), "job 7 step 4/10 (40%) loss 0.5 1234 tokens/s (MFU 41.3%) ETA 6s\n");
}

TEST(ProgressViewTerminal, DrawsOnceThenRedrawsInPlace) {
  ProgressView view(ProgressView::Mode::kTerminal);
  v1::Job j = AtStep(50, 200, 10000, 0.509);
  j.mutable_progress()->set_eval_loss(0.6013);
  j.mutable_progress()->set_eval_step(40);
  AddEvent(&j, "running", "all 2 ranks of attempt 1 started");
  const std::string first = view.Update(j, 0, 100);
  EXPECT_EQ(first,
            "\r\x1b[2Kjob 7 (capitals)  RUNNING  attempt 1  world 2\n"
            "\r\x1b[2K[==========>                             ] 50/200  25%\n"
            "\r\x1b[2Kloss 0.509  eval loss 0.6013 (step 40)  1234 tokens/s\n"
            "\r\x1b[2Klast event: running: all 2 ranks of attempt 1 started\n");
  EXPECT_EQ(view.Update(j, 1, 100), "") << "the same frame is not drawn again";
  v1::Job named = j;  // named eval sets (spec.data.eval): each with its loss
  for (const auto& [name, loss] : {std::pair{"new", 0.6013}, std::pair{"known", 1.2}}) {
    v1::EvalLoss* e = named.mutable_progress()->add_evals();
    e->set_set(name);
    e->set_loss(loss);
    e->set_step(40);
  }
  EXPECT_NE(ProgressView(ProgressView::Mode::kTerminal).Update(named, 0, 100)
                .find("loss 0.509  eval loss new 0.6013, known 1.2 (step 40)  1234 tokens/s\n"),
            std::string::npos);
  v1::Job later = j;
  later.mutable_progress()->set_step(57);
  *later.mutable_progress()->mutable_time() = TimeUtil::MillisecondsToTimestamp(17000);  // 1 s per step
  const std::string second = view.Update(later, 2, 100);
  ASSERT_EQ(second.rfind("\x1b[4A", 0), 0u) << "back to the block's first line";
  EXPECT_NE(second.find("] 57/200  28%  ETA 2m23s\n"), std::string::npos) << second;
  EXPECT_EQ(Count(second, "\n"), 4u);

  // Log lines go where the block was, and the block is drawn again below them.
  EXPECT_EQ(view.Clear(), "\x1b[4A\r\x1b[J");
  EXPECT_EQ(view.Clear(), "") << "nothing on the screen to clear";
  const std::string again = view.Redraw(100);
  EXPECT_EQ(again.find("\x1b[4A"), std::string::npos) << "a fresh block below the log lines";
  EXPECT_EQ(Count(again, "\n"), 4u);

  v1::Job done = later;
  done.set_state(v1::JOB_STATE_SUCCEEDED);
  done.set_world_size(0);
  const std::string last = view.Finish(done, 3, 100);
  EXPECT_NE(last.find("SUCCEEDED  attempt 1\n"), std::string::npos) << last;
  EXPECT_EQ(last.find("ETA"), std::string::npos) << "no ETA for a job that ended";
}

TEST(ProgressViewTerminal, LinesFitTheWidth) {
  v1::Job j = AtStep(57, 200, 10000);
  j.set_reason("");
  AddEvent(&j, "attempt_started",
           "attempt 2: world size 3 on node0,node1,node2 (step 40; attempt 1 reached step 57: 17 steps lost) \xc3\xa9\xc3\xa9");
  for (int width : {120, 80, 40, 24, 12}) {
    for (const std::string& line : ProgressView::Frame(j, 30, width)) {
      int columns = 0;
      for (char ch : line) columns += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
      EXPECT_LE(columns, width - 1) << width << ": " << line;
    }
  }
  EXPECT_EQ(ProgressView::Frame(j, 30, 40)[1], "[====>           ] 57/200  28%  ETA 30s");
  EXPECT_EQ(ProgressView::Frame(j, 30, 24)[1], "step 57/200  28%  ET...") << "too narrow for a bar";
  EXPECT_EQ(ProgressView::Frame(j, 30, 24)[3], "last event: attempt_...");
  const std::vector<std::string> before = ProgressView::Frame(Job(v1::JOB_STATE_QUEUED, 0, 0), -1, 80);
  EXPECT_EQ(before[1], "waiting for the first step");
  EXPECT_EQ(before[2], "loss -");
  EXPECT_EQ(before[3], "last event: -");
}

TEST(ProgressViewText, FitAndDuration) {
  EXPECT_EQ(ProgressView::Fit("abcdef", 6), "abcdef");
  EXPECT_EQ(ProgressView::Fit("abcdefg", 6), "abc...");
  EXPECT_EQ(ProgressView::Fit("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 6),
            "\xc3\xa9\xc3\xa9\xc3\xa9...");
  EXPECT_EQ(ProgressView::Fit("abcdef", 2), "ab");
  EXPECT_EQ(ProgressView::Duration(42), "42s");
  EXPECT_EQ(ProgressView::Duration(185), "3m05s");
  EXPECT_EQ(ProgressView::Duration(3720), "1h02m");
}

}  // namespace
}  // namespace eft::cli
