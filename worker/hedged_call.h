// CallHedged: one unary request sent on up to `max_attempts` new connections, staggered, the first
// answer taken (docs/architecture.md, "Riding out a short partition").
//
// Why: after a cut heals, a worker has a fraction of its lease left to reach the controller. A single
// attempt whose connection's SYN was dropped during the cut waits out its connect timeout before the
// next one starts, so up to connect_timeout + reconnect_pause pass after the heal with nothing on the
// wire. Starting another attempt on a new stub every `hedge_after` while none has answered puts one
// on the wire within hedge_after of the heal.
//
// Contract: every attempt carries the same request, so the receiver must take duplicates (the
// controller does: events are acknowledged by sequence number, reports are states, not deltas). When
// one attempt answers, the others are cancelled; a reply lost that way is like one lost to a deadline.
// Once every attempt started so far has failed, the call returns that failure at once (a refused
// connection is not retried here: the caller paces its retries). All attempts share one deadline.
// Blocks the calling thread until every attempt has ended (the losers are cancelled first).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

namespace eft::worker {

struct HedgeOptions {
  std::chrono::milliseconds deadline{5000};  // for every attempt, counted from the first
  // Between attempts while none has answered; zero, or not less than the deadline: one attempt.
  std::chrono::milliseconds hedge_after{0};
  int max_attempts = 4;   // in all
  int max_in_flight = 4;  // at once: a new one starts when an older one gives up
};

struct HedgeOutcome {
  grpc::Status status;  // the answering attempt's (OK), else the last failure's
  int attempts = 0;     // started
  int answered_by = -1;  // index of the attempt whose reply is in *response; -1: none
};

template <typename Stub, typename Request, typename Response>
class HedgedCall {
 public:
  using NewStub = std::function<std::unique_ptr<Stub>()>;
  // Starts the RPC on `stub` with the callback API (stub->async()->Method(ctx, req, resp, done)).
  using Start = std::function<void(Stub* stub, grpc::ClientContext* ctx, const Request* request, Response* response,
                                   std::function<void(grpc::Status)> done)>;
  using Prepare = std::function<void(grpc::ClientContext* ctx)>;  // metadata (the join token)

  // `*stub` carries the first attempt. On return it holds the stub of the attempt that answered, so
  // the next call reuses a connection that works, or, when none did, a new one from `new_stub`.
  static HedgeOutcome Call(std::unique_ptr<Stub>* stub, const NewStub& new_stub, const Prepare& prepare,
                           const Start& start, const Request& request, Response* response, HedgeOptions options) {
    // Stubs, contexts and replies stay on this thread and outlive every attempt (the wait for the
    // cancelled ones below): gRPC 1.51 aborts when a channel's last reference goes on one of its
    // callback threads. Only the counters are shared with the callbacks.
    auto shared = std::make_shared<Shared>();
    std::vector<std::unique_ptr<Attempt>> attempts;
    const auto deadline = std::chrono::system_clock::now() + options.deadline;
    const auto steady_deadline = std::chrono::steady_clock::now() + options.deadline;
    const bool hedging = options.hedge_after.count() > 0 && options.hedge_after < options.deadline;
    const int max_attempts = hedging ? std::max(1, options.max_attempts) : 1;

    auto launch = [&](std::unique_ptr<Stub> s) {
      attempts.push_back(std::make_unique<Attempt>());
      Attempt& a = *attempts.back();
      a.stub = std::move(s);
      a.ctx.set_deadline(deadline);
      if (prepare) prepare(&a.ctx);
      const int index = static_cast<int>(attempts.size()) - 1;
      // gRPC may run the callback before start returns: shared->mu is not held here.
      start(a.stub.get(), &a.ctx, &request, &a.response, [shared, index](grpc::Status status) {
        std::lock_guard<std::mutex> lock(shared->mu);
        ++shared->finished;
        if (status.ok() && shared->answered_by < 0) {
          shared->answered_by = index;
        } else if (!status.ok()) {
          shared->last_failure = std::move(status);
        }
        shared->cv.notify_all();
      });
    };

    launch(std::move(*stub));
    auto next_launch = std::chrono::steady_clock::now() + options.hedge_after;
    std::unique_lock<std::mutex> lock(shared->mu);
    while (shared->answered_by < 0 && shared->finished < static_cast<int>(attempts.size())) {
      const int started = static_cast<int>(attempts.size());
      if (started >= max_attempts || next_launch >= steady_deadline) {
        shared->cv.wait(lock);  // the rest end by the shared deadline
        continue;
      }
      if (started - shared->finished >= std::max(1, options.max_in_flight)) {
        shared->cv.wait(lock);  // until one gives up (or answers)
        continue;
      }
      if (std::chrono::steady_clock::now() < next_launch &&
          shared->cv.wait_until(lock, next_launch) != std::cv_status::timeout) {
        continue;
      }
      if (shared->answered_by >= 0 || shared->finished == started) break;
      lock.unlock();
      launch(new_stub());
      next_launch = std::chrono::steady_clock::now() + options.hedge_after;
      lock.lock();
    }
    HedgeOutcome out;
    out.attempts = static_cast<int>(attempts.size());
    out.answered_by = shared->answered_by;
    out.status = out.answered_by >= 0 ? grpc::Status::OK : shared->last_failure;
    lock.unlock();
    for (auto& a : attempts) a->ctx.TryCancel();  // a finished call ignores it
    lock.lock();
    shared->cv.wait(lock, [&] { return shared->finished == out.attempts; });  // cancelled: at once
    lock.unlock();
    if (out.answered_by >= 0) {
      Attempt& won = *attempts[out.answered_by];
      response->Swap(&won.response);
      *stub = std::move(won.stub);
    } else {
      *stub = new_stub();
    }
    return out;
  }

 private:
  struct Attempt {
    std::unique_ptr<Stub> stub;
    grpc::ClientContext ctx;
    Response response;
  };
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    int finished = 0;
    int answered_by = -1;
    grpc::Status last_failure;
  };
};

}  // namespace eft::worker
