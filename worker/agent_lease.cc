// WorkerAgent's lease (agent.h; docs/architecture.md, "Lease" and "Riding out a short partition"):
// renewed by accepted replies, enforced on the io thread; the heartbeat deadline it sets, and how a heartbeat is
// sent (hedged: hedged_call.h).
#include <algorithm>

#include <boost/asio/post.hpp>

#include "common/clock.h"
#include "common/logging.h"
#include "worker/agent.h"

namespace eft::worker {
namespace {

// "1 rank of job 7 attempt 2", "3 ranks (2 of job 7 attempt 2, 1 of job 9 attempt 1)".
std::string CountByAttempt(const std::map<AttemptId, int>& ranks) {
  int total = 0;
  std::string parts;
  for (const auto& [attempt, n] : ranks) {
    total += n;
    if (!parts.empty()) parts += ", ";
    parts += std::to_string(n) + " of job " + attempt.first + " attempt " + std::to_string(attempt.second);
  }
  const std::string count = std::to_string(total) + (total == 1 ? " rank" : " ranks");
  if (ranks.size() == 1) return count + parts.substr(parts.find(' '));
  return count + " (" + parts + ")";
}

}  // namespace

void WorkerAgent::RenewLease(SteadyTime sent, int32_t lease_ms) {
  if (lease_ms > 0) {
    lease_ = std::chrono::milliseconds(lease_ms);
  } else {
    lease_.reset();  // a controller that gives none declares nodes lost all the same; nothing to hold to
  }
  // Replies may come out of order (a slow one after a newer one): the newest send time counts.
  if (!lease_from_ || sent > *lease_from_) lease_from_ = sent;
  if (lease_expired_ && !LeaseExpired(deps_.clock->Now())) {
    lease_expired_ = false;
    EFT_LOG(INFO) << "lease renewed: the controller " << config_.controller
                  << " accepted a request again; ranks start again as it asks";
  }
}

bool WorkerAgent::LeaseRunning() const {
  return lease_ && lease_from_ && !lease_expired_;
}

std::chrono::milliseconds WorkerAgent::HeartbeatDeadline() const {
  // After the lease ran out too: a controller slower than this could not keep a lease anyway, and
  // attempts stuck where a cut left them (a dropped SYN, a name lookup on a network that went away)
  // give way to new ones sooner (make image-test's reconnect waited out 5 s of rpc_timeout).
  if (!lease_) return config_.rpc_timeout;
  // A third: the abandoned call, a new connection and a retry or two all fit in the lease.
  return std::min(std::max(*lease_ / 3, std::chrono::milliseconds(100)), config_.rpc_timeout);
}

HedgeOptions WorkerAgent::HeartbeatHedge(std::chrono::milliseconds deadline) const {
  HedgeOptions hedge;
  hedge.deadline = deadline;
  hedge.hedge_after = config_.hedge_after;
  hedge.max_in_flight = 4;
  if (hedge.hedge_after.count() > 0 && controller_reachable_) {
    const auto usual = std::chrono::duration_cast<std::chrono::milliseconds>(4 * last_answer_);
    hedge.hedge_after = std::max(hedge.hedge_after, usual);
    hedge.max_attempts = 2;  // one copy for a controller that may only be stalled
  } else {
    hedge.max_attempts = 1000;  // a new connection every hedge_after until the deadline
  }
  return hedge;
}

HedgeOutcome WorkerAgent::SendHeartbeat(const v1::HeartbeatRequest& req, std::chrono::milliseconds deadline,
                                        v1::HeartbeatResponse* resp) {
  using Call = HedgedCall<v1::AgentService::StubInterface, v1::HeartbeatRequest, v1::HeartbeatResponse>;
  return Call::Call(
      &stub_, deps_.new_stub, [this](grpc::ClientContext* ctx) { AddJoinToken(endpoint_, ctx); },
      [](v1::AgentService::StubInterface* stub, grpc::ClientContext* ctx, const v1::HeartbeatRequest* r,
         v1::HeartbeatResponse* out, std::function<void(grpc::Status)> done) {
        stub->async()->Heartbeat(ctx, r, out, std::move(done));
      },
      req, resp, HeartbeatHedge(deadline));
}

bool WorkerAgent::LeaseExpired(SteadyTime now) const {
  // From the send time, not the reply's arrival: the controller times a node from the receipt of
  // its heartbeat, which is later, so this side gives up first.
  return lease_ && lease_from_ && now - *lease_from_ > *lease_;
}

void WorkerAgent::EnforceLease() {
  const SteadyTime now = deps_.clock->Now();
  if (lease_expired_ || !LeaseExpired(now)) return;
  lease_expired_ = true;
  ++lease_expirations_;
  // Killed, not stopped with their grace: the controller has declared or will declare this node
  // LOST, so whatever they save is not waited for, and they cannot save consistently anyway (a
  // sharded save needs every rank; the other nodes' ranks are being killed by stop_now).
  std::map<AttemptId, int> killing;
  for (auto& [key, r] : ranks_) {
    const v1::RankState state = r.status.state();
    if (r.killed || (state != v1::RANK_STATE_RUNNING && state != v1::RANK_STATE_STOPPING)) continue;
    launcher_->Stop(r.id, std::chrono::milliseconds(0));
    r.status.set_state(v1::RANK_STATE_STOPPING);
    r.status.set_lease_expired(true);
    r.killed = true;
    ++killing[AttemptIdOf(key)];
  }
  const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - *lease_from_);
  EFT_LOG(WARNING) << "controller " << config_.controller << " unreachable for " << SecondsText(silent) << " (lease "
                   << SecondsText(*lease_) << "): "
                   << (killing.empty() ? std::string("no rank to stop")
                                       : "killing " + CountByAttempt(killing) +
                                             "; the controller restarts its jobs without this node")
                   << "; starting none until it answers";
}

void WorkerAgent::ScheduleLeaseCheck() {
  lease_timer_.expires_after(config_.lease_check_interval);
  lease_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // the io thread is stopping
    {
      MutexLock lock(&mu_);
      EnforceLease();
    }
    ScheduleLeaseCheck();
  });
}

}  // namespace eft::worker
