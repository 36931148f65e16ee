// MlflowClient: the calls of MLflow's REST API 2.0 (the /api/2.0/mlflow/ endpoints of every MLflow
// tracking server, `mlflow server` 1.x to 3.x) that the controller's tracker makes, over HttpClient:
// experiments/get-by-name and experiments/create, runs/search (a run by tag), runs/create,
// runs/get, runs/log-batch, runs/update.
//
// Errors: what may succeed later is UNAVAILABLE or DEADLINE_EXCEEDED (no connection, no reply in
// time, HTTP 429 or 5xx, 401/403: credentials the server refuses, 404 without MLflow's error body:
// not an MLflow server at that path); everything else the server refuses as it is (HTTP 4xx with
// MLflow's error_code) keeps a code of its own: NOT_FOUND (RESOURCE_DOES_NOT_EXIST), ALREADY_EXISTS,
// INVALID_ARGUMENT, FAILED_PRECONDITION (a deleted experiment). Messages name the server, the call
// and MLflow's own message.
//
// Credentials, as MLflow's own client takes them from the environment: MLFLOW_TRACKING_TOKEN (a
// bearer token), else MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (basic auth);
// MLFLOW_TRACKING_SERVER_CERT_PATH (a CA bundle for https://), MLFLOW_TRACKING_INSECURE_TLS=true
// (no certificate check). Not thread-safe: one caller (the tracker's thread).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/tracking/http_client.h"
#include "controller/tracking/mlflow_batch.h"
#include "controller/tracking/run_pipeline.h"

namespace eft::controller::mlflow {

// The HttpClient options of MLflow's environment variables (above), with `timeout` for each call.
HttpClientOptions ClientOptionsFromEnvironment(std::chrono::milliseconds timeout);

// The status of an MLflow reply (see above); OK for 2xx.
Status StatusOfReply(const std::string& call, const HttpResult& reply);

// The body of a runs/log-batch call.
std::string LogBatchJson(const std::string& run_id, const std::vector<Metric>& metrics,
                         const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags);

class MlflowClient {
 public:
  static Result<std::unique_ptr<MlflowClient>> Create(const std::string& tracking_uri, HttpClientOptions options);

  // The experiment's id; made when there is none of that name.
  Result<std::string> ExperimentId(const std::string& name);
  // The id of the experiment's active run whose tag `key` is `value`; "" when there is none.
  Result<std::string> FindRunByTag(const std::string& experiment_id, const std::string& key, const std::string& value);
  Result<std::string> CreateRun(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                                const std::vector<KeyValue>& tags);
  Result<RunData> GetRun(const std::string& run_id);
  // At most MLflow's batch limits (mlflow_batch.h); the caller splits (PlanBatch).
  Status LogBatch(const std::string& run_id, const std::vector<Metric>& metrics, const std::vector<KeyValue>& params,
                  const std::vector<KeyValue>& tags);
  // status: FINISHED, FAILED or KILLED.
  Status EndRun(const std::string& run_id, const std::string& status, int64_t end_ms);

  const std::string& uri() const { return http_->url(); }

 private:
  explicit MlflowClient(std::unique_ptr<HttpClient> http) : http_(std::move(http)) {}
  Result<std::string> Call(const std::string& method, const std::string& endpoint, const std::string& body);
  // The calls above, their replies' JSON read without the guard against unexpected shapes.
  Result<std::string> ExperimentIdOf(const std::string& name);
  Result<std::string> FindRunByTagOf(const std::string& experiment_id, const std::string& key,
                                     const std::string& value);
  Result<std::string> CreateRunOf(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                                  const std::vector<KeyValue>& tags);
  Result<RunData> GetRunOf(const std::string& run_id);
  std::unique_ptr<HttpClient> http_;
};

}  // namespace eft::controller::mlflow
