#include "controller/tracking/http_client.h"

#include <openssl/ssl.h>

#include <cctype>
#include <cstdio>
#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace eft::controller {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using ErrorCode = boost::system::error_code;

constexpr size_t kMaxReplyBytes = 16u << 20;

// What one exchange ended with.
struct Exchange {
  ErrorCode ec;
  const char* stage = "connecting";  // where it failed
  bool timed_out = false;
  bhttp::response<bhttp::string_body> reply;
};

template <typename Stream>
net::awaitable<void> Run(Stream& stream, tcp::resolver& resolver, const ServerUrl& server,
                         bhttp::request<bhttp::string_body>& request, std::chrono::steady_clock::time_point connect_by,
                         std::chrono::steady_clock::time_point deadline, Exchange* out) {
  constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  ErrorCode& ec = out->ec;
  auto use = net::redirect_error(net::use_awaitable, ec);
  out->stage = "resolving";
  auto endpoints = co_await resolver.async_resolve(server.host, server.port, use);
  if (ec) co_return;
  out->stage = "connecting";
  beast::tcp_stream& tcp_layer = beast::get_lowest_layer(stream);
  tcp_layer.expires_at(std::min(connect_by, deadline));
  co_await tcp_layer.async_connect(endpoints, use);
  if (ec) co_return;
  tcp_layer.expires_at(deadline);
  if constexpr (kTls) {
    out->stage = "TLS handshake";
    co_await stream.async_handshake(net::ssl::stream_base::client, use);
    if (ec) co_return;
  }
  out->stage = "sending the request";
  co_await bhttp::async_write(stream, request, use);
  if (ec) co_return;
  out->stage = "reading the reply";
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(kMaxReplyBytes);
  co_await bhttp::async_read(stream, buffer, parser, use);
  if (ec) co_return;
  out->reply = parser.release();
  out->stage = "";
  ErrorCode ignored;
  tcp_layer.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

std::string HostHeader(const ServerUrl& s) {
  const bool v6 = s.host.find(':') != std::string::npos;
  const std::string host = v6 ? "[" + s.host + "]" : s.host;
  const bool default_port = (s.tls && s.port == "443") || (!s.tls && s.port == "80");
  return default_port ? host : host + ":" + s.port;
}

}  // namespace

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

Result<ServerUrl> ParseServerUrl(const std::string& url) {
  ServerUrl s;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    s.tls = true;
    rest = url.substr(8);
  } else {
    return Status::InvalidArgument("'" + url + "' is not an http:// or https:// URL");
  }
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  s.path = slash == std::string::npos ? "" : rest.substr(slash);
  if (s.path.find_first_of("?#") != std::string::npos) {
    return Status::InvalidArgument("'" + url + "': a tracking server URL has no query or fragment");
  }
  while (!s.path.empty() && s.path.back() == '/') s.path.pop_back();
  if (authority.find('@') != std::string::npos) {
    return Status::InvalidArgument("'" + url + "': credentials do not go into the URL; set MLFLOW_TRACKING_TOKEN, "
                                   "or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, for the controller");
  }
  std::string port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return Status::InvalidArgument("'" + url + "': unterminated [IPv6 address]");
    s.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return Status::InvalidArgument("'" + url + "': expected :PORT after ]");
      port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.rfind(':');
    s.host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
  }
  if (s.host.empty()) return Status::InvalidArgument("'" + url + "' names no host");
  if (port.empty()) port = s.tls ? "443" : "80";
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) == 0 ||
      std::stoi(port) > 65535) {
    return Status::InvalidArgument("'" + url + "': port '" + port + "' is not a port number");
  }
  s.port = port;
  return s;
}

struct HttpClient::Impl {
  ServerUrl server;
  HttpClientOptions options;
  std::optional<net::ssl::context> tls;
};

HttpClient::HttpClient(std::string url, std::unique_ptr<Impl> impl) : url_(std::move(url)), impl_(std::move(impl)) {}
HttpClient::~HttpClient() = default;

Result<std::unique_ptr<HttpClient>> HttpClient::Create(const std::string& url, HttpClientOptions options) {
  EFT_ASSIGN_OR_RETURN(ServerUrl server, ParseServerUrl(url));
  auto impl = std::make_unique<Impl>();
  impl->server = server;
  impl->options = std::move(options);
  if (server.tls) {
    impl->tls.emplace(net::ssl::context::tls_client);
    net::ssl::context& ctx = *impl->tls;
    ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                    net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 | net::ssl::context::no_tlsv1_1);
    ErrorCode ec;
    if (impl->options.ca_file.empty()) {
      ctx.set_default_verify_paths(ec);
    } else {
      ctx.load_verify_file(impl->options.ca_file, ec);
    }
    if (ec) {
      return Status::InvalidArgument("cannot load the CA certificates for " + url + " (" +
                                     (impl->options.ca_file.empty() ? "the system's" : impl->options.ca_file) +
                                     "): " + ec.message());
    }
    ctx.set_verify_mode(impl->options.insecure_tls ? net::ssl::verify_none : net::ssl::verify_peer);
  }
  return std::unique_ptr<HttpClient>(new HttpClient(url, std::move(impl)));
}

Result<HttpResult> HttpClient::Call(const std::string& method, const std::string& target, const std::string& json_body) {
  const ServerUrl& server = impl_->server;
  const HttpClientOptions& o = impl_->options;
  bhttp::request<bhttp::string_body> request{method == "GET" ? bhttp::verb::get : bhttp::verb::post,
                                             server.path + target, 11};
  request.set(bhttp::field::host, HostHeader(server));
  request.set(bhttp::field::user_agent, "eft-controller");
  request.set(bhttp::field::accept, "application/json");
  for (const auto& [name, value] : o.headers) request.set(name, value);
  if (method != "GET") {
    request.set(bhttp::field::content_type, "application/json");
    request.body() = json_body;
  }
  request.keep_alive(false);
  request.prepare_payload();

  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + o.timeout;
  const auto connect_by = start + o.connect_timeout;
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  Exchange out;
  net::steady_timer timer(ioc, deadline);
  auto finish = [&](std::exception_ptr error) {
    if (error && !out.ec) out.ec = net::error::fault;
    timer.cancel();
  };
  std::function<void()> close;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  if (server.tls) {
    secure.emplace(ioc, *impl_->tls);
    if (!SSL_set_tlsext_host_name(secure->native_handle(), server.host.c_str())) {
      return Status::Unavailable(url_ + ": cannot set the TLS server name");
    }
    if (!o.insecure_tls) secure->set_verify_callback(net::ssl::host_name_verification(server.host));
    close = [&] { beast::get_lowest_layer(*secure).cancel(); };
    net::co_spawn(ioc, Run(*secure, resolver, server, request, connect_by, deadline, &out), finish);
  } else {
    plain.emplace(ioc);
    close = [&] { plain->cancel(); };
    net::co_spawn(ioc, Run(*plain, resolver, server, request, connect_by, deadline, &out), finish);
  }
  timer.async_wait([&](ErrorCode ec) {
    if (ec) return;  // cancelled: the exchange ended first
    out.timed_out = true;
    resolver.cancel();
    close();
  });
  ioc.run();

  const std::string where = method + " " + url_ + target.substr(0, target.find('?'));
  if (out.timed_out || out.ec == beast::error::timeout) {
    return Status(StatusCode::kDeadlineExceeded,
                  where + ": no reply within " +
                      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         out.stage == std::string("connecting") ? std::min(o.connect_timeout, o.timeout)
                                                                                : o.timeout)
                                         .count()) +
                      " ms (" + out.stage + ")");
  }
  if (out.ec) return Status::Unavailable(where + ": " + out.stage + ": " + out.ec.message());
  return HttpResult{static_cast<int>(out.reply.result_int()), std::move(out.reply.body())};
}

}  // namespace eft::controller
