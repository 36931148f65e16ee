#include "controller/http/rest_codec.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "common/yaml_json.h"
#include "common/http/url.h"
#include "spec/job_spec.h"

namespace eft::controller::http {

namespace {

using json = nlohmann::json;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// "application/yaml; charset=utf-8" -> "application/yaml"
std::string MediaType(const std::string& content_type) {
  std::string t = content_type.substr(0, content_type.find(';'));
  size_t b = t.find_first_not_of(" \t");
  size_t e = t.find_last_not_of(" \t");
  return b == std::string::npos ? "" : Lower(t.substr(b, e - b + 1));
}

bool IsYaml(const std::string& content_type) {
  std::string m = MediaType(content_type);
  return m == "application/yaml" || m == "application/x-yaml" || m == "text/yaml" || m == "text/x-yaml";
}

const char* TypeName(const json& v) {
  if (v.is_array()) return "a list";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_null()) return "null";
  return "an object";
}

// Strict decimal integer: no sign games, spaces or trailing text ("12abc" is an error).
Result<int64_t> ParseInt(const std::string& name, const std::string& text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Status::InvalidArgument(name + ": expected an integer, got '" + text + "'");
  }
  if (v < lo || v > hi) {
    return Status::InvalidArgument(name + ": " + text + " is out of range [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "]");
  }
  return v;
}

Result<bool> ParseBool(const std::string& name, const std::string& text) {
  std::string t = Lower(text);
  if (t.empty() || t == "true" || t == "1") return true;  // a bare "?follow" means yes
  if (t == "false" || t == "0") return false;
  return Status::InvalidArgument(name + ": expected true or false, got '" + text + "'");
}

// Rejects a second value for a parameter that takes one.
Status Once(std::vector<std::string>* seen, const std::string& name) {
  if (std::find(seen->begin(), seen->end(), name) != seen->end()) {
    return Status::InvalidArgument(name + ": given more than once");
  }
  seen->push_back(name);
  return Status::Ok();
}

}  // namespace

int HttpStatusFromCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kCancelled: return 499;
    case StatusCode::kUnknown: return 500;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kDeadlineExceeded: return 504;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists: return 409;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kFailedPrecondition: return 400;
    case StatusCode::kAborted: return 409;
    case StatusCode::kOutOfRange: return 400;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kInternal: return 500;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDataLoss: return 500;
    case StatusCode::kUnauthenticated: return 401;
  }
  return 500;
}

HttpReply ErrorReply(const Status& status) {
  return ErrorReply(HttpStatusFromCode(status.code()), status.code(), status.message());
}

HttpReply ErrorReply(int http_status, StatusCode code, const std::string& message) {
  return eft::http::JsonErrorReply(http_status, code, message);
}

HttpReply MessageReply(const google::protobuf::Message& message) {
  std::string out;
  auto s = google::protobuf::util::MessageToJsonString(message, &out, google::protobuf::util::JsonPrintOptions());
  if (!s.ok()) return ErrorReply(Status::Internal("encoding the reply as JSON: " + std::string(s.message())));
  HttpReply r;
  r.body = std::move(out);
  return r;
}

Result<v1::SubmitJobRequest> ParseSubmitJobBody(const std::string& content_type, const std::string& body) {
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) {
    return Status::InvalidArgument(
        "request body: empty; send a SubmitJobRequest {\"spec\": {...}, \"requestId\": \"...\"} or a job spec as "
        "JSON, or a job spec as YAML with Content-Type: application/yaml");
  }
  json doc;
  if (IsYaml(content_type)) {
    // YAML is UTF-8 by definition, and invalid bytes would otherwise reach JSON encoding later.
    if (!eft::http::IsValidUtf8(body)) return Status::InvalidArgument("request body: YAML is not valid UTF-8");
    auto parsed = YamlToJson(body);
    if (!parsed.ok()) return Status::InvalidArgument("request body: " + parsed.status().message());
    doc = std::move(parsed).value();
  } else {
    try {
      doc = json::parse(body);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999999
      std::string what = e.what();
      // Drop nlohmann's "[json.exception.parse_error.101] " tag: users want the position and cause.
      if (size_t tag = what.find("] "); tag != std::string::npos) what = what.substr(tag + 2);
      return Status::InvalidArgument("request body: invalid JSON: " + what);
    }
  }
  if (!doc.is_object()) {
    return Status::InvalidArgument(std::string("request body: expected an object (a SubmitJobRequest or a job spec), got ") +
                                   TypeName(doc));
  }
  v1::SubmitJobRequest req;
  const json* spec = &doc;
  // A JobSpec has no "spec" field, so its presence tells the two accepted shapes apart.
  if (doc.contains("spec")) {
    for (const auto& [key, value] : doc.items()) {
      if (key == "spec") continue;
      if (key == "requestId" || key == "request_id") {
        if (value.is_null()) continue;
        if (!value.is_string()) {
          return Status::InvalidArgument(std::string("requestId: expected a string, got ") + TypeName(value));
        }
        req.set_request_id(value.get<std::string>());
        continue;
      }
      return Status::InvalidArgument("request body: unknown field '" + key +
                                     "' in SubmitJobRequest (known: spec, requestId)");
    }
    spec = &doc["spec"];
    if (!spec->is_object() && !spec->is_null()) {
      return Status::InvalidArgument(std::string("spec: expected an object, got ") + TypeName(*spec));
    }
  }
  EFT_ASSIGN_OR_RETURN(*req.mutable_spec(), eft::spec::JobSpecFromJson(*spec));
  return req;
}

Result<v1::JobState> ParseJobState(const std::string& text) {
  std::string upper = text;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  bool ok = false;
  if (!upper.empty() && std::all_of(upper.begin(), upper.end(), [](unsigned char c) { return std::isdigit(c); })) {
    int n = 0;
    auto [end, ec] = std::from_chars(upper.data(), upper.data() + upper.size(), n);
    ok = ec == std::errc() && end == upper.data() + upper.size() && v1::JobState_IsValid(n);
    state = ok ? static_cast<v1::JobState>(n) : state;
  } else {
    if (upper.rfind("JOB_STATE_", 0) != 0) upper = "JOB_STATE_" + upper;
    ok = v1::JobState_Parse(upper, &state);
  }
  if (!ok || state == v1::JOB_STATE_UNSPECIFIED) {
    return Status::InvalidArgument("state: unknown job state '" + text +
                                   "'; use QUEUED, STARTING, RUNNING, RECOVERING, SUCCEEDED, FAILED or CANCELLED");
  }
  return state;
}

Result<v1::ListJobsRequest> ParseListJobsQuery(const QueryParams& query) {
  v1::ListJobsRequest req;
  std::vector<std::string> seen;
  for (const auto& [key, value] : query) {
    if (key == "state" || key == "states") {
      size_t pos = 0;
      while (true) {  // "state=RUNNING,QUEUED" as well as repeated parameters
        size_t comma = value.find(',', pos);
        std::string one = value.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        EFT_ASSIGN_OR_RETURN(v1::JobState s, ParseJobState(one));
        req.add_states(s);
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    } else if (key == "pageSize" || key == "page_size") {
      EFT_RETURN_IF_ERROR(Once(&seen, "pageSize"));
      // The controller checks the range, so REST and gRPC report it in the same words.
      EFT_ASSIGN_OR_RETURN(int64_t n, ParseInt("pageSize", value, INT32_MIN, INT32_MAX));
      req.set_page_size(static_cast<int32_t>(n));
    } else if (key == "pageToken" || key == "page_token") {
      EFT_RETURN_IF_ERROR(Once(&seen, "pageToken"));
      req.set_page_token(value);
    } else {
      return Status::InvalidArgument("unknown query parameter '" + key + "' (known: state, pageSize, pageToken)");
    }
  }
  return req;
}

Result<v1::GetLogsRequest> ParseLogsQuery(const std::string& job_id, const QueryParams& query) {
  v1::GetLogsRequest req;
  req.set_job_id(job_id);
  std::vector<std::string> seen;
  for (const auto& [key, value] : query) {
    EFT_RETURN_IF_ERROR(Once(&seen, key));
    if (key == "follow") {
      EFT_ASSIGN_OR_RETURN(bool follow, ParseBool("follow", value));
      req.set_follow(follow);
    } else if (key == "rank") {
      EFT_ASSIGN_OR_RETURN(int64_t rank, ParseInt("rank", value, 0, INT32_MAX));
      req.set_rank(static_cast<int32_t>(rank));
    } else if (key == "attempt") {
      EFT_ASSIGN_OR_RETURN(int64_t attempt, ParseInt("attempt", value, 0, INT32_MAX));
      req.set_attempt(static_cast<int32_t>(attempt));
    } else {
      return Status::InvalidArgument("unknown query parameter '" + key + "' (known: follow, rank, attempt)");
    }
  }
  return req;
}

Result<v1::DrainNodeRequest> ParseDrainQuery(const std::string& name, const QueryParams& query) {
  v1::DrainNodeRequest req;
  req.set_name(name);
  std::vector<std::string> seen;
  for (const auto& [key, value] : query) {
    EFT_RETURN_IF_ERROR(Once(&seen, key));
    if (key != "evict") return Status::InvalidArgument("unknown query parameter '" + key + "' (known: evict)");
    EFT_ASSIGN_OR_RETURN(bool evict, ParseBool("evict", value));
    req.set_evict(evict);
  }
  return req;
}

Status CheckQueryParams(const QueryParams& query, const std::vector<std::string>& allowed) {
  for (const auto& [key, value] : query) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return Status::InvalidArgument("unknown query parameter '" + key + "'");
    }
  }
  return Status::Ok();
}

}  // namespace eft::controller::http
