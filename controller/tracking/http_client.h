// HttpClient: blocking HTTP/1.1 calls to one server (http:// or https://), each with a deadline,
// for the controller's MLflow tracker (controller/tracking/mlflow_client.h).
//
// Contract:
// - One call at a time per client (not thread-safe; the tracker's thread owns its clients). Each
//   call opens its own connection on a private io_context and closes it: no state is carried from
//   one call to the next, so a server that restarted or moved is simply reached again.
// - Every call ends within `timeout` (resolving, connecting, the TLS handshake, writing, reading);
//   connecting alone gives up after `connect_timeout`. A call that did not get a whole reply in time
//   is DEADLINE_EXCEEDED; one that could not reach the server (name, connection refused or reset,
//   TLS failure) UNAVAILABLE, naming the server and the cause. A reply of any status is a reply.
// - https:// verifies the server's certificate and name against the system's CA store, or
//   `ca_file` when set (insecure_tls: no verification). Boost.Asio's SSL on OpenSSL, which the
//   controller links for its own HTTPS, so https:// is always available.
// - Replies are read up to 16 MiB.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace eft::controller {

struct HttpClientOptions {
  std::chrono::milliseconds timeout{10000};
  std::chrono::milliseconds connect_timeout{3000};
  std::string ca_file;
  bool insecure_tls = false;
  // Sent with every request (Authorization, ...).
  std::vector<std::pair<std::string, std::string>> headers;
};

struct HttpResult {
  int status = 0;
  std::string body;
};

// A server URL split: scheme, host, port and path prefix ("http://mlflow:5000/prefix/" ->
// {false, "mlflow", "5000", "/prefix"}). INVALID_ARGUMENT explains what is wrong with one.
struct ServerUrl {
  bool tls = false;
  std::string host;  // without brackets for IPv6
  std::string port;
  std::string path;  // "" or "/a/b", no trailing '/'
};
Result<ServerUrl> ParseServerUrl(const std::string& url);

class HttpClient {
 public:
  // INVALID_ARGUMENT for a URL ParseServerUrl refuses, or a CA file that cannot be loaded.
  static Result<std::unique_ptr<HttpClient>> Create(const std::string& url, HttpClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // `method` GET or POST; `target` is appended to the URL's path ("/api/2.0/mlflow/runs/get?run_id=x").
  Result<HttpResult> Call(const std::string& method, const std::string& target, const std::string& json_body);

  const std::string& url() const { return url_; }

 private:
  struct Impl;
  HttpClient(std::string url, std::unique_ptr<Impl> impl);
  std::string url_;
  std::unique_ptr<Impl> impl_;
};

// %XX-escapes everything but unreserved characters, for query values.
std::string UrlEncode(const std::string& text);

}  // namespace eft::controller
