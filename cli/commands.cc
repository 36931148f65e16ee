#include "cli/commands.h"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "cli/follow.h"
#include "cli/loss_chart.h"
#include "common/file_util.h"
#include "spec/job_spec.h"

namespace eft::cli {

int SubmitJob(ControllerClient& c, const std::string& file, const std::string& request_id, bool follow,
              bool progress) {
  std::string text;
  if (file == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    Result<std::string> read = ReadFileToString(file);
    if (!read.ok()) {
      std::fprintf(stderr, "eftctl: %s (-f takes a job spec file, YAML or JSON; '-' reads stdin)\n",
                   read.status().message().c_str());
      return 2;
    }
    text = std::move(read).value();
  }
  auto spec = eft::spec::ParseJobSpec(text);
  if (!spec.ok()) {
    std::fprintf(stderr, "eftctl: %s: %s\n", file.c_str(), spec.status().message().c_str());
    return 2;
  }
  v1::SubmitJobRequest req;
  *req.mutable_spec() = *spec;
  req.set_request_id(request_id);
  v1::Job out;
  grpc::ClientContext ctx;
  c.Prepare(&ctx);
  grpc::Status s = c.jobs().SubmitJob(&ctx, req, &out);
  if (!s.ok()) return Fail("submitting " + file, s);
  Print(c.options(), out, "job " + out.id() + " submitted (" + out.spec().name() + ")\n");
  return follow ? FollowJob(c, out.id(), progress) : 0;
}

int ListJobs(ControllerClient& c, const std::string& state_filter) {
  v1::ListJobsRequest req;
  if (!state_filter.empty()) {
    v1::JobState st;
    std::string upper = state_filter;
    for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (!v1::JobState_Parse("JOB_STATE_" + upper, &st)) {
      std::fprintf(stderr,
                   "eftctl: --state %s: expected QUEUED, STARTING, RUNNING, RECOVERING, SUCCEEDED, FAILED or CANCELLED\n",
                   state_filter.c_str());
      return 2;
    }
    req.add_states(st);
  }
  v1::ListJobsResponse all;
  do {
    grpc::ClientContext ctx;
    c.Prepare(&ctx);
    v1::ListJobsResponse page;
    grpc::Status s = c.jobs().ListJobs(&ctx, req, &page);
    if (!s.ok()) return Fail("listing jobs", s);
    for (auto& j : *page.mutable_jobs()) *all.add_jobs() = std::move(j);
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty());
  Print(c.options(), all, JobsTable({all.jobs().begin(), all.jobs().end()}));
  return 0;
}

int ShowJob(ControllerClient& c, const std::string& id, JobView view) {
  v1::GetJobRequest req;
  req.set_id(id);
  v1::Job out;
  grpc::ClientContext ctx;
  c.Prepare(&ctx);
  grpc::Status s = c.jobs().GetJob(&ctx, req, &out);
  if (!s.ok()) return Fail("job " + id, s);
  switch (view) {
    case JobView::kCheckpoints: {
      v1::Job only;
      *only.mutable_checkpoints() = out.checkpoints();
      Print(c.options(), only, CheckpointsTable(out));
      break;
    }
    case JobView::kRow: Print(c.options(), out, JobsTable({out})); break;
    case JobView::kDescription: Print(c.options(), out, DescribeJob(out)); break;
  }
  return 0;
}

int CancelJob(ControllerClient& c, const std::string& id) {
  v1::CancelJobRequest req;
  req.set_id(id);
  v1::Job out;
  grpc::ClientContext ctx;
  c.Prepare(&ctx);
  grpc::Status s = c.jobs().CancelJob(&ctx, req, &out);
  if (!s.ok()) return Fail("cancelling job " + id, s);
  Print(c.options(), out, "job " + id + " " + ShortState(out.state()) + "\n");
  return 0;
}

int WatchJob(ControllerClient& c, const std::string& id, bool progress) { return FollowJob(c, id, progress); }

int JobLogs(ControllerClient& c, const std::string& id, bool follow, int rank, int attempt, bool progress) {
  if (follow) return FollowLogs(c, id, rank, attempt, progress);
  grpc::ClientContext ctx;
  v1::GetLogsRequest req;
  req.set_job_id(id);
  if (rank >= 0) req.set_rank(rank);
  req.set_attempt(attempt);
  c.Auth(&ctx);
  auto reader = c.jobs().GetLogs(&ctx, req);
  v1::LogChunk chunk;
  // With several ranks, prefix every line with its origin, like torchrun's tee does.
  std::map<std::pair<int, int>, std::string> partial;
  while (reader->Read(&chunk)) {
    if (rank >= 0) {
      std::cout << chunk.data();
      continue;
    }
    std::string& buf = partial[{chunk.attempt(), chunk.rank()}];
    buf += chunk.data();
    size_t pos;
    while ((pos = buf.find('\n')) != std::string::npos) {
      std::cout << "[attempt " << chunk.attempt() << " rank " << chunk.rank() << "] " << buf.substr(0, pos + 1);
      buf.erase(0, pos + 1);
    }
  }
  for (const auto& [key, rest] : partial) {
    if (!rest.empty()) std::cout << "[attempt " << key.first << " rank " << key.second << "] " << rest << "\n";
  }
  std::cout.flush();
  grpc::Status s = reader->Finish();
  return s.ok() ? 0 : Fail("logs of job " + id, s);
}

int PlotJob(ControllerClient& c, const std::string& id, const std::string& path) {
  const std::string ext = path.size() >= 4 ? path.substr(path.size() - 4) : "";
  if (path != "-" && ext != ".svg") {
    std::fprintf(stderr, "eftctl: --out %s: eftctl writes SVG; name the file *.svg (for a PNG: rsvg-convert -o loss.png loss.svg)\n",
                 path.c_str());
    return 2;
  }
  v1::GetJobRequest req;
  req.set_id(id);
  v1::Job job;
  grpc::ClientContext ctx;
  c.Prepare(&ctx);
  grpc::Status s = c.jobs().GetJob(&ctx, req, &job);
  if (!s.ok()) return Fail("job " + id, s);
  const std::string svg = LossSvg(job);
  if (path == "-") {
    std::cout << svg;
    std::cout.flush();
    return 0;
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << svg;
  f.close();
  if (!f) {
    std::fprintf(stderr, "eftctl: cannot write %s\n", path.c_str());
    return 1;
  }
  std::printf("wrote %s (train loss: %d points, eval loss: %d points)\n", path.c_str(),
              job.loss_history().train_size(), job.loss_history().eval_size());
  return 0;
}

int ListNodes(ControllerClient& c) {
  v1::ListNodesResponse out;
  grpc::ClientContext ctx;
  c.Prepare(&ctx);
  grpc::Status s = c.nodes().ListNodes(&ctx, v1::ListNodesRequest(), &out);
  if (!s.ok()) return Fail("listing nodes", s);
  Print(c.options(), out, NodesTable({out.nodes().begin(), out.nodes().end()}));
  return 0;
}

int SetNodeDrained(ControllerClient& c, const std::string& name, bool drained, bool evict) {
  v1::Node out;
  grpc::ClientContext ctx;
  c.Prepare(&ctx);
  grpc::Status s;
  if (drained) {
    v1::DrainNodeRequest req;
    req.set_name(name);
    req.set_evict(evict);
    s = c.nodes().DrainNode(&ctx, req, &out);
  } else {
    v1::UndrainNodeRequest req;
    req.set_name(name);
    s = c.nodes().UndrainNode(&ctx, req, &out);
  }
  if (!s.ok()) return Fail((drained ? "draining " : "undraining ") + name, s);
  Print(c.options(), out,
        "node " + name + (drained ? evict ? " drained; its ranks stop with a checkpoint\n" : " drained\n" : " undrained\n"));
  return 0;
}

}  // namespace eft::cli
