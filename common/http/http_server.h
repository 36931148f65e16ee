// HttpServer: HTTP/1.1 on Boost.Beast/Asio: eft-controller's REST API and eft-worker's /metrics.
//
// Threading: one io_context run by a small fixed pool (`threads`, default 2); every connection is
// an HttpSession on its own strand, so thousands of idle or streaming connections cost memory, not
// threads. Handlers run on those threads and must return promptly (the controller's only take its
// mutex briefly); long responses (log following) are BodyStreams that the session pulls from timers
// instead of blocking a thread in a loop.
//
// Hostile clients are bounded by the limits below: a request must arrive completely within
// read_timeout (slowloris), a client that stops reading is dropped after write_timeout, headers and
// bodies have size caps (431 / 413), and connections past max_connections are closed at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/http/http_types.h"

namespace eft::http {

// One served request, for metrics and access logs.
struct HttpRequestRecord {
  std::string method;
  std::string route;  // the matched route pattern, "" when none (see HttpReply::route)
  int status = 0;
  std::chrono::duration<double> duration{0};  // from the complete header to the last byte written
};

struct HttpServerConfig {
  std::string address = "127.0.0.1:8080";  // HOST:PORT; port 0 picks a free port (see port())
  int threads = 2;
  size_t max_body_bytes = 1 << 20;     // larger bodies get 413
  size_t max_header_bytes = 16 << 10;  // request line plus headers; larger get 431
  // The whole request (headers and body) must arrive within this, measured from when the server
  // starts waiting for it; it is also how long an idle keep-alive connection is kept.
  std::chrono::milliseconds read_timeout{15000};
  // A response write (or one streamed chunk) that the client does not take within this is dropped.
  std::chrono::milliseconds write_timeout{30000};
  size_t max_connections = 1024;
  std::string server_name = "eft";  // the Server header
  // Called after every response, on a server thread; must not block. Unset: nothing is recorded.
  std::function<void(const HttpRequestRecord&)> on_request;
  // HTTPS when both are set (PEM files: the certificate chain and its private key). With
  // tls_client_ca, clients must also present a certificate signed by it. Plain HTTP is then refused
  // (the TLS handshake fails and the connection is closed).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
};

class HttpServer {
 public:
  HttpServer(HttpServerConfig config, HttpHandler handler);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens and starts the threads. Once per server. Errors name the address; callers add
  // the flag it came from (WithContext("--http")).
  Status Start();
  // The bound port (useful with port 0); 0 before Start.
  int port() const;
  // Stops accepting, drops every connection (open streams end without their last chunk) and joins
  // the threads. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Splits "HOST:PORT" ("[::1]:80", ":8080" = every interface). INVALID_ARGUMENT explains the form.
Status SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace eft::http
