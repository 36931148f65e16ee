#include "worker/rank_launcher.h"

#include "common/logging.h"

namespace eft::worker {

Result<std::unique_ptr<RankLauncher>> ProcessRankLauncher::Create(boost::asio::io_context& io, Callbacks callbacks,
                                                                  const std::string& ledger_path) {
  RankLedger ledger(ledger_path);
  auto killed = ledger.KillLeftovers();
  if (!killed.ok()) return killed.status().WithContext("cleaning up ranks of a previous worker");
  if (*killed > 0) EFT_LOG(WARNING) << "killed " << *killed << " rank process groups left by a previous worker";
  return std::unique_ptr<RankLauncher>(new ProcessRankLauncher(io, std::move(callbacks), std::move(ledger)));
}

ProcessRankLauncher::ProcessRankLauncher(boost::asio::io_context& io, Callbacks callbacks, RankLedger ledger)
    : callbacks_(std::move(callbacks)),
      ledger_(std::move(ledger)),
      supervisor_(io, ProcessSupervisor::Callbacks{
                          [this](Id id, const std::string& line) { callbacks_.on_event_line(id, line); },
                          [this](Id id, ProcessExit exit) { OnExit(id, exit); }}) {}

Result<pid_t> ProcessRankLauncher::Launch(Id id, const LaunchSpec& spec) {
  EFT_ASSIGN_OR_RETURN(pid_t pid, supervisor_.Spawn(id, spec));
  pids_[id] = pid;
  // Unrecorded, the rank only escapes the next worker's clean-up should this one die: no reason to fail it.
  if (Status s = ledger_.Record(pid); !s.ok()) EFT_LOG(WARNING) << "rank ledger: " << s;
  return pid;
}

void ProcessRankLauncher::Stop(Id id, std::chrono::milliseconds grace) { supervisor_.Stop(id, grace); }

void ProcessRankLauncher::OnExit(Id id, ProcessExit exit) {
  if (auto it = pids_.find(id); it != pids_.end()) {
    if (Status s = ledger_.Forget(it->second); !s.ok()) EFT_LOG(WARNING) << "rank ledger: " << s;
    pids_.erase(it);
  }
  callbacks_.on_exit(id, exit);  // last: it may launch `id` again
}

}  // namespace eft::worker
