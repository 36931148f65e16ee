#include "controller/grpc_metrics.h"

#include <chrono>
#include <string_view>

#include <grpcpp/support/interceptor.h>

namespace eft::controller {

namespace {

class TimingInterceptor final : public grpc::experimental::Interceptor {
 public:
  TimingInterceptor(GrpcRequestMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      metrics_->Record(method_, static_cast<int>(status.error_code()), seconds);
    }
    methods->Proceed();
  }

 private:
  GrpcRequestMetrics* metrics_;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
};

class TimingInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit TimingInterceptorFactory(GrpcRequestMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new TimingInterceptor(metrics_, GrpcMethodLabel(info->method()));
  }

 private:
  GrpcRequestMetrics* metrics_;
};

}  // namespace

std::string GrpcMethodLabel(const char* full_method) {
  std::string_view m = full_method ? full_method : "";
  if (!m.empty() && m.front() == '/') m.remove_prefix(1);
  constexpr std::string_view kOurs = "eft.v1.";
  if (m.substr(0, kOurs.size()) != kOurs || m.find('/') == std::string_view::npos) return "unknown";
  return std::string(m);
}

Result<std::unique_ptr<GrpcRequestMetrics>> GrpcRequestMetrics::Create(MetricsRegistry* registry) {
  EFT_ASSIGN_OR_RETURN(CounterFamily * requests,
                       registry->AddCounter("eft_grpc_requests_total", "gRPC calls answered, by method and status code.",
                                            {"method", "code"}));
  auto duration = registry->AddHistogram("eft_grpc_request_duration_seconds",
                                         "gRPC call time from its start to its status (a stream's whole life).",
                                         {"method"});
  if (!duration.ok()) {
    (void)registry->Unregister("eft_grpc_requests_total");
    return duration.status();
  }
  return std::unique_ptr<GrpcRequestMetrics>(new GrpcRequestMetrics(requests, *duration));
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> GrpcRequestMetrics::InterceptorFactory() {
  return std::make_unique<TimingInterceptorFactory>(this);
}

void GrpcRequestMetrics::Record(const std::string& method, int grpc_code, double seconds) {
  // gRPC's codes are eft's (common/status.h), so the names match what clients print.
  requests_->WithLabels({method, StatusCodeName(static_cast<StatusCode>(grpc_code))})->Inc();
  duration_->WithLabels({method})->Observe(seconds);
}

}  // namespace eft::controller
