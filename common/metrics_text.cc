// The text side of common/metrics.h: name rules, escaping, number formatting, UTF-8 repair.
#include <charconv>
#include <cmath>
#include <set>
#include <string>
#include <string_view>

#include "common/metrics.h"
#include "common/utf8.h"

namespace eft {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// promtool's linter flags any lower-case letter followed by an upper-case one.
bool HasCamelCase(std::string_view s) {
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] >= 'a' && s[i] <= 'z' && s[i + 1] >= 'A' && s[i + 1] <= 'Z') return true;
  }
  return false;
}


}  // namespace

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

Status ValidateMetricName(std::string_view name, MetricType type) {
  const std::string quoted = "metric name \"" + std::string(name) + "\"";
  if (name.empty()) return Status::InvalidArgument("metric name must not be empty");
  if (name.find(':') != std::string_view::npos) {
    return Status::InvalidArgument(quoted + ": ':' is reserved for recording rules; use '_'");
  }
  if (!IsNameStart(name[0])) {
    return Status::InvalidArgument(quoted + " must start with a letter or '_'");
  }
  for (char c : name) {
    if (!IsNameChar(c)) {
      return Status::InvalidArgument(quoted + " may contain only [a-zA-Z0-9_]");
    }
  }
  if (HasCamelCase(name)) {
    return Status::InvalidArgument(quoted + " must be snake_case, not camelCase");
  }
  const bool total = EndsWith(name, "_total");
  if (type == MetricType::kCounter && !total) {
    return Status::InvalidArgument(quoted + ": counter names must end in \"_total\"");
  }
  if (type != MetricType::kCounter && total) {
    return Status::InvalidArgument(quoted + ": only counter names end in \"_total\"");
  }
  if (type != MetricType::kHistogram) {
    for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
      if (EndsWith(name, suffix)) {
        return Status::InvalidArgument(quoted + ": \"" + std::string(suffix) +
                                       "\" is reserved for histogram samples");
      }
    }
  }
  return Status::Ok();
}

Status ValidateLabelNames(const std::vector<std::string>& label_names, MetricType type) {
  (void)type;  // "le" is ours for histograms and promtool flags it elsewhere: same rule for all types
  std::set<std::string_view> seen;
  for (const std::string& label : label_names) {
    const std::string quoted = "label name \"" + label + "\"";
    if (label.empty()) return Status::InvalidArgument("label name must not be empty");
    if (!IsNameStart(label[0])) return Status::InvalidArgument(quoted + " must start with a letter or '_'");
    for (char c : label) {
      if (!IsNameChar(c)) return Status::InvalidArgument(quoted + " may contain only [a-zA-Z0-9_]");
    }
    if (label.rfind("__", 0) == 0) {
      return Status::InvalidArgument(quoted + ": names starting with \"__\" are reserved for Prometheus");
    }
    if (label == "le" || label == "quantile") {
      return Status::InvalidArgument(quoted + " is reserved for histogram buckets and summary quantiles");
    }
    if (HasCamelCase(label)) return Status::InvalidArgument(quoted + " must be snake_case, not camelCase");
    if (!seen.insert(label).second) return Status::InvalidArgument(quoted + " appears twice");
  }
  return Status::Ok();
}

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  // to_chars without a format gives the shortest text that parses back to the same double.
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "NaN";  // unreachable: 32 bytes fit any double
  return std::string(buf, end);
}


std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size() + 2);
  for (char c : IsValidUtf8(v) ? std::string(v) : SanitizeUtf8(v)) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace eft
