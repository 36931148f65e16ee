// A deliberately dumb HTTP/1.1 client over raw POSIX sockets for the REST tests: it sends exactly
// the bytes it is given (so tests can send malformed and hostile requests) and parses responses
// strictly enough to check status, headers, Content-Length and chunked bodies. Header-only, shared
// by the unit tests of the HTTP server and the end-to-end REST and metrics tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace eft::testing {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;
  bool chunked = false;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class TestConnection {
 public:
  TestConnection() = default;
  explicit TestConnection(int port) { Connect(port); }
  ~TestConnection() { Close(); }
  TestConnection(const TestConnection&) = delete;
  TestConnection& operator=(const TestConnection&) = delete;

  bool Connect(int port) {
    Close();
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      Close();
      return false;
    }
    return true;
  }
  bool connected() const { return fd_ >= 0; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    buf_.clear();
  }
  // Half-close: the server sees EOF but can still answer.
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

  bool Send(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads a whole response; nullopt on timeout, close before a complete response, or garbage.
  std::optional<HttpResponse> ReadResponse(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto head = ReadHead(deadline);
    if (!head) return std::nullopt;
    HttpResponse r = *head;
    if (r.chunked) {
      while (true) {
        auto chunk = ReadChunk(deadline);
        if (!chunk) return std::nullopt;
        if (chunk->empty()) break;
        r.body += *chunk;
      }
    } else if (!r.header("content-length").empty()) {
      size_t len = std::stoul(r.header("content-length"));
      if (!Fill(len, deadline)) return std::nullopt;
      r.body = buf_.substr(0, len);
      buf_.erase(0, len);
    } else {
      while (Fill(buf_.size() + 1, deadline)) {
      }
      r.body = std::move(buf_);
      buf_.clear();
    }
    return r;
  }

  // The status line and headers only (for streamed responses).
  std::optional<HttpResponse> ReadHead(std::chrono::steady_clock::time_point deadline) {
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(buf_.size() + 1, deadline)) return std::nullopt;
    }
    std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    HttpResponse r;
    if (head.rfind("HTTP/1.", 0) != 0 || head.size() < 12) return std::nullopt;
    r.status = std::atoi(head.c_str() + 9);
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos) {
      size_t next = head.find("\r\n", pos + 2);
      std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        std::string value = line.substr(colon + 1);
        value.erase(0, value.find_first_not_of(' '));
        r.headers[name] = value;
      }
      pos = next;
    }
    r.chunked = r.header("transfer-encoding") == "chunked";
    return r;
  }

  // One chunk of a chunked body; "" for the last chunk; nullopt on timeout or close.
  std::optional<std::string> ReadChunk(std::chrono::steady_clock::time_point deadline) {
    size_t eol;
    while ((eol = buf_.find("\r\n")) == std::string::npos) {
      if (!Fill(buf_.size() + 1, deadline)) return std::nullopt;
    }
    size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
    buf_.erase(0, eol + 2);
    if (!Fill(size + 2, deadline)) return std::nullopt;
    std::string data = buf_.substr(0, size);
    buf_.erase(0, size + 2);
    return data;
  }

  // True when the server closed the connection (EOF or reset) within the timeout.
  bool WaitClosed(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now()).count());
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) continue;
      char tmp[4096];
      ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) return true;
    }
  }

 private:
  // Reads until buf_ holds at least `want` bytes; false on timeout, EOF or error.
  bool Fill(size_t want, std::chrono::steady_clock::time_point deadline) {
    while (buf_.size() < want) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now()).count());
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) continue;
      char tmp[16384];
      ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) return false;
      buf_.append(tmp, static_cast<size_t>(n));
    }
    return true;
  }

  int fd_ = -1;
  std::string buf_;
};

// One request on a fresh connection: "METHOD target" plus headers and body; Content-Length is added
// when there is a body.
inline std::optional<HttpResponse> HttpCall(int port, const std::string& method, const std::string& target,
                                            const std::string& body = "",
                                            const std::string& extra_headers = "",
                                            std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  TestConnection c(port);
  if (!c.connected()) return std::nullopt;
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers;
  if (!body.empty() || method == "POST") req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  if (!c.Send(req)) return std::nullopt;
  return c.ReadResponse(timeout);
}

}  // namespace eft::testing
