#include "common/http/http_server.h"

#include <charconv>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "common/logging.h"
#include "common/http/http_session.h"

namespace eft::http {

namespace net = boost::asio;
using tcp = net::ip::tcp;

Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  const std::string form = "expected HOST:PORT (e.g. 127.0.0.1:8080, [::1]:8080 or :8080), got '" + address + "'";
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument(form);
  std::string h = address.substr(0, colon);
  std::string p = address.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    return Status::InvalidArgument(form + " (write IPv6 addresses in brackets)");
  }
  int value = -1;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || value < 0 || value > 65535) {
    return Status::InvalidArgument(form + " (port must be 0..65535)");
  }
  *host = h.empty() ? "0.0.0.0" : h;
  *port = value;
  return Status::Ok();
}

// Member order matters: `shared` must outlive `io` (destroying io destroys pending handlers, and
// with them the sessions that point at `shared`).
struct HttpServer::Impl {
  SessionShared shared;
  std::optional<net::ssl::context> tls;  // HTTPS
  net::io_context io;
  tcp::acceptor acceptor{io};
  net::steady_timer retry_timer{io};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  int port = 0;
  bool started = false;
  bool stopped = false;  // an io_context that was stopped is not restarted: Start is once only

  void Accept();
  void Run();
};

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(io), [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      // Typically EMFILE: back off briefly instead of spinning on a failing accept.
      EFT_LOG(WARNING) << "http: accept failed: " << ec.message();
      retry_timer.expires_after(std::chrono::milliseconds(100));
      retry_timer.async_wait([this](boost::system::error_code e) {
        if (!e) Accept();
      });
      return;
    }
    if (shared.connections.load() >= shared.config.max_connections) {
      EFT_LOG(WARNING) << "http: " << shared.config.max_connections << " connections open; refusing another";
      boost::system::error_code ignored;
      socket.close(ignored);
    } else {
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);  // small JSON replies and log chunks: no Nagle delay
      if (tls) {
        std::make_shared<HttpSession<TlsStream>>(TlsStream(std::move(socket), *tls), &shared)->Start();
      } else {
        std::make_shared<HttpSession<tcp::socket>>(std::move(socket), &shared)->Start();
      }
    }
    Accept();
  });
}

void HttpServer::Impl::Run() {
  while (true) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      // A handler that throws must not take a server thread (or the process) with it.
      EFT_LOG(ERROR) << "http: uncaught exception in a handler: " << e.what();
    }
  }
}

HttpServer::HttpServer(HttpServerConfig config, HttpHandler handler) : impl_(std::make_unique<Impl>()) {
  impl_->shared.config = std::move(config);
  impl_->shared.handler = std::move(handler);
}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() {
  if (impl_->started || impl_->stopped) return Status::FailedPrecondition("http server: Start is allowed once");
  const HttpServerConfig& config = impl_->shared.config;
  if (config.threads < 1) return Status::InvalidArgument("http server: threads must be >= 1");
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return Status::InvalidArgument("https: needs both a certificate and a key file");
  }
  if (!config.tls_cert_file.empty()) {
    try {
      net::ssl::context ctx(net::ssl::context::tls_server);
      ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                      net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 | net::ssl::context::no_tlsv1_1 |
                      net::ssl::context::single_dh_use);
      ctx.use_certificate_chain_file(config.tls_cert_file);
      ctx.use_private_key_file(config.tls_key_file, net::ssl::context::pem);
      if (!config.tls_client_ca_file.empty()) {
        ctx.load_verify_file(config.tls_client_ca_file);
        ctx.set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
      }
      impl_->tls.emplace(std::move(ctx));
    } catch (const boost::system::system_error& e) {
      return Status::InvalidArgument("https: cannot load certificate " + config.tls_cert_file + " / key " +
                                     config.tls_key_file +
                                     (config.tls_client_ca_file.empty() ? "" : " / client CA " + config.tls_client_ca_file) +
                                     ": " + e.what());
    }
  }
  std::string host;
  int port = 0;
  EFT_RETURN_IF_ERROR(SplitHostPort(config.address, &host, &port));
  boost::system::error_code ec;
  tcp::resolver resolver(impl_->io);
  auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return Status::InvalidArgument("cannot resolve '" + host + "': " + ec.message());
  }
  tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen for HTTP on " + config.address + ": " + ec.message());
  impl_->port = a.local_endpoint().port();
  impl_->started = true;
  impl_->work.emplace(impl_->io.get_executor());
  impl_->Accept();
  for (int i = 0; i < config.threads; ++i) impl_->threads.emplace_back([impl = impl_.get()] { impl->Run(); });
  return Status::Ok();
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::Stop() {
  if (!impl_ || !impl_->started) return;
  impl_->started = false;
  impl_->stopped = true;
  impl_->work.reset();
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  boost::system::error_code ignored;
  impl_->acceptor.close(ignored);
}

}  // namespace eft::http
