#include "common/http/http_session.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/string.hpp>

#include "common/logging.h"
#include "common/http/replies.h"

namespace eft::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

// How long a closing connection keeps draining what the client still sends (see LingerAndClose).
constexpr std::chrono::milliseconds kLinger{2000};

bool IsHttpParseError(const boost::system::error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category();
}

std::string ChunkFrame(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string frame = size;
  frame.reserve(frame.size() + data.size() + 2);
  frame += data;
  frame += "\r\n";
  return frame;
}

template <typename Message>
void SetCommonFields(Message& m, const HttpReply& reply, const std::string& server_name) {
  m.result(static_cast<unsigned>(reply.status));
  // Beast knows the reason phrase of every registered status, not grpc-gateway's 499.
  if (reply.status == 499) m.reason("Client Closed Request");
  m.set(bhttp::field::server, server_name);
  m.set(bhttp::field::content_type, reply.content_type);
  // Error messages echo client input; browsers must not guess a more dangerous type for it.
  m.set("X-Content-Type-Options", "nosniff");
  for (const auto& [name, value] : reply.headers) m.set(name, value);
}

}  // namespace

template <typename Stream>
HttpSession<Stream>::HttpSession(Stream stream, SessionShared* shared)
    : conn_(std::move(stream)),
      deadline_(conn_.get_executor()),
      stream_timer_(conn_.get_executor()),
      shared_(shared) {
  shared_->connections.fetch_add(1);
}

template <typename Stream>
HttpSession<Stream>::~HttpSession() { shared_->connections.fetch_sub(1); }

template <typename Stream>
void HttpSession<Stream>::Start() {
  net::dispatch(conn_.get_executor(), [self = shared_from_this()] {
    if constexpr (kTls) {
      self->Arm(self->shared_->config.read_timeout);
      self->conn_.async_handshake(net::ssl::stream_base::server, [self](ErrorCode ec) {
        self->Disarm();
        if (ec) {
          EFT_LOG(DEBUG) << "http: TLS handshake failed: " << ec.message();
          return self->Close();
        }
        self->ReadHeader();
      });
    } else {
      self->ReadHeader();
    }
  });
}

// --- reading a request ------------------------------------------------------------------------

template <typename Stream>
void HttpSession<Stream>::ReadHeader() {
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(shared_->config.max_header_bytes));
  parser_->body_limit(shared_->config.max_body_bytes);
  Arm(shared_->config.read_timeout);
  bhttp::async_read_header(conn_, buffer_, *parser_,
                           [self = shared_from_this()](ErrorCode ec, size_t) { self->OnHeader(ec); });
}

template <typename Stream>
void HttpSession<Stream>::OnHeader(ErrorCode ec) {
  if (ec) return OnReadError(ec);
  started_ = std::chrono::steady_clock::now();
  const auto& req = parser_->get();
  version_ = req.version();
  // Refuse a declared oversized body before reading any of it.
  if (auto length = parser_->content_length(); length && *length > shared_->config.max_body_bytes) {
    return SendError(413, StatusCode::kResourceExhausted,
                     "request body of " + std::to_string(*length) + " bytes exceeds the limit of " +
                         std::to_string(shared_->config.max_body_bytes) + " bytes");
  }
  // RFC 9112: a request with a transfer coding we cannot decode, or an HTTP/1.1 request without
  // Host, must be refused; guessing its framing is how request smuggling starts.
  if (req.count(bhttp::field::transfer_encoding) > 0 && !parser_->chunked()) {
    return SendError(400, StatusCode::kInvalidArgument, "Transfer-Encoding: only chunked is supported");
  }
  if (version_ >= 11 && req.count(bhttp::field::host) == 0) {
    return SendError(400, StatusCode::kInvalidArgument, "HTTP/1.1 requests need a Host header");
  }
  if (beast::iequals(req[bhttp::field::expect], "100-continue")) {
    auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, version_);
    return bhttp::async_write(conn_, *cont, [self = shared_from_this(), cont](ErrorCode ec, size_t) {
      if (ec) return self->Close();
      self->ReadBody();
    });
  }
  ReadBody();
}

template <typename Stream>
void HttpSession<Stream>::ReadBody() {
  // Still under the deadline armed in ReadHeader: the whole request must arrive in read_timeout.
  bhttp::async_read(conn_, buffer_, *parser_, [self = shared_from_this()](ErrorCode ec, size_t) { self->OnRequest(ec); });
}

template <typename Stream>
void HttpSession<Stream>::OnRequest(ErrorCode ec) {
  if (ec) return OnReadError(ec);
  Disarm();
  auto& req = parser_->get();
  keep_alive_ = req.keep_alive();
  HttpRequest request;
  request.method = std::string(req.method_string());
  request.target = std::string(req.target());
  request.content_type = std::string(req[bhttp::field::content_type]);
  request.authorization = std::string(req[bhttp::field::authorization]);
  request.body = std::move(req.body());
  HttpReply reply;
  try {
    reply = shared_->handler(request);
  } catch (const std::exception& e) {
    EFT_LOG(ERROR) << "http: handler threw on " << request.method << ": " << e.what();
    reply = JsonErrorReply(500, StatusCode::kInternal, "unexpected error");
  }
  record_ = HttpRequestRecord{request.method, reply.route, reply.status, {}};
  Send(std::move(reply));
}

template <typename Stream>
void HttpSession<Stream>::OnReadError(ErrorCode ec) {
  Disarm();
  if (ec == bhttp::error::body_limit) {
    return SendError(413, StatusCode::kResourceExhausted,
                     "request body exceeds the limit of " + std::to_string(shared_->config.max_body_bytes) + " bytes");
  }
  if (ec == bhttp::error::header_limit) {
    return SendError(431, StatusCode::kResourceExhausted,
                     "request header exceeds the limit of " + std::to_string(shared_->config.max_header_bytes) +
                         " bytes");
  }
  // end_of_stream is a client that closed between requests; partial_message one that hung up midway.
  if (IsHttpParseError(ec) && ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    return SendError(400, StatusCode::kInvalidArgument, "malformed HTTP request: " + ec.message());
  }
  // The client went away or the read deadline closed the socket: nobody to answer.
  Close();
}

// --- complete replies ---------------------------------------------------------------------------

template <typename Stream>
void HttpSession<Stream>::SendError(int http_status, StatusCode code, const std::string& message) {
  // After a malformed or refused request the rest of the byte stream cannot be trusted.
  keep_alive_ = false;
  if (!record_) {
    std::string method = parser_ && parser_->is_header_done() ? std::string(parser_->get().method_string()) : "";
    record_ = HttpRequestRecord{method, "", http_status, {}};
    if (!parser_ || !parser_->is_header_done()) started_ = std::chrono::steady_clock::now();
  }
  Send(JsonErrorReply(http_status, code, message));
}

template <typename Stream>
void HttpSession<Stream>::Send(HttpReply reply) {
  if (reply.stream) return StartStream(std::move(reply));
  if (record_) record_->status = reply.status;
  response_ = std::make_shared<bhttp::response<bhttp::string_body>>();
  response_->version(version_);
  SetCommonFields(*response_, reply, shared_->config.server_name);
  response_->body() = std::move(reply.body);
  response_->keep_alive(keep_alive_);
  response_->prepare_payload();
  Arm(shared_->config.write_timeout);
  bhttp::async_write(conn_, *response_,
                     [self = shared_from_this(), keep = response_](ErrorCode ec, size_t) { self->OnWritten(ec); });
}

template <typename Stream>
void HttpSession<Stream>::OnWritten(ErrorCode ec) {
  Disarm();
  Record();
  response_.reset();
  if (ec) return Close();
  if (!keep_alive_) return LingerAndClose();
  ReadHeader();
}

// --- streamed replies ---------------------------------------------------------------------------

template <typename Stream>
void HttpSession<Stream>::StartStream(HttpReply reply) {
  stream_ = std::move(reply.stream);
  // HTTP/1.0 has no chunked encoding: there the body simply ends with the connection.
  chunked_ = version_ >= 11;
  keep_alive_ = false;
  stream_head_.emplace();
  stream_head_->version(version_);
  SetCommonFields(*stream_head_, reply, shared_->config.server_name);
  stream_head_->keep_alive(false);
  if (chunked_) stream_head_->chunked(true);
  stream_serializer_.emplace(*stream_head_);
  Arm(shared_->config.write_timeout);
  bhttp::async_write_header(conn_, *stream_serializer_, [self = shared_from_this()](ErrorCode ec, size_t) {
    self->Disarm();
    if (ec) return self->Close();
    self->WatchForHangup();
    self->PullStream();
  });
}

template <typename Stream>
void HttpSession<Stream>::WatchForHangup() {
  // The only way to learn that a follower hung up while no data flows: a read that fails. Whatever
  // the client sends meanwhile is discarded (the connection closes after the stream anyway).
  conn_.async_read_some(net::buffer(discard_), [self = shared_from_this()](ErrorCode ec, size_t) {
    if (ec) return self->Close();
    self->WatchForHangup();
  });
}

template <typename Stream>
void HttpSession<Stream>::PullStream() {
  if (closed_) return;
  BodyStream::Piece piece;
  try {
    piece = stream_->Pull();
  } catch (const std::exception& e) {
    EFT_LOG(ERROR) << "http: body stream threw: " << e.what();
    piece.end = true;
  }
  if (!piece.data.empty() || (piece.end && chunked_)) {
    return WriteStreamData(std::move(piece.data), piece.end, piece.retry);
  }
  AfterStreamWrite(piece.end, piece.retry);
}

template <typename Stream>
void HttpSession<Stream>::WriteStreamData(std::string data, bool last, std::chrono::milliseconds retry) {
  chunk_.clear();
  if (chunked_) {
    if (!data.empty()) chunk_ = ChunkFrame(data);
    if (last) chunk_ += "0\r\n\r\n";
  } else {
    chunk_ = std::move(data);
  }
  Arm(shared_->config.write_timeout);
  net::async_write(conn_, net::buffer(chunk_), [self = shared_from_this(), last, retry](ErrorCode ec, size_t) {
    self->Disarm();
    if (ec) return self->Close();
    self->AfterStreamWrite(last, retry);
  });
}

template <typename Stream>
void HttpSession<Stream>::AfterStreamWrite(bool last, std::chrono::milliseconds retry) {
  if (closed_) return;
  if (last) {
    Record();
    stream_.reset();
    return LingerAndClose();
  }
  if (retry.count() == 0) {
    // Posted, not called: other connections on this thread get their turn between pulls.
    return net::post(conn_.get_executor(), [self = shared_from_this()] { self->PullStream(); });
  }
  stream_timer_.expires_after(retry);
  stream_timer_.async_wait([self = shared_from_this()](ErrorCode ec) {
    if (ec) return;
    self->PullStream();
  });
}

// --- deadlines and closing ----------------------------------------------------------------------

template <typename Stream>
void HttpSession<Stream>::Arm(std::chrono::milliseconds timeout) {
  uint64_t generation = ++deadline_generation_;
  deadline_.expires_after(timeout);
  deadline_.async_wait([self = shared_from_this(), generation](ErrorCode ec) {
    if (ec || generation != self->deadline_generation_) return;
    self->Close();
  });
}

template <typename Stream>
void HttpSession<Stream>::Disarm() {
  ++deadline_generation_;
  deadline_.cancel();
}

template <typename Stream>
void HttpSession<Stream>::Record() {
  if (!record_) return;
  record_->duration = std::chrono::steady_clock::now() - started_;
  EFT_LOG(DEBUG) << "http: " << record_->method << " " << (record_->route.empty() ? "-" : record_->route) << " "
                 << record_->status << " " << record_->duration.count() << " s";
  if (shared_->config.on_request) {
    try {
      shared_->config.on_request(*record_);
    } catch (const std::exception& e) {
      EFT_LOG(WARNING) << "http: on_request hook threw: " << e.what();
    }
  }
  record_.reset();
}

template <typename Stream>
void HttpSession<Stream>::LingerAndClose() {
  if (closed_) return;
  if constexpr (kTls) {
    // A stream has a read pending (WatchForHangup), which a TLS shutdown must not overlap: close.
    if (stream_head_) return Close();
    Arm(kLinger);
    conn_.async_shutdown([self = shared_from_this()](ErrorCode) { self->Close(); });
    return;
  }
  ErrorCode ignored;
  tcp().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  Arm(kLinger);
  // A stream already has a read pending (WatchForHangup) that ends in Close() at EOF.
  if (!stream_head_) WatchForHangup();
}

template <typename Stream>
void HttpSession<Stream>::Close() {
  if (closed_) return;
  closed_ = true;
  Record();
  ErrorCode ignored;
  deadline_.cancel();
  stream_timer_.cancel();
  tcp().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  tcp().close(ignored);
}

template class HttpSession<net::ip::tcp::socket>;
template class HttpSession<TlsStream>;

}  // namespace eft::http
