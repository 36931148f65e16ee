// Small replies every eft HTTP service shares: JSON errors and plain text.
//
// Errors use grpc-gateway's body {"code": <gRPC code>, "message": ..., "details": []} with the HTTP
// status given, so the server's own refusals (413, 431, 400) look like the controller's REST errors.
#pragma once

#include <string>

#include "common/http/http_types.h"
#include "common/status.h"

namespace eft::http {

// `http_status` is sent as is; `code` is the closest gRPC code. Invalid UTF-8 in `message` (bytes a
// client smuggled in) is replaced, never thrown on.
HttpReply JsonErrorReply(int http_status, StatusCode code, const std::string& message);

// text/plain; charset=utf-8 (probes, short answers).
HttpReply TextReply(int http_status, std::string text);

}  // namespace eft::http
