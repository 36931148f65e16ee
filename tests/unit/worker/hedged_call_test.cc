// CallHedged (worker/hedged_call.h) against a real gRPC server on 127.0.0.1 and a black hole: a
// listening socket that is never accepted from, so a client's TCP connection completes but its
// HTTP/2 handshake never does, as with a connection whose packets a partition drops.
#include "worker/hedged_call.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "eft/v1/agent.grpc.pb.h"

namespace eft::worker {
namespace {

using Stub = v1::AgentService::StubInterface;
using Call = HedgedCall<Stub, v1::HeartbeatRequest, v1::HeartbeatResponse>;
using std::chrono::milliseconds;

// Answers every heartbeat, except that the first `failing` calls are refused after `fail_after`.
class CountingAgentService final : public v1::AgentService::Service {
 public:
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req, v1::HeartbeatResponse* resp) override {
    const int n = calls++;
    const int now = ++in_flight;
    for (int seen = most_in_flight; now > seen && !most_in_flight.compare_exchange_weak(seen, now);) {
    }
    if (n < failing) {
      std::this_thread::sleep_for(fail_after);
      --in_flight;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "busy");
    }
    resp->set_acked_event_seq(req->events_size());
    --in_flight;
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
  std::atomic<int> in_flight{0};
  std::atomic<int> most_in_flight{0};
  int failing = 0;
  std::chrono::milliseconds fail_after{0};
};

// A TCP port that takes connections into its backlog and never answers on them.
class BlackHole {
 public:
  BlackHole() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(fd_, 64), 0);
    socklen_t len = sizeof addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~BlackHole() { close(fd_); }
  std::string Address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class HedgedCallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    server_address_ = "127.0.0.1:" + std::to_string(port);
  }
  void TearDown() override { server_->Shutdown(); }

  static std::unique_ptr<Stub> StubTo(const std::string& address) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return v1::AgentService::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  // New stubs go to `address`, counted.
  Call::NewStub NewStubsTo(const std::string& address) {
    return [this, address] {
      ++stubs_made_;
      return StubTo(address);
    };
  }
  static void Start(Stub* stub, grpc::ClientContext* ctx, const v1::HeartbeatRequest* req, v1::HeartbeatResponse* resp,
                    std::function<void(grpc::Status)> done) {
    stub->async()->Heartbeat(ctx, req, resp, std::move(done));
  }
  static v1::HeartbeatRequest Request(int events) {
    v1::HeartbeatRequest req;
    req.set_node_name("node1");
    for (int i = 0; i < events; ++i) req.add_events()->set_seq(i + 1);
    return req;
  }
  static HedgeOptions Options(milliseconds deadline, milliseconds hedge_after, int max_attempts = 4) {
    HedgeOptions o;
    o.deadline = deadline;
    o.hedge_after = hedge_after;
    o.max_attempts = max_attempts;
    return o;
  }
  static double Since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }

  CountingAgentService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string server_address_;
  std::atomic<int> stubs_made_{0};
};

TEST_F(HedgedCallTest, AnAnsweredCallUsesOneConnectionAndKeepsItsStub) {
  auto stub = StubTo(server_address_);
  Stub* first = stub.get();
  v1::HeartbeatResponse resp;
  const HedgeOutcome out =
      Call::Call(&stub, NewStubsTo(server_address_), nullptr, Start, Request(3), &resp, Options(milliseconds(5000), milliseconds(250)));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.attempts, 1);
  EXPECT_EQ(out.answered_by, 0);
  EXPECT_EQ(resp.acked_event_seq(), 3);  // the reply is the server's, to this request
  EXPECT_EQ(stub.get(), first);          // the next call reuses the connection that works
  EXPECT_EQ(stubs_made_, 0);
  EXPECT_EQ(service_.calls, 1);
}

TEST_F(HedgedCallTest, AHangingConnectionIsOvertakenByAnAttemptOnANewOneWithinTheHedgeDelay) {
  BlackHole hole;
  auto stub = StubTo(hole.Address());
  v1::HeartbeatResponse resp;
  const auto started = std::chrono::steady_clock::now();
  const HedgeOutcome out = Call::Call(&stub, NewStubsTo(server_address_), nullptr, Start, Request(2), &resp,
                                      Options(milliseconds(5000), milliseconds(200)));
  const double took = Since(started);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.answered_by, 1);
  EXPECT_EQ(out.attempts, 2);
  EXPECT_EQ(resp.acked_event_seq(), 2);
  EXPECT_GE(took, 0.19);
  // The hedge delay plus a connection on 127.0.0.1, far from the 5 s deadline the hanging attempt
  // alone would have waited out (generous for a loaded machine).
  EXPECT_LT(took, 2.0);
  EXPECT_EQ(service_.calls, 1);
  // The stub kept is the one that answered: another call goes straight through.
  const HedgeOutcome again = Call::Call(&stub, NewStubsTo(server_address_), nullptr, Start, Request(1), &resp,
                                        Options(milliseconds(5000), milliseconds(200)));
  EXPECT_TRUE(again.status.ok());
  EXPECT_EQ(again.attempts, 1);
}

TEST_F(HedgedCallTest, WithoutAnAnswerAttemptsAreStaggeredUpToTheLimitAndEndAtTheSharedDeadline) {
  BlackHole hole;
  auto stub = StubTo(hole.Address());
  Stub* first = stub.get();
  v1::HeartbeatResponse resp;
  const auto started = std::chrono::steady_clock::now();
  const HedgeOutcome out = Call::Call(&stub, NewStubsTo(hole.Address()), nullptr, Start, Request(0), &resp,
                                      Options(milliseconds(1000), milliseconds(150), 3));
  const double took = Since(started);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << out.status.error_message();
  EXPECT_EQ(out.attempts, 3);  // at 0, 0.15 and 0.3 s; the limit stops a fourth
  EXPECT_EQ(out.answered_by, -1);
  EXPECT_GE(took, 0.95);
  EXPECT_LT(took, 3.0);  // one deadline for all, not one each
  // Three for the attempts after the first, one to replace the stub of a call nobody answered.
  EXPECT_EQ(stubs_made_, 3);
  EXPECT_NE(stub.get(), first);
}

TEST_F(HedgedCallTest, AttemptsStopWhereTheNextWouldStartAfterTheDeadline) {
  BlackHole hole;
  auto stub = StubTo(hole.Address());
  v1::HeartbeatResponse resp;
  const HedgeOutcome out = Call::Call(&stub, NewStubsTo(hole.Address()), nullptr, Start, Request(0), &resp,
                                      Options(milliseconds(500), milliseconds(200), 10));
  EXPECT_FALSE(out.status.ok());
  EXPECT_EQ(out.attempts, 3);  // at 0, 0.2 and 0.4 s; 0.6 s is past the deadline
}

TEST_F(HedgedCallTest, AtMostMaxInFlightArePendingAndOneThatGivesUpIsReplaced) {
  service_.failing = 3;  // the first three calls fail after 300 ms, the fourth is answered
  service_.fail_after = milliseconds(300);
  auto stub = StubTo(server_address_);
  v1::HeartbeatResponse resp;
  HedgeOptions options = Options(milliseconds(5000), milliseconds(20), 100);
  options.max_in_flight = 2;
  const auto started = std::chrono::steady_clock::now();
  const HedgeOutcome out =
      Call::Call(&stub, NewStubsTo(server_address_), nullptr, Start, Request(1), &resp, options);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.attempts, 4);
  EXPECT_EQ(out.answered_by, 3);
  EXPECT_EQ(service_.most_in_flight, 2);
  EXPECT_GE(Since(started), 0.29) << "the third started only once the first gave up";
}

TEST_F(HedgedCallTest, ARefusedConnectionFailsAtOnceWithoutFurtherAttempts) {
  // Bound and closed: nothing listens on the port, so connecting is refused.
  std::string refused;
  {
    BlackHole closed_soon;
    refused = closed_soon.Address();
  }
  auto stub = StubTo(refused);
  v1::HeartbeatResponse resp;
  const auto started = std::chrono::steady_clock::now();
  const HedgeOutcome out = Call::Call(&stub, NewStubsTo(server_address_), nullptr, Start, Request(0), &resp,
                                      Options(milliseconds(5000), milliseconds(1000)));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNAVAILABLE) << out.status.error_message();
  EXPECT_EQ(out.attempts, 1);  // the caller paces retries of a refusal, not the hedge
  EXPECT_LT(Since(started), 0.9);
  EXPECT_EQ(service_.calls, 0);
}

TEST_F(HedgedCallTest, NoHedgeDelayMeansOneAttemptThatWaitsOutItsDeadline) {
  BlackHole hole;
  auto stub = StubTo(hole.Address());
  v1::HeartbeatResponse resp;
  const HedgeOutcome out = Call::Call(&stub, NewStubsTo(server_address_), nullptr, Start, Request(0), &resp,
                                      Options(milliseconds(400), milliseconds(0)));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(out.attempts, 1);
  EXPECT_EQ(service_.calls, 0);
  EXPECT_EQ(stubs_made_, 1);  // only the replacement of the stub that got no answer
}

TEST_F(HedgedCallTest, PrepareRunsForEveryAttempt) {
  BlackHole hole;
  auto stub = StubTo(hole.Address());
  std::atomic<int> prepared{0};
  v1::HeartbeatResponse resp;
  const HedgeOutcome out = Call::Call(
      &stub, NewStubsTo(server_address_), [&](grpc::ClientContext* ctx) { ++prepared; ctx->AddMetadata("k", "v"); },
      Start, Request(0), &resp, Options(milliseconds(5000), milliseconds(100)));
  EXPECT_TRUE(out.status.ok());
  EXPECT_EQ(prepared, out.attempts);
}

TEST_F(HedgedCallTest, LosingAttemptsAreCancelledAndEndBeforeTheCallReturns) {
  // Attempt 3 answers while three wait on the black hole: they are cancelled, and the call returns
  // at once, not at their deadline; their stubs are gone with the call (gRPC 1.51 aborts when a
  // channel's last reference goes on its callback thread: repeated to catch that).
  for (int i = 0; i < 10; ++i) {
    BlackHole hole;
    auto stub = StubTo(hole.Address());
    v1::HeartbeatResponse resp;
    int made = 0;
    const auto started = std::chrono::steady_clock::now();
    const HedgeOutcome out = Call::Call(
        &stub, [&]() { return ++made < 3 ? StubTo(hole.Address()) : StubTo(server_address_); }, nullptr, Start,
        Request(1), &resp, Options(milliseconds(5000), milliseconds(50)));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_EQ(out.answered_by, 3);
    EXPECT_EQ(resp.acked_event_seq(), 1);
    EXPECT_LT(Since(started), 2.0);
  }
  EXPECT_EQ(service_.calls, 10);
}

}  // namespace
}  // namespace eft::worker
