// RankLauncher: how the worker's agent runs its rank processes. It starts one (argv, environment, log
// file), stops one, and tells of the event lines a rank writes to EFT_EVENTS_FD and of its exit. The
// agent has no other way to processes (AgentDeps::new_launcher), so its tests can see what it would
// launch and end ranks at will without forking any.
//
// ProcessRankLauncher is the real one: ProcessSupervisor's children (a process group each, the log
// file, the events pipe, PR_SET_PDEATHSIG), each recorded in the work dir's RankLedger while it
// runs, so that the next worker on the dir can kill what outlived this one.
//
// Launch and Stop are called, and the callbacks run, on the thread of the io_context the launcher
// was made with, which must be long-lived (process_supervisor.h says why). Destroying a launcher
// SIGKILLs every rank it still runs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "common/status.h"
#include "worker/process_supervisor.h"
#include "worker/rank_ledger.h"

namespace eft::worker {

class RankLauncher {
 public:
  using Id = ProcessSupervisor::Id;
  // on_exit fires once per launched rank, after every event line it wrote was delivered.
  using Callbacks = ProcessSupervisor::Callbacks;

  virtual ~RankLauncher() = default;

  // Starts a rank under `id` (new, or one whose on_exit was delivered) and returns its pid; an error
  // says why it could not start, and no callback follows for it.
  virtual Result<pid_t> Launch(Id id, const LaunchSpec& spec) = 0;
  // SIGTERM to the rank now, SIGKILL after `grace`; its end comes through on_exit. No-op for an
  // unknown or ended id.
  virtual void Stop(Id id, std::chrono::milliseconds grace) = 0;
};

// Makes the agent's launcher in WorkerAgent::Start, once the agent holds its work dir; an error fails
// the start.
using NewRankLauncher = std::function<Result<std::unique_ptr<RankLauncher>>(boost::asio::io_context& io,
                                                                            RankLauncher::Callbacks callbacks)>;

class ProcessRankLauncher final : public RankLauncher {
 public:
  // First kills the process groups a previous worker left recorded in the ledger at `ledger_path`.
  static Result<std::unique_ptr<RankLauncher>> Create(boost::asio::io_context& io, Callbacks callbacks,
                                                      const std::string& ledger_path);

  Result<pid_t> Launch(Id id, const LaunchSpec& spec) override;
  void Stop(Id id, std::chrono::milliseconds grace) override;

 private:
  ProcessRankLauncher(boost::asio::io_context& io, Callbacks callbacks, RankLedger ledger);
  void OnExit(Id id, ProcessExit exit);

  Callbacks callbacks_;
  RankLedger ledger_;
  std::map<Id, pid_t> pids_;  // of the ranks running
  ProcessSupervisor supervisor_;  // last: destroyed first, while what its callbacks use is still there
};

}  // namespace eft::worker
