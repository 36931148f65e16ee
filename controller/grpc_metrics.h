// GrpcRequestMetrics: what the controller's gRPC server answered, as Prometheus metrics.
//
//   eft_grpc_requests_total{method,code}          counter, code = gRPC status name ("OK", "NOT_FOUND")
//   eft_grpc_request_duration_seconds{method}     histogram, call start -> status sent
//
// Recorded by a server interceptor (grpc::experimental, as gRPC 1.51 has it), so every service is
// covered without touching its handlers. `method` is "eft.v1.JobService/SubmitJob"; a method the
// server does not implement is "unknown", so clients cannot grow the label set. For streaming calls
// (WatchJob, GetLogs) the duration is the stream's whole life.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/support/server_interceptor.h>

#include "common/metrics.h"
#include "common/status.h"

namespace eft::controller {

class GrpcRequestMetrics {
 public:
  // Registers both families on `registry`, which must outlive this object.
  static Result<std::unique_ptr<GrpcRequestMetrics>> Create(MetricsRegistry* registry);

  // For ServerBuilder::experimental().SetInterceptorCreators(); `this` must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

  void Record(const std::string& method, int grpc_code, double seconds);

 private:
  GrpcRequestMetrics(CounterFamily* requests, HistogramFamily* duration) : requests_(requests), duration_(duration) {}
  CounterFamily* requests_;
  HistogramFamily* duration_;
};

// "/eft.v1.JobService/SubmitJob" -> "eft.v1.JobService/SubmitJob"; anything not under eft.v1 -> "unknown".
std::string GrpcMethodLabel(const char* full_method);

}  // namespace eft::controller
