// eftctl's commands, one function each. Each returns the process exit code: 0 success, 1 the
// controller said no or is unreachable (reported on stderr by Fail), 2 bad input.
// cli/main.cc maps the command line onto them.
#pragma once

#include <string>

#include "cli/client.h"

namespace eft::cli {

// `job submit -f FILE` ('-' = stdin). With `follow`, shows the job until it ends (cli/follow.h;
// `progress` false: the raw stream) and exits 0 only if it succeeded.
int SubmitJob(ControllerClient& c, const std::string& file, const std::string& request_id, bool follow,
              bool progress = true);
// `job list [--state S]`, newest first, every page.
int ListJobs(ControllerClient& c, const std::string& state_filter);
// `job get`, `job describe` and `checkpoint list`: one job, shown as a table row, in full, or only
// its checkpoints.
enum class JobView { kRow, kDescription, kCheckpoints };
int ShowJob(ControllerClient& c, const std::string& id, JobView view);
int CancelJob(ControllerClient& c, const std::string& id);
// `job watch`: the job until it ends, as cli/follow.h shows it; 0 only if it succeeded.
int WatchJob(ControllerClient& c, const std::string& id, bool progress = true);
// `job logs`: rank < 0 means every rank (lines prefixed with their attempt and rank); attempt 0
// means every attempt. `follow`: until the job ends, with its status block on a terminal unless
// `progress` is false.
int JobLogs(ControllerClient& c, const std::string& id, bool follow, int rank, int attempt, bool progress = true);

// `job plot ID --out FILE`: the job's loss curves as an SVG picture (cli/loss_chart.h); '-' writes
// it to stdout.
int PlotJob(ControllerClient& c, const std::string& id, const std::string& out);

int ListNodes(ControllerClient& c);
// `node drain [--evict]` (drained = true) and `node undrain`.
int SetNodeDrained(ControllerClient& c, const std::string& name, bool drained, bool evict = false);

}  // namespace eft::cli
