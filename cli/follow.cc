#include "cli/follow.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "cli/progress_view.h"

namespace eft::cli {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A status block only where a person watches: stdout is a terminal that understands cursor
// movements, and the output is not meant for a program (-o json|yaml).
bool LiveBlock(const ControllerClient& c) {
  const char* term = std::getenv("TERM");
  return c.options().format == OutputFormat::kTable && ::isatty(STDOUT_FILENO) == 1 && term != nullptr &&
         std::strcmp(term, "dumb") != 0;
}

// Asked again for every frame: the window may be resized while a job runs.
int TerminalWidth() {
  struct winsize ws {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* cols = std::getenv("COLUMNS")) {
    const int n = std::atoi(cols);
    if (n > 0) return n;
  }
  return 80;
}

void Write(const std::string& text) {
  if (text.empty()) return;
  std::cout << text;
  std::cout.flush();
}

// Splits log chunks into whole lines, prefixed with their attempt and rank when several ranks are
// shown (as torchrun's tee does); a partial line waits for its end.
class LogLines {
 public:
  explicit LogLines(bool prefix) : prefix_(prefix) {}
  std::string Add(const v1::LogChunk& chunk) {
    std::string& buf = partial_[{chunk.attempt(), chunk.rank()}];
    buf += chunk.data();
    std::string out;
    size_t pos;
    while ((pos = buf.find('\n')) != std::string::npos) {
      out += Prefix(chunk.attempt(), chunk.rank()) + buf.substr(0, pos + 1);
      buf.erase(0, pos + 1);
    }
    return out;
  }
  std::string Rest() {
    std::string out;
    for (auto& [key, rest] : partial_) {
      if (!rest.empty()) out += Prefix(key.first, key.second) + rest + "\n";
      rest.clear();
    }
    return out;
  }

 private:
  std::string Prefix(int attempt, int rank) const {
    return prefix_ ? "[attempt " + std::to_string(attempt) + " rank " + std::to_string(rank) + "] " : "";
  }
  const bool prefix_;
  std::map<std::pair<int, int>, std::string> partial_;
};

}  // namespace

int FollowJob(ControllerClient& c, const std::string& id, bool progress) {
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_id(id);
  c.Auth(&ctx);
  auto reader = c.jobs().WatchJob(&ctx, req);
  ProgressView view(LiveBlock(c) ? ProgressView::Mode::kTerminal : ProgressView::Mode::kLines);
  v1::Job job;
  std::string last;
  bool seen = false;
  while (reader->Read(&job)) {
    seen = true;
    if (!progress) {
      std::string line = ProgressLine(job);
      if (line != last) Write(line + "\n");
      last = line;
      continue;
    }
    Write(view.Update(job, Now(), TerminalWidth()));
  }
  grpc::Status s = reader->Finish();
  if (progress && seen) Write(view.Finish(job, Now(), TerminalWidth()));
  if (!s.ok()) return Fail("watching job " + id, s);
  return job.state() == v1::JOB_STATE_SUCCEEDED ? 0 : 1;
}

int FollowLogs(ControllerClient& c, const std::string& id, int rank, int attempt, bool progress) {
  grpc::ClientContext ctx;
  v1::GetLogsRequest req;
  req.set_job_id(id);
  req.set_follow(true);
  if (rank >= 0) req.set_rank(rank);
  req.set_attempt(attempt);
  c.Auth(&ctx);
  auto reader = c.jobs().GetLogs(&ctx, req);

  // Only a terminal gets the block: in a pipe the logs stay exactly what the ranks wrote.
  const bool block = progress && LiveBlock(c);
  std::mutex mu;  // stdout and the view: log lines and frames must not interleave
  ProgressView view(ProgressView::Mode::kTerminal);
  grpc::ClientContext watch_ctx;
  std::thread watcher;
  if (block) {
    c.Auth(&watch_ctx);
    watcher = std::thread([&] {
      v1::WatchJobRequest wreq;
      wreq.set_id(id);
      auto watch = c.jobs().WatchJob(&watch_ctx, wreq);
      v1::Job job;
      while (watch->Read(&job)) {
        std::lock_guard<std::mutex> lock(mu);
        Write(view.Update(job, Now(), TerminalWidth()));
      }
      (void)watch->Finish();  // the logs' stream reports the errors that matter
    });
  }
  LogLines lines(/*prefix=*/rank < 0);
  v1::LogChunk chunk;
  while (reader->Read(&chunk)) {
    std::string text = lines.Add(chunk);
    if (text.empty()) continue;
    std::lock_guard<std::mutex> lock(mu);
    Write(view.Clear() + text + view.Redraw(TerminalWidth()));
  }
  grpc::Status s = reader->Finish();
  if (block) {
    watch_ctx.TryCancel();
    watcher.join();
  }
  std::string rest = lines.Rest();
  Write(view.Clear() + rest + view.Redraw(TerminalWidth()));
  return s.ok() ? 0 : Fail("logs of job " + id, s);
}

}  // namespace eft::cli
