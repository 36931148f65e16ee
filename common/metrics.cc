// Metric values, families and the registry of common/metrics.h (text helpers: metrics_text.cc).
#include "common/metrics.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "common/logging.h"

namespace eft {

using metrics_internal::FamilyBase;

std::vector<double> DefaultHistogramBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  if (!(start > 0) || !(factor > 1) || count < 1) return out;
  for (int i = 0; i < count; ++i, start *= factor) out.push_back(start);
  return out;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> out;
  if (!(width > 0) || count < 1) return out;
  // start + i*width rather than repeated addition, so rounding does not accumulate.
  for (int i = 0; i < count; ++i) out.push_back(start + i * width);
  return out;
}

void Gauge::SetToCurrentTime() {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  Set(std::chrono::duration<double>(now).count());
}

Histogram::Histogram(std::shared_ptr<const std::vector<double>> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(new std::atomic<uint64_t>[bounds_->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  const std::vector<double>& b = *bounds_;
  // lower_bound: the first bound >= v, since a bucket's `le` includes its bound. NaN compares false
  // with everything, so it is sent to +Inf explicitly.
  size_t i = std::isnan(v) ? b.size() : static_cast<size_t>(std::lower_bound(b.begin(), b.end(), v) - b.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Snap() const {
  Snapshot s;
  s.upper_bounds = *bounds_;
  s.cumulative_counts.resize(bounds_->size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative_counts[i] = running;
  }
  // _count is derived from the buckets rather than kept apart, so it always equals le="+Inf" as
  // Prometheus requires, even while other threads observe.
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

namespace {

[[noreturn]] void DieLabelCount(const std::string& family, size_t want, size_t got) {
  std::fprintf(stderr, "eft metrics: family \"%s\" has %zu label name(s) but WithLabels/Remove got %zu value(s)\n",
               family.c_str(), want, got);
  std::abort();
}

void AppendEscapedValue(std::string* out, std::string_view v) {
  for (char c : v) {  // already valid UTF-8: keys are sanitized on the way in
    switch (c) {
      case '\\': *out += "\\\\"; break;
      case '"': *out += "\\\""; break;
      case '\n': *out += "\\n"; break;
      default: *out += c;
    }
  }
}

void AppendHeader(std::string* out, const FamilyBase& f) {
  *out += "# HELP ";
  *out += f.name();
  *out += ' ';
  *out += EscapeHelp(f.help());
  *out += "\n# TYPE ";
  *out += f.name();
  *out += ' ';
  *out += MetricTypeName(f.type());
  *out += '\n';
}

// name{a="x",b="y",le="0.5"} value
void AppendSample(std::string* out, std::string_view name, const std::vector<std::string>& label_names,
                  const std::vector<std::string>& values, std::string_view le, std::string_view value) {
  *out += name;
  if (!label_names.empty() || !le.empty()) {
    *out += '{';
    for (size_t i = 0; i < label_names.size(); ++i) {
      if (i > 0) *out += ',';
      *out += label_names[i];
      *out += "=\"";
      AppendEscapedValue(out, values[i]);
      *out += '"';
    }
    if (!le.empty()) {
      if (!label_names.empty()) *out += ',';
      *out += "le=\"";
      *out += le;
      *out += '"';
    }
    *out += '}';
  }
  *out += ' ';
  *out += value;
  *out += '\n';
}

void AppendChild(std::string* out, const FamilyBase& f, const std::vector<std::string>& values,
                 const Counter& c) {
  AppendSample(out, f.name(), f.label_names(), values, {}, FormatMetricValue(c.Value()));
}

void AppendChild(std::string* out, const FamilyBase& f, const std::vector<std::string>& values,
                 const Gauge& g) {
  AppendSample(out, f.name(), f.label_names(), values, {}, FormatMetricValue(g.Value()));
}

void AppendChild(std::string* out, const FamilyBase& f, const std::vector<std::string>& values,
                 const Histogram& h) {
  const Histogram::Snapshot s = h.Snap();
  const std::string bucket = f.name() + "_bucket";
  for (size_t i = 0; i < s.cumulative_counts.size(); ++i) {
    const std::string le = i < s.upper_bounds.size() ? FormatMetricValue(s.upper_bounds[i]) : "+Inf";
    AppendSample(out, bucket, f.label_names(), values, le, std::to_string(s.cumulative_counts[i]));
  }
  AppendSample(out, f.name() + "_sum", f.label_names(), values, {}, FormatMetricValue(s.sum));
  AppendSample(out, f.name() + "_count", f.label_names(), values, {}, std::to_string(s.count));
}

// Label values as stored: the caller's bytes when they are UTF-8, else a repaired copy.
template <typename S>
bool AllUtf8(std::span<const S> values) {
  return std::all_of(values.begin(), values.end(), [](std::string_view v) { return IsValidUtf8(v); });
}

template <typename S>
std::vector<std::string> SanitizedKey(std::span<const S> values) {
  std::vector<std::string> key;
  key.reserve(values.size());
  for (std::string_view v : values) key.push_back(SanitizeUtf8(v));
  return key;
}

class CallbackFamily final : public FamilyBase {
 public:
  CallbackFamily(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
                 MetricsCallback fn)
      : FamilyBase(std::move(name), std::move(help), type, std::move(label_names)), fn_(std::move(fn)) {}

  void AppendText(std::string* out) const override EXCLUDES(mu_) {
    std::vector<CallbackSample> samples;
    {
      // Held across the call so that Retire() waits for a callback in flight.
      MutexLock lock(&mu_);
      if (retired_) return;
      samples = fn_();
    }
    std::vector<CallbackSample> kept;
    kept.reserve(samples.size());
    for (CallbackSample& s : samples) {
      if (s.label_values.size() != label_names().size()) {
        EFT_LOG(WARNING) << "metrics: callback of \"" << name() << "\" returned " << s.label_values.size()
                         << " label value(s) for " << label_names().size() << " label name(s); sample dropped";
        continue;
      }
      for (std::string& v : s.label_values) {
        if (!IsValidUtf8(v)) v = SanitizeUtf8(v);
      }
      kept.push_back(std::move(s));
    }
    samples = std::move(kept);
    std::stable_sort(samples.begin(), samples.end(), [](const CallbackSample& a, const CallbackSample& b) {
      return metrics_internal::LabelsLess()(a.label_values, b.label_values);
    });
    // Two samples with one label set would make Prometheus reject the scrape: keep the first.
    auto last = std::unique(samples.begin(), samples.end(), [](const CallbackSample& a, const CallbackSample& b) {
      return a.label_values == b.label_values;
    });
    samples.erase(last, samples.end());

    AppendHeader(out, *this);
    for (const CallbackSample& s : samples) {
      AppendSample(out, name(), label_names(), s.label_values, {}, FormatMetricValue(s.value));
    }
  }

  void Retire() override EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    retired_ = true;
    fn_ = nullptr;  // release what the callback captured now, not when the last scrape lets go
  }

 private:
  mutable Mutex mu_;
  bool retired_ GUARDED_BY(mu_) = false;
  MetricsCallback fn_ GUARDED_BY(mu_);
};

Status ValidateHelp(const std::string& name, const std::string& help) {
  if (help.empty()) return Status::InvalidArgument("metric \"" + name + "\" needs help text");
  if (!IsValidUtf8(help)) return Status::InvalidArgument("help text of metric \"" + name + "\" is not UTF-8");
  return Status::Ok();
}

Status ValidateFamily(const std::string& name, const std::string& help, MetricType type,
                      const std::vector<std::string>& label_names) {
  EFT_RETURN_IF_ERROR(ValidateMetricName(name, type));
  EFT_RETURN_IF_ERROR(ValidateHelp(name, help));
  Status s = ValidateLabelNames(label_names, type);
  if (!s.ok()) return s.WithContext("metric \"" + name + "\"");
  return Status::Ok();
}

}  // namespace

// ---- MetricFamily<T> ----

template <typename T>
MetricFamily<T>::MetricFamily(std::string name, std::string help, MetricType type,
                              std::vector<std::string> label_names, std::shared_ptr<const std::vector<double>> bounds)
    : FamilyBase(std::move(name), std::move(help), type, std::move(label_names)), bounds_(std::move(bounds)) {
  if (this->label_names().empty()) Get();
}

template <typename T>
template <typename S>
std::shared_ptr<T> MetricFamily<T>::Lookup(std::span<const S> values) {
  if (values.size() != label_names().size()) DieLabelCount(name(), label_names().size(), values.size());
  const bool utf8 = AllUtf8(values);
  std::vector<std::string> repaired;
  if (!utf8) repaired = SanitizedKey(values);
  MutexLock lock(&mu_);
  auto it = utf8 ? children_.find(values) : children_.find(repaired);
  if (it != children_.end()) return it->second;
  std::shared_ptr<T> child;
  if constexpr (std::is_same_v<T, Histogram>) {
    child = std::make_shared<Histogram>(bounds_);
  } else {
    child = std::make_shared<T>();
  }
  std::vector<std::string> key = utf8 ? std::vector<std::string>(values.begin(), values.end()) : std::move(repaired);
  children_.emplace(std::move(key), child);
  return child;
}

template <typename T>
template <typename S>
bool MetricFamily<T>::Erase(std::span<const S> values) {
  if (values.size() != label_names().size()) DieLabelCount(name(), label_names().size(), values.size());
  const bool utf8 = AllUtf8(values);
  std::vector<std::string> repaired;
  if (!utf8) repaired = SanitizedKey(values);
  MutexLock lock(&mu_);
  auto it = utf8 ? children_.find(values) : children_.find(repaired);
  if (it == children_.end()) return false;
  children_.erase(it);
  return true;
}

template <typename T>
void MetricFamily<T>::Clear() {
  MutexLock lock(&mu_);
  children_.clear();
}

template <typename T>
size_t MetricFamily<T>::size() const {
  MutexLock lock(&mu_);
  return children_.size();
}

template <typename T>
void MetricFamily<T>::AppendText(std::string* out) const {
  AppendHeader(out, *this);
  // Formatting under the lock is cheap and only delays WithLabels/Remove; cached handles never lock.
  MutexLock lock(&mu_);
  for (const auto& [values, child] : children_) AppendChild(out, *this, values, *child);
}

template class MetricFamily<Counter>;
template class MetricFamily<Gauge>;
template class MetricFamily<Histogram>;

// ---- MetricsRegistry ----

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

Status MetricsRegistry::Register(std::shared_ptr<FamilyBase> family) {
  std::vector<std::string> names = {family->name()};
  if (family->type() == MetricType::kHistogram) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) names.push_back(family->name() + suffix);
  }
  MutexLock lock(&mu_);
  for (const std::string& n : names) {
    auto it = taken_names_.find(n);
    if (it == taken_names_.end()) continue;
    if (it->second == family->name() && n == family->name()) {
      return Status::AlreadyExists("metric \"" + family->name() + "\" is already registered");
    }
    return Status::AlreadyExists("metric \"" + family->name() + "\" would expose \"" + n +
                                 "\", which metric \"" + it->second + "\" already uses");
  }
  for (const std::string& n : names) taken_names_.emplace(n, family->name());
  families_.emplace(family->name(), std::move(family));
  return Status::Ok();
}

Result<CounterFamily*> MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                                   const std::vector<std::string>& label_names) {
  EFT_RETURN_IF_ERROR(ValidateFamily(name, help, MetricType::kCounter, label_names));
  auto family = std::make_shared<CounterFamily>(name, help, MetricType::kCounter, label_names, nullptr);
  EFT_RETURN_IF_ERROR(Register(family));
  return family.get();
}

Result<GaugeFamily*> MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                               const std::vector<std::string>& label_names) {
  EFT_RETURN_IF_ERROR(ValidateFamily(name, help, MetricType::kGauge, label_names));
  auto family = std::make_shared<GaugeFamily>(name, help, MetricType::kGauge, label_names, nullptr);
  EFT_RETURN_IF_ERROR(Register(family));
  return family.get();
}

Result<HistogramFamily*> MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                                       const std::vector<std::string>& label_names,
                                                       const std::vector<double>& buckets) {
  EFT_RETURN_IF_ERROR(ValidateFamily(name, help, MetricType::kHistogram, label_names));
  std::vector<double> bounds = buckets;
  if (!bounds.empty() && bounds.back() == INFINITY) bounds.pop_back();
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      return Status::InvalidArgument("histogram \"" + name + "\": bucket bound " + FormatMetricValue(bounds[i]) +
                                     " is not finite (+Inf is implicit)");
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      return Status::InvalidArgument("histogram \"" + name + "\": bucket bounds must be strictly increasing, got " +
                                     FormatMetricValue(bounds[i - 1]) + " then " + FormatMetricValue(bounds[i]));
    }
  }
  auto shared_bounds = std::make_shared<const std::vector<double>>(std::move(bounds));
  auto family = std::make_shared<HistogramFamily>(name, help, MetricType::kHistogram, label_names, shared_bounds);
  EFT_RETURN_IF_ERROR(Register(family));
  return family.get();
}

Status MetricsRegistry::AddCallback(MetricType type, const std::string& name, const std::string& help,
                                    const std::vector<std::string>& label_names, MetricsCallback fn) {
  if (type == MetricType::kHistogram) {
    return Status::InvalidArgument("metric \"" + name + "\": callback families are counters or gauges");
  }
  if (!fn) return Status::InvalidArgument("metric \"" + name + "\": callback is empty");
  EFT_RETURN_IF_ERROR(ValidateFamily(name, help, type, label_names));
  return Register(std::make_shared<CallbackFamily>(name, help, type, label_names, std::move(fn)));
}

Status MetricsRegistry::Unregister(const std::string& name) {
  std::shared_ptr<FamilyBase> family;
  {
    MutexLock lock(&mu_);
    auto it = families_.find(name);
    if (it == families_.end()) return Status::NotFound("metric \"" + name + "\" is not registered");
    family = std::move(it->second);
    families_.erase(it);
    std::erase_if(taken_names_, [&](const auto& entry) { return entry.second == name; });
  }
  // Outside mu_: this may wait for a scrape that is inside the family's callback.
  family->Retire();
  return Status::Ok();
}

std::string MetricsRegistry::Serialize() const {
  std::vector<std::shared_ptr<FamilyBase>> families;
  {
    // Copy and release, so callbacks run without the registry lock (they may take the caller's locks,
    // and registration from another thread must not wait behind a slow callback).
    MutexLock lock(&mu_);
    families.reserve(families_.size());
    for (const auto& entry : families_) families.push_back(entry.second);
  }
  std::string out;
  for (const auto& family : families) family->AppendText(&out);
  return out;
}

}  // namespace eft
