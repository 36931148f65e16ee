// HttpSession: one client connection of HttpServer, from accept to close.
//
// All of a session's work runs on its strand (the socket's executor), so it needs no locks. One
// deadline timer guards whatever the session currently waits for (a request, a write) and closes
// the socket when it fires; a generation counter tells a stale expiry from a live one.
//
// Life of a request: read the header (size-capped), refuse an oversized Content-Length before
// reading the body, answer "Expect: 100-continue", read the body, call the handler, write the reply,
// then read the next request on a keep-alive connection. A streamed reply (BodyStream) is written as
// chunks; between pulls the session waits on a timer, and a read on the socket notices a client that
// hung up. A connection closes after a stream, and after any malformed request.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "common/status.h"
#include "common/http/http_server.h"

namespace eft::http {

using TlsStream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;

// What every session of one server shares; outlives them all (see HttpServer::Impl).
struct SessionShared {
  HttpServerConfig config;
  HttpHandler handler;
  std::atomic<size_t> connections{0};
};

// Stream: boost::asio::ip::tcp::socket (HTTP) or TlsStream (HTTPS: the TLS handshake comes first,
// under read_timeout, and a closing connection sends close_notify).
template <typename Stream>
class HttpSession : public std::enable_shared_from_this<HttpSession<Stream>> {
 public:
  HttpSession(Stream stream, SessionShared* shared);
  ~HttpSession();
  void Start();

 private:
  using ErrorCode = boost::system::error_code;
  static constexpr bool kTls = !std::is_same_v<Stream, boost::asio::ip::tcp::socket>;
  boost::asio::ip::tcp::socket& tcp() { return boost::beast::get_lowest_layer(conn_); }
  using std::enable_shared_from_this<HttpSession<Stream>>::shared_from_this;

  void ReadHeader();
  void OnHeader(ErrorCode ec);
  void ReadBody();
  void OnRequest(ErrorCode ec);
  void OnReadError(ErrorCode ec);

  void Send(HttpReply reply);
  void SendError(int http_status, StatusCode code, const std::string& message);
  void OnWritten(ErrorCode ec);

  void StartStream(HttpReply reply);
  void WatchForHangup();
  void PullStream();
  void WriteStreamData(std::string data, bool last, std::chrono::milliseconds retry);
  void AfterStreamWrite(bool last, std::chrono::milliseconds retry);

  void Arm(std::chrono::milliseconds timeout);
  void Disarm();
  void Record();
  // Half-closes and discards what the client still sends for a moment, so that a reply to a request
  // whose body was not read is not lost to a TCP reset.
  void LingerAndClose();
  void Close();

  Stream conn_;
  boost::asio::steady_timer deadline_;
  boost::asio::steady_timer stream_timer_;
  SessionShared* shared_;
  uint64_t deadline_generation_ = 0;
  bool closed_ = false;

  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  unsigned version_ = 11;
  bool keep_alive_ = true;

  // The reply in flight: a complete response, or a stream's header and current chunk.
  std::shared_ptr<boost::beast::http::response<boost::beast::http::string_body>> response_;
  std::optional<boost::beast::http::response<boost::beast::http::empty_body>> stream_head_;
  std::optional<boost::beast::http::response_serializer<boost::beast::http::empty_body>> stream_serializer_;
  std::unique_ptr<BodyStream> stream_;
  bool chunked_ = true;
  std::string chunk_;
  std::array<char, 1024> discard_{};

  // For HttpServerConfig::on_request.
  std::optional<HttpRequestRecord> record_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace eft::http
