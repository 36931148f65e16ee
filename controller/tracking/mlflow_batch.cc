#include "controller/tracking/mlflow_batch.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "spec/job_spec.h"

namespace eft::controller::mlflow {
namespace {

using json = nlohmann::json;

std::string Cut(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max - 3;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // not inside a UTF-8 character
  return text.substr(0, end) + "...";
}

bool LooksSecret(const std::string& name) {
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* word : {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH"}) {
    if (upper.find(word) != std::string::npos) return true;
  }
  return false;
}

// http://user:password@host/ -> http://<redacted>@host/
std::string WithoutUserInfo(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t authority = scheme + 3;
  const size_t end = url.find_first_of("/?#", authority);
  const size_t at = url.rfind('@', end == std::string::npos ? url.size() : end);
  if (at == std::string::npos || at < authority) return url;
  return url.substr(0, authority) + "<redacted>" + url.substr(at);
}

void Flatten(const json& value, const std::string& path, std::vector<KeyValue>* out) {
  if (value.is_object()) {
    for (const auto& [key, child] : value.items()) Flatten(child, path.empty() ? key : path + "." + key, out);
    return;
  }
  std::string text = value.is_string() ? value.get<std::string>() : value.is_null() ? "" : value.dump();
  out->push_back({path, std::move(text)});
}

}  // namespace

std::vector<KeyValue> SpecParams(const v1::JobSpec& spec) {
  std::vector<KeyValue> flat;
  Flatten(eft::spec::JobSpecToJson(spec), "", &flat);
  std::vector<KeyValue> out;
  for (KeyValue& p : flat) {
    if (p.key.empty() || p.key.size() > kMaxKeyChars) continue;
    if (p.key.rfind("env.", 0) == 0 && LooksSecret(p.key.substr(4))) p.value = "<redacted>";
    if (p.key == "tracking.mlflow_tracking_uri") p.value = WithoutUserInfo(p.value);
    p.value = Cut(p.value, kMaxParamValueChars);
    out.push_back(std::move(p));
  }
  return out;
}

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  constexpr std::string_view kPrefix = "JOB_STATE_";
  return name.rfind(kPrefix, 0) == 0 ? name.substr(kPrefix.size()) : name;
}

std::string AttemptTag(const TrackedAttempt& a) {
  std::string text = "start step " + (a.resume_step < 0 ? std::string("?") : std::to_string(a.resume_step)) +
                     ", world size " + std::to_string(a.world_size);
  if (!a.ended) return text + ", running";
  std::string end = v1::AttemptEnd_Name(a.end);
  constexpr std::string_view kPrefix = "ATTEMPT_END_";
  if (end.rfind(kPrefix, 0) == 0) end = end.substr(kPrefix.size());
  text += ", ended at step " + std::to_string(a.reached_step) + ": " + end;
  if (!a.end_reason.empty()) text += " (" + Cut(a.end_reason, 300) + ")";
  return text;
}

std::map<std::string, std::string> JobTags(const TrackedJob& job) {
  std::map<std::string, std::string> tags = {
      {"eft.job_id", job.id},
      {"eft.state", StateName(job.state)},
      {"eft.attempts", std::to_string(job.attempts.size())},
      {"eft.restarts", std::to_string(job.restarts)},
      {"eft.world_size", std::to_string(job.attempts.empty() ? 0 : job.attempts.back().world_size)},
  };
  for (const TrackedAttempt& a : job.attempts) tags["eft.attempt." + std::to_string(a.number)] = AttemptTag(a);
  if (!RunStatusFor(job.state).empty() && !job.reason.empty()) tags["eft.reason"] = Cut(job.reason, 1000);
  for (auto& [key, value] : tags) value = Cut(value, kMaxTagValueChars);
  return tags;
}

std::string RunStatusFor(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_SUCCEEDED:
      return "FINISHED";
    case v1::JOB_STATE_FAILED:
      return "FAILED";
    case v1::JOB_STATE_CANCELLED:
      return "KILLED";
    default:
      return "";
  }
}

size_t MetricBytes(const std::string& key) {
  // {"key":"...","value":-1.2345678901234567e-300,"timestamp":1700000000000,"step":123456789},
  return key.size() + 96;
}

BatchSize PlanBatch(const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags, size_t metrics_waiting,
                    const std::function<size_t(size_t)>& metric_bytes, size_t byte_budget) {
  BatchSize b;
  size_t bytes = 64;  // {"run_id":"...","metrics":[],"params":[],"tags":[]}
  size_t entities = 0;
  auto fits = [&](size_t more) { return entities == 0 || bytes + more <= byte_budget; };
  for (const KeyValue& p : params) {
    // JSON escapes can double a value's length (\" and \\), rarely more.
    const size_t more = 2 * (p.key.size() + p.value.size()) + 32;
    if (b.params == kMaxParamsPerBatch || entities == kMaxEntitiesPerBatch || !fits(more)) break;
    bytes += more;
    ++b.params;
    ++entities;
  }
  for (const KeyValue& t : tags) {
    const size_t more = 2 * (t.key.size() + t.value.size()) + 32;
    if (b.tags == kMaxTagsPerBatch || entities == kMaxEntitiesPerBatch || !fits(more)) break;
    bytes += more;
    ++b.tags;
    ++entities;
  }
  // Metrics only after every param and tag has gone (they go first), so a batch never leaves a
  // param behind a metric.
  if (b.params < params.size() || b.tags < tags.size()) return b;
  for (size_t i = 0; i < metrics_waiting; ++i) {
    const size_t more = metric_bytes(i);
    if (b.metrics == kMaxMetricsPerBatch || entities == kMaxEntitiesPerBatch || !fits(more)) break;
    bytes += more;
    ++b.metrics;
    ++entities;
  }
  return b;
}

std::chrono::milliseconds RetryDelay(int failures, std::chrono::milliseconds initial, std::chrono::milliseconds max) {
  std::chrono::milliseconds delay = initial;
  for (int i = 1; i < failures && delay < max; ++i) delay *= 2;
  return std::min(delay, max);
}

size_t ThinQueue(std::deque<QueuedPoint>* queue, size_t bound) {
  size_t dropped = 0;
  bound = std::max<size_t>(bound, 2);
  while (queue->size() > bound) {
    const size_t half = queue->size() / 2;
    // The distinct steps among the older half, in order; every second one goes.
    std::vector<int64_t> steps;
    std::unordered_set<int64_t> seen;
    for (size_t i = 0; i < half; ++i) {
      if (!(*queue)[i].precious && seen.insert((*queue)[i].step).second) steps.push_back((*queue)[i].step);
    }
    std::unordered_set<int64_t> drop;
    for (size_t i = 1; i < steps.size(); i += 2) drop.insert(steps[i]);
    std::deque<QueuedPoint> kept;
    for (size_t i = 0; i < queue->size(); ++i) {
      const QueuedPoint& p = (*queue)[i];
      if (!p.precious && drop.count(p.step)) {  // all of the step, also a part of it in the newer half
        ++dropped;
      } else {
        kept.push_back(p);
      }
    }
    if (kept.size() == queue->size()) {
      kept.pop_front();
      ++dropped;
    }
    queue->swap(kept);
  }
  return dropped;
}

}  // namespace eft::controller::mlflow
