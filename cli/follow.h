// Following a job until it ends: `job watch`, `job submit --follow` and `job logs -f`. Chooses how
// to show it (cli/progress_view.h): a live status block when stdout is a terminal and the output
// format is the table one, a bounded stream of lines otherwise, or with `progress` false the raw
// stream (one line per change the controller sends; for logs, only the log lines).
#pragma once

#include <string>

#include "cli/client.h"

namespace eft::cli {

// 0 only if the job succeeded.
int FollowJob(ControllerClient& c, const std::string& id, bool progress);
// `job logs -f`: the rank logs as JobLogs prints them; on a terminal (and with `progress`) the
// job's status block stays pinned below them. `rank` < 0: every rank; `attempt` 0: every attempt.
int FollowLogs(ControllerClient& c, const std::string& id, int rank, int attempt, bool progress);

}  // namespace eft::cli
