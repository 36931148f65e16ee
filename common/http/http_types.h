// The HTTP request and reply as handlers see them: plain structs, so routing and the REST handlers
// compile (and are unit-tested) without Boost.Beast; only the connection code knows the wire format.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace eft::http {

struct HttpRequest {
  std::string method;        // as sent: "GET", "POST", ...
  std::string target;        // raw origin-form target, still percent-encoded
  std::string content_type;  // the Content-Type header, "" when absent
  std::string body;
  std::string authorization;  // the Authorization header, "" when absent (last: keeps aggregate order)
};

// A response body produced over time (log following). The connection pulls from it on its own
// strand, so Pull must return promptly: it hands over what is available now and says when to ask
// again, and never waits for data itself.
class BodyStream {
 public:
  struct Piece {
    std::string data;                    // may be empty
    bool end = false;                    // no more data after this piece
    std::chrono::milliseconds retry{0};  // unless end: pull again this long after `data` is sent
  };
  virtual ~BodyStream() = default;
  virtual Piece Pull() = 0;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Allow, ...)
  // Set: the body is streamed (chunked) from here and `body` is ignored.
  std::unique_ptr<BodyStream> stream;
  // The route pattern that served it ("/v1/jobs/{id}"), for metrics labels; "" when none matched,
  // so unmatched paths cannot blow up label cardinality.
  std::string route;
};

using HttpHandler = std::function<HttpReply(const HttpRequest&)>;

}  // namespace eft::http
