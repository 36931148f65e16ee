#include "controller/tracking/mlflow_client.h"

#include <cstdlib>

#include <nlohmann/json.hpp>

namespace eft::controller::mlflow {
namespace {

using json = nlohmann::json;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string Base64(const std::string& in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += std::string{kAlphabet[(v >> 18) & 63], kAlphabet[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += std::string{kAlphabet[(v >> 18) & 63], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], '='};
  }
  return out;
}

// Strings that are not valid UTF-8 (a rank's words in a reason) are sent with U+FFFD, not refused.
std::string Dump(const json& doc) { return doc.dump(-1, ' ', false, json::error_handler_t::replace); }

json KeyValues(const std::vector<KeyValue>& items) {
  json out = json::array();
  for (const KeyValue& kv : items) out.push_back({{"key", kv.key}, {"value", kv.value}});
  return out;
}

// A reply whose JSON is not shaped as MLflow's (a proxy's page, another server): the call failed.
template <typename F>
auto Guarded(const std::string& call, F body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {  // nlohmann's type errors, std::stoll
    return Status::Unavailable(call + ": unexpected reply (" + e.what() + ")");
  }
}

Result<json> Parse(const std::string& call, const std::string& body) {
  json doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::Unavailable(call + ": the reply is not MLflow's JSON: " + body.substr(0, 200));
  }
  return doc;
}

}  // namespace

HttpClientOptions ClientOptionsFromEnvironment(std::chrono::milliseconds timeout) {
  HttpClientOptions o;
  o.timeout = timeout;
  o.connect_timeout = std::min(timeout, std::chrono::milliseconds(3000));
  o.ca_file = Env("MLFLOW_TRACKING_SERVER_CERT_PATH");
  const std::string insecure = Env("MLFLOW_TRACKING_INSECURE_TLS");
  o.insecure_tls = insecure == "true" || insecure == "True" || insecure == "1";
  if (const std::string token = Env("MLFLOW_TRACKING_TOKEN"); !token.empty()) {
    o.headers.push_back({"Authorization", "Bearer " + token});
  } else if (const std::string user = Env("MLFLOW_TRACKING_USERNAME"); !user.empty()) {
    o.headers.push_back({"Authorization", "Basic " + Base64(user + ":" + Env("MLFLOW_TRACKING_PASSWORD"))});
  }
  return o;
}

Status StatusOfReply(const std::string& call, const HttpResult& reply) {
  if (reply.status >= 200 && reply.status < 300) return Status::Ok();
  const json doc = json::parse(reply.body, nullptr, false);
  const bool mlflow_error = doc.is_object() && doc.contains("error_code") && doc["error_code"].is_string();
  const std::string code = mlflow_error ? doc["error_code"].get<std::string>() : "";
  std::string message = mlflow_error && doc.contains("message") && doc["message"].is_string()
                            ? doc["message"].get<std::string>()
                            : reply.body.substr(0, 300);
  message = call + ": HTTP " + std::to_string(reply.status) + (code.empty() ? "" : " " + code) + ": " + message;
  if (reply.status == 429 || reply.status >= 500 || reply.status == 401 || reply.status == 403) {
    return Status::Unavailable(message);
  }
  if (!mlflow_error) return Status::Unavailable(message + " (is this an MLflow tracking server?)");
  if (code == "RESOURCE_DOES_NOT_EXIST") return Status::NotFound(message);
  if (code == "RESOURCE_ALREADY_EXISTS") return Status::AlreadyExists(message);
  return Status::InvalidArgument(message);
}

Result<std::unique_ptr<MlflowClient>> MlflowClient::Create(const std::string& tracking_uri, HttpClientOptions options) {
  EFT_ASSIGN_OR_RETURN(auto http, HttpClient::Create(tracking_uri, std::move(options)));
  return std::unique_ptr<MlflowClient>(new MlflowClient(std::move(http)));
}

Result<std::string> MlflowClient::Call(const std::string& method, const std::string& endpoint, const std::string& body) {
  const std::string call = "MLflow " + http_->url() + " " + endpoint.substr(0, endpoint.find('?'));
  auto reply = http_->Call(method, "/api/2.0/mlflow/" + endpoint, body);
  if (!reply.ok()) return reply.status();
  EFT_RETURN_IF_ERROR(StatusOfReply(call, *reply));
  return std::move(reply->body);
}

Result<std::string> MlflowClient::ExperimentId(const std::string& name) {
  return Guarded("MLflow " + http_->url() + " experiments",
                 [&]() -> Result<std::string> { return ExperimentIdOf(name); });
}

Result<std::string> MlflowClient::ExperimentIdOf(const std::string& name) {
  for (int round = 0; round < 2; ++round) {
    auto found = Call("GET", "experiments/get-by-name?experiment_name=" + UrlEncode(name), "");
    if (found.ok()) {
      EFT_ASSIGN_OR_RETURN(json doc, Parse("experiments/get-by-name", *found));
      const json& e = doc.value("experiment", json::object());
      if (e.value("lifecycle_stage", "active") == "deleted") {
        return Status::FailedPrecondition("MLflow experiment '" + name + "' on " + http_->url() +
                                          " is deleted: restore it (mlflow experiments restore) or name another");
      }
      if (!e.contains("experiment_id") || !e["experiment_id"].is_string()) {
        return Status::Unavailable("experiments/get-by-name: no experiment_id in " + found->substr(0, 200));
      }
      return e["experiment_id"].get<std::string>();
    }
    if (found.status().code() != StatusCode::kNotFound) return found.status();
    auto made = Call("POST", "experiments/create", Dump({{"name", name}}));
    if (made.ok()) {
      EFT_ASSIGN_OR_RETURN(json doc, Parse("experiments/create", *made));
      if (doc.contains("experiment_id") && doc["experiment_id"].is_string()) return doc["experiment_id"].get<std::string>();
      return Status::Unavailable("experiments/create: no experiment_id in " + made->substr(0, 200));
    }
    // Made by someone else meanwhile: look it up again.
    if (made.status().code() != StatusCode::kAlreadyExists) return made.status();
  }
  return Status::Unavailable("MLflow experiment '" + name + "' on " + http_->url() + ": neither found nor made");
}

Result<std::string> MlflowClient::FindRunByTag(const std::string& experiment_id, const std::string& key,
                                               const std::string& value) {
  return Guarded("MLflow " + http_->url() + " runs/search",
                 [&]() -> Result<std::string> { return FindRunByTagOf(experiment_id, key, value); });
}

Result<std::string> MlflowClient::FindRunByTagOf(const std::string& experiment_id, const std::string& key,
                                                 const std::string& value) {
  std::string quoted;
  for (char c : value) quoted += c == '\'' ? std::string("\\'") : std::string(1, c);
  const json request = {{"experiment_ids", json::array({experiment_id})},
                        {"filter", "tags.`" + key + "` = '" + quoted + "'"},
                        {"max_results", 1}};
  EFT_ASSIGN_OR_RETURN(std::string body, Call("POST", "runs/search", Dump(request)));
  EFT_ASSIGN_OR_RETURN(json doc, Parse("runs/search", body));
  const json runs = doc.value("runs", json::array());
  if (!runs.is_array() || runs.empty()) return std::string();
  return runs[0].value("info", json::object()).value("run_id", std::string());
}

Result<std::string> MlflowClient::CreateRun(const std::string& experiment_id, const std::string& run_name,
                                            int64_t start_ms, const std::vector<KeyValue>& tags) {
  return Guarded("MLflow " + http_->url() + " runs/create",
                 [&]() -> Result<std::string> { return CreateRunOf(experiment_id, run_name, start_ms, tags); });
}

Result<std::string> MlflowClient::CreateRunOf(const std::string& experiment_id, const std::string& run_name,
                                              int64_t start_ms, const std::vector<KeyValue>& tags) {
  const json request = {
      {"experiment_id", experiment_id}, {"run_name", run_name}, {"start_time", start_ms}, {"tags", KeyValues(tags)}};
  EFT_ASSIGN_OR_RETURN(std::string body, Call("POST", "runs/create", Dump(request)));
  EFT_ASSIGN_OR_RETURN(json doc, Parse("runs/create", body));
  const std::string id = doc.value("run", json::object()).value("info", json::object()).value("run_id", std::string());
  if (id.empty()) return Status::Unavailable("runs/create: no run_id in " + body.substr(0, 200));
  return id;
}

Result<RunData> MlflowClient::GetRun(const std::string& run_id) {
  return Guarded("MLflow " + http_->url() + " runs/get", [&]() -> Result<RunData> { return GetRunOf(run_id); });
}

Result<RunData> MlflowClient::GetRunOf(const std::string& run_id) {
  EFT_ASSIGN_OR_RETURN(std::string body, Call("GET", "runs/get?run_id=" + UrlEncode(run_id), ""));
  EFT_ASSIGN_OR_RETURN(json doc, Parse("runs/get", body));
  const json run = doc.value("run", json::object());
  RunData out;
  out.status = run.value("info", json::object()).value("status", std::string());
  const json data = run.value("data", json::object());
  // runs/get gives each metric's latest value: the one at its highest step.
  for (const json& m : data.value("metrics", json::array())) {
    if (!m.is_object() || !m.contains("key") || !m["key"].is_string()) continue;
    const std::string key = m["key"].get<std::string>();
    const json& s = m.value("step", json(0));
    const int64_t step = s.is_number_integer() ? s.get<int64_t>() : s.is_string() ? std::stoll(s.get<std::string>()) : 0;
    auto [it, fresh] = out.max_step.emplace(key, step);
    if (!fresh) it->second = std::max(it->second, step);
  }
  for (const json& p : data.value("params", json::array())) {
    if (p.is_object() && p.contains("key") && p["key"].is_string()) out.params.insert(p["key"].get<std::string>());
  }
  for (const json& t : data.value("tags", json::array())) {
    if (t.is_object() && t.contains("key") && t["key"].is_string()) {
      out.tags[t["key"].get<std::string>()] = t.value("value", std::string());
    }
  }
  return out;
}

std::string LogBatchJson(const std::string& run_id, const std::vector<Metric>& metrics,
                         const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags) {
  json m = json::array();
  for (const Metric& p : metrics) {
    m.push_back({{"key", p.key}, {"value", p.value}, {"timestamp", p.time_ms}, {"step", p.step}});
  }
  return Dump({{"run_id", run_id}, {"metrics", m}, {"params", KeyValues(params)}, {"tags", KeyValues(tags)}});
}

Status MlflowClient::LogBatch(const std::string& run_id, const std::vector<Metric>& metrics,
                              const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags) {
  return Call("POST", "runs/log-batch", LogBatchJson(run_id, metrics, params, tags)).status();
}

Status MlflowClient::EndRun(const std::string& run_id, const std::string& status, int64_t end_ms) {
  const json request = {{"run_id", run_id}, {"status", status}, {"end_time", end_ms}};
  return Call("POST", "runs/update", Dump(request)).status();
}

}  // namespace eft::controller::mlflow
