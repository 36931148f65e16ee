// HttpServer over real sockets on 127.0.0.1 with a scripted handler: keep-alive and pipelining,
// size limits, malformed requests, read timeouts (slowloris), 100-continue, chunked streams that
// arrive piece by piece without blocking other clients, hang-up detection and the connection cap.
#include "common/http/http_server.h"

#include <atomic>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/http/replies.h"
#include "tests/unit/common/http/http_test_client.h"

namespace eft::http {
namespace {

using namespace std::chrono_literals;
using eft::testing::HttpCall;
using eft::testing::TestConnection;
using json = nlohmann::json;

// Sends "piece i\n" every `gap`, `n` times (n < 0: forever, with nothing to send).
class TickStream final : public BodyStream {
 public:
  TickStream(int n, std::chrono::milliseconds gap, std::atomic<int>* alive) : n_(n), gap_(gap), alive_(alive) {
    alive_->fetch_add(1);
  }
  ~TickStream() override { alive_->fetch_sub(1); }
  Piece Pull() override {
    Piece p;
    if (n_ < 0) {
      p.retry = gap_;
      return p;
    }
    p.data = "piece " + std::to_string(sent_++) + "\n";
    p.end = sent_ == n_;
    p.retry = gap_;
    return p;
  }

 private:
  int n_;
  int sent_ = 0;
  std::chrono::milliseconds gap_;
  std::atomic<int>* alive_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerConfig config;
    config.address = "127.0.0.1:0";
    config.threads = 2;
    config.max_body_bytes = 1024;
    config.max_header_bytes = 1024;
    config.read_timeout = 1000ms;
    config.write_timeout = 2000ms;
    config.max_connections = 50;
    config.server_name = "eft-test";
    config.on_request = [this](const HttpRequestRecord& r) {
      std::lock_guard<std::mutex> lock(mu_);
      records_.push_back(r);
    };
    server_ = std::make_unique<HttpServer>(config, [this](const HttpRequest& r) { return Handle(r); });
    ASSERT_TRUE(server_->Start().ok());
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }
  // The server's threads write records_ (on_request): stop them before the members they write go
  // (declared after server_, they are destroyed first; found by `make sanitize-thread`).
  void TearDown() override { server_.reset(); }

  HttpReply Handle(const HttpRequest& r) {
    HttpReply reply;
    reply.route = r.target.substr(0, r.target.find('?'));
    if (r.target == "/hello") {
      reply.content_type = "text/plain";
      reply.body = "hello";
    } else if (r.target == "/echo") {
      reply.body = json{{"method", r.method}, {"type", r.content_type}, {"body", r.body}}.dump();
    } else if (r.target == "/stream") {
      reply.content_type = "text/plain";
      reply.stream = std::make_unique<TickStream>(3, 200ms, &streams_alive_);
    } else if (r.target == "/burst") {
      reply.stream = std::make_unique<TickStream>(1000, 0ms, &streams_alive_);
    } else if (r.target == "/forever") {
      reply.stream = std::make_unique<TickStream>(-1, 50ms, &streams_alive_);
    } else if (r.target == "/throw") {
      throw std::runtime_error("boom");
    } else {
      reply = JsonErrorReply(404, StatusCode::kNotFound, "no route");
    }
    return reply;
  }

  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::atomic<int> streams_alive_{0};
  std::mutex mu_;
  std::vector<HttpRequestRecord> records_;
};

TEST_F(HttpServerTest, KeepAliveAndPipelining) {
  TestConnection c(port_);
  ASSERT_TRUE(c.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
  EXPECT_EQ(r->header("content-type"), "text/plain");
  EXPECT_EQ(r->header("server"), "eft-test");
  // Same connection, then two pipelined requests in one write.
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n{\"a\"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body), (json{{"method", "POST"}, {"type", "application/json"}, {"body", "{\"a\""}}));
  r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "hello");
  // Chunked request bodies are fine too.
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
  r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["body"], "abcde");
}

TEST_F(HttpServerTest, LimitsAndMalformedRequestsGet4xxAndClose) {
  auto expect_error = [&](const std::string& raw, int status) {
    TestConnection c(port_);
    ASSERT_TRUE(c.Send(raw));
    auto r = c.ReadResponse(5s);
    ASSERT_TRUE(r) << raw.substr(0, 80);
    EXPECT_EQ(r->status, status) << raw.substr(0, 80);
    EXPECT_EQ(r->header("connection"), "close");
    json body = json::parse(r->body);
    EXPECT_TRUE(body.contains("code") && body.contains("message") && body["details"].is_array()) << r->body;
    EXPECT_TRUE(c.WaitClosed(5s));
  };
  expect_error("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n" + std::string(2000, 'x'), 413);
  expect_error("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n", 413);
  expect_error("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + std::string(2048, 'x') +
                   "\r\n0\r\n\r\n",
               413);
  expect_error("GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n", 431);
  expect_error("HELLO\r\n\r\n", 400);
  expect_error("GET /hello HTTP/1.1\r\n\r\n", 400);  // no Host
  expect_error("GET /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 400);
  expect_error("GET /hello HTTP/9.9\r\n\r\n", 400);
  expect_error("GET /hello HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400);
  expect_error("GET /hello HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400);
  expect_error("GET /hello HTTP/1.1\r\nBad Header\r\n\r\n", 400);
  expect_error(std::string("GET /he\0llo HTTP/1.1\r\n\r\n", 24), 400);
  expect_error("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400);
  auto thrown = HttpCall(port_, "GET", "/throw");
  ASSERT_TRUE(thrown);
  EXPECT_EQ(thrown->status, 500);
  // Still serving.
  auto r = HttpCall(port_, "GET", "/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServerTest, ExpectContinueGetsAnInterimResponse) {
  TestConnection c(port_);
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  auto interim = c.ReadHead(std::chrono::steady_clock::now() + 5s);
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(c.Send("hello"));
  auto r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["body"], "hello");
  // An oversized declared body is refused before the client sends it.
  TestConnection big(port_);
  ASSERT_TRUE(big.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n"));
  r = big.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
}

TEST_F(HttpServerTest, SlowAndIdleClientsAreClosedAfterTheReadTimeout) {
  auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<TestConnection>> slow;
  for (int i = 0; i < 10; ++i) {
    slow.push_back(std::make_unique<TestConnection>(port_));
    if (i % 2 == 0) slow.back()->Send("GET /hello HTTP/1.1\r\nHost: x\r\n");  // never finishes the header
  }
  // A slowloris trickle: one byte every 300 ms keeps the socket busy but never completes a request.
  TestConnection trickle(port_);
  std::string req = "GET /hello HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
  bool trickle_closed = false;
  for (char ch : req) {
    if (!trickle.Send(std::string(1, ch))) {
      trickle_closed = true;
      break;
    }
    // Meanwhile, everyone else is served.
    auto r = HttpCall(port_, "GET", "/hello");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    std::this_thread::sleep_for(100ms);
    if (std::chrono::steady_clock::now() - start > 3s) break;
  }
  EXPECT_TRUE(trickle_closed || trickle.WaitClosed(3s)) << "a request must arrive within the read timeout";
  for (auto& c : slow) EXPECT_TRUE(c->WaitClosed(3s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
}

TEST_F(HttpServerTest, StreamsArriveChunkByChunkWithoutBlockingOthers) {
  // More concurrent streams than server threads.
  std::vector<std::unique_ptr<TestConnection>> streams;
  for (int i = 0; i < 20; ++i) {
    streams.push_back(std::make_unique<TestConnection>(port_));
    ASSERT_TRUE(streams.back()->Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  }
  auto deadline = std::chrono::steady_clock::now() + 10s;
  for (auto& s : streams) {
    auto head = s->ReadHead(deadline);
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 200);
    EXPECT_TRUE(head->chunked);
    EXPECT_EQ(head->header("connection"), "close");
  }
  auto t0 = std::chrono::steady_clock::now();
  auto first = streams[0]->ReadChunk(deadline);
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, "piece 0\n");
  // Others are answered while every stream is open.
  auto r = HttpCall(port_, "GET", "/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "hello");
  std::string rest;
  while (true) {
    auto chunk = streams[0]->ReadChunk(deadline);
    ASSERT_TRUE(chunk);
    if (chunk->empty()) break;
    rest += *chunk;
  }
  EXPECT_EQ(rest, "piece 1\npiece 2\n");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms) << "pieces came 200 ms apart, not all at once";
  EXPECT_TRUE(streams[0]->WaitClosed(5s));
  // A stream that has data at once (retry 0) is sent completely as well.
  auto burst = HttpCall(port_, "GET", "/burst");
  ASSERT_TRUE(burst);
  EXPECT_NE(burst->body.find("piece 999\n"), std::string::npos);
}

TEST_F(HttpServerTest, Http10StreamsEndWithTheConnection) {
  TestConnection c(port_);
  ASSERT_TRUE(c.Send("GET /stream HTTP/1.0\r\n\r\n"));
  auto r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->chunked);
  EXPECT_EQ(r->body, "piece 0\npiece 1\npiece 2\n");
}

TEST_F(HttpServerTest, AClientHangingUpEndsItsStream) {
  {
    TestConnection c(port_);
    ASSERT_TRUE(c.Send("GET /forever HTTP/1.1\r\nHost: x\r\n\r\n"));
    ASSERT_TRUE(c.ReadHead(std::chrono::steady_clock::now() + 5s));
    EXPECT_EQ(streams_alive_.load(), 1);
  }
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (streams_alive_.load() != 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(streams_alive_.load(), 0) << "the session noticed the hang-up and dropped its stream";
}

TEST_F(HttpServerTest, ConnectionsBeyondTheCapAreClosed) {
  std::vector<std::unique_ptr<TestConnection>> idle;
  for (int i = 0; i < 50; ++i) idle.push_back(std::make_unique<TestConnection>(port_));
  std::this_thread::sleep_for(200ms);  // let the server accept them all
  TestConnection extra(port_);
  EXPECT_TRUE(extra.WaitClosed(2s));
  idle.clear();
  std::this_thread::sleep_for(200ms);
  auto r = HttpCall(port_, "GET", "/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServerTest, RecordsEveryRequestAndStopsWithOpenStreams) {
  ASSERT_TRUE(HttpCall(port_, "GET", "/hello"));
  ASSERT_TRUE(HttpCall(port_, "GET", "/nope"));
  TestConnection open(port_);
  ASSERT_TRUE(open.Send("GET /forever HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(open.ReadHead(std::chrono::steady_clock::now() + 5s));
  // A request is recorded once its response has been written, which may be just after the client
  // has read it.
  auto until = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < until) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (records_.size() >= 2) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ASSERT_GE(records_.size(), 2u);
    EXPECT_EQ(records_[0].method, "GET");
    EXPECT_EQ(records_[0].route, "/hello");
    EXPECT_EQ(records_[0].status, 200);
    EXPECT_EQ(records_[1].status, 404);
  }
  auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  server_.reset();
  EXPECT_EQ(streams_alive_.load(), 0);
}

TEST(HttpServerAddress, SplitHostPort) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitHostPort("127.0.0.1:8080", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 8080);
  ASSERT_TRUE(SplitHostPort("[::1]:0", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  ASSERT_TRUE(SplitHostPort(":9", &host, &port).ok());
  EXPECT_EQ(host, "0.0.0.0");
  for (const char* bad : {"", "8080", "host:", "host:x", "host:70000", "::1:80", "h:-1"}) {
    EXPECT_FALSE(SplitHostPort(bad, &host, &port).ok()) << bad;
  }
  HttpServerConfig config;
  config.address = "127.0.0.1:0";
  HttpServer a(config, [](const HttpRequest&) { return HttpReply(); });
  ASSERT_TRUE(a.Start().ok());
  config.address = "127.0.0.1:" + std::to_string(a.port());
  HttpServer b(config, [](const HttpRequest&) { return HttpReply(); });
  Status s = b.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot listen for HTTP on 127.0.0.1:"), std::string::npos) << s;
}

}  // namespace
}  // namespace eft::http
