#include "common/http/replies.h"

#include <nlohmann/json.hpp>

namespace eft::http {

HttpReply JsonErrorReply(int http_status, StatusCode code, const std::string& message) {
  // ordered_json keeps grpc-gateway's key order.
  nlohmann::ordered_json body = {
      {"code", static_cast<int>(code)}, {"message", message}, {"details", nlohmann::json::array()}};
  HttpReply r;
  r.status = http_status;
  r.content_type = "application/json";
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

HttpReply TextReply(int http_status, std::string text) {
  HttpReply r;
  r.status = http_status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(text);
  return r;
}

}  // namespace eft::http
