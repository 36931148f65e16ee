// Converts between HTTP and eft.v1: request bodies and query strings into request messages,
// messages and Status into JSON replies. Bodies use protobuf's JSON mapping exactly as
// grpc-gateway does (lowerCamelCase names, 64-bit integers as strings, enums by name); errors are
// grpc-gateway's {"code", "message", "details"} with its HTTP status for each gRPC code.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/message.h>

#include "common/status.h"
#include "common/http/http_types.h"
#include "common/http/replies.h"
#include "eft/v1/job.pb.h"
#include "eft/v1/node.pb.h"

namespace eft::controller::http {

// The generic HTTP pieces live in common/http (eft::http); the REST code names them unqualified.
using eft::http::HttpReply;
using eft::http::HttpRequest;
using eft::http::TextReply;

using QueryParams = std::vector<std::pair<std::string, std::string>>;

// grpc-gateway's mapping: INVALID_ARGUMENT 400, NOT_FOUND 404, UNAVAILABLE 503, CANCELLED 499, ...
int HttpStatusFromCode(StatusCode code);

// {"code": <gRPC code>, "message": ..., "details": []} with the mapped HTTP status.
HttpReply ErrorReply(const Status& status);
// The same body for errors that are HTTP's own (404 no route, 405, 413, 415): `http_status` is
// sent as is, `code` is the closest gRPC code.
HttpReply ErrorReply(int http_status, StatusCode code, const std::string& message);

// 200 with the message as JSON.
HttpReply MessageReply(const google::protobuf::Message& message);

// The body of POST /v1/jobs. Accepted: a SubmitJobRequest {"spec": {...}, "requestId": "..."} or a
// bare JobSpec, as JSON, or as YAML when the content type says so. Errors name the field path
// ("spec.training.lr: expected a number"). Content types other than YAML ones are read as JSON,
// because curl's -d labels JSON as a form.
Result<v1::SubmitJobRequest> ParseSubmitJobBody(const std::string& content_type, const std::string& body);

// "RUNNING", "running", "JOB_STATE_RUNNING" or its number.
Result<v1::JobState> ParseJobState(const std::string& text);

// GET /v1/jobs: state (repeatable, or comma-separated; "states" as grpc-gateway names it),
// pageSize / page_size, pageToken / page_token. Unknown parameters are errors.
Result<v1::ListJobsRequest> ParseListJobsQuery(const QueryParams& query);

// GET /v1/jobs/{id}/logs: follow (true|false|1|0), rank, attempt.
Result<v1::GetLogsRequest> ParseLogsQuery(const std::string& job_id, const QueryParams& query);

// POST /v1/nodes/{name}:drain: evict (true|false|1|0; a bare "?evict" means true).
Result<v1::DrainNodeRequest> ParseDrainQuery(const std::string& name, const QueryParams& query);

// Fails with the first parameter not in `allowed` (for routes that take none or few).
Status CheckQueryParams(const QueryParams& query, const std::vector<std::string>& allowed);

}  // namespace eft::controller::http
