// Prometheus metrics: a thread-safe registry of counter, gauge and histogram families, serialized in the
// text exposition format 0.0.4 (what `/metrics` of the controller and the worker serve).
//
//   MetricsRegistry registry;
//   auto restarts = registry.AddCounter("eft_job_restarts_total", "Attempts restarted after a failure.",
//                                       {"job"});
//   if (!restarts.ok()) return restarts.status();
//   (*restarts)->WithLabels({"3"})->Inc();                  // or keep the handle and Inc() it later
//   registry.AddCallback(MetricType::kGauge, "eft_jobs", "Jobs by state.", {"state"},
//                        [&] { return CountJobsByState(); });   // runs at scrape time
//   http.Reply(200, kMetricsContentType, registry.Serialize());
//
// Contract:
// - Registration (Add*) validates and returns a Status; nothing is registered on error. A name is
//   accepted only if promtool's linter accepts it as well, so the exposition never needs fixing up:
//     * metric names match [a-zA-Z_][a-zA-Z0-9_]* (':' is legal in the format but reserved for recording
//       rules, and promtool flags it); label names match [a-zA-Z_][a-zA-Z0-9_]*, do not start with "__",
//       are not "le" or "quantile", and are unique within the family; no camelCase ("[a-z][A-Z]") in either;
//     * a counter's name ends in "_total" and that full name is both the family name on the HELP/TYPE lines
//       and the sample name (in 0.0.4, promtool parses a sample only under the family of the same name, so
//       "# TYPE foo counter" + "foo_total 1" is rejected); no other type ends in "_total";
//     * counters and gauges do not end in "_bucket", "_sum" or "_count"; no sample name of one family
//       (a histogram's name_bucket/_sum/_count included) may equal a name of another family;
//     * help text is non-empty valid UTF-8.
//   Units in names ("_seconds", "_bytes", not "_ms") are the caller's convention; promtool in the tests
//   checks them.
// - Families live until Unregister() or the registry's destruction; the raw family pointers returned by
//   Add* stay valid until then.
// - WithLabels() takes exactly one value per label name, in label-name order; any other count is a
//   programming error and aborts with a message naming the family. It returns a shared handle, so a
//   child removed (Remove/Clear) while another thread still updates it is simply detached: the update
//   is lost with the series, never a use-after-free. Caching a handle makes updates lock-free
//   (a relaxed atomic add, a few ns); WithLabels itself takes the family mutex and does one map lookup.
// - Label values are any bytes: invalid UTF-8 is replaced (per byte) by U+FFFD, because Prometheus
//   rejects a scrape whose label values are not UTF-8; values that differ only in invalid bytes therefore
//   name the same child.
// - A family without labels has its single child from the start, so it is exported as 0 before first use;
//   labelled children appear on first WithLabels().
// - Serialize() output: families sorted by name, children sorted by label values (in label-name order),
//   "# HELP" and "# TYPE" for every family (also when it has no children), values in the shortest form
//   that round-trips ("+Inf", "-Inf", "NaN"), histograms as cumulative _bucket{le=...} incl. le="+Inf",
//   then _sum and _count (equal to the +Inf bucket). No timestamps.
// - Callbacks run on the thread calling Serialize(), without any registry lock held, so they may take
//   the caller's own locks. After Unregister() of a callback family returns, its callback is not running
//   and never runs again (so it may capture objects that die after Unregister); a callback must therefore
//   not Unregister its own family. A callback sample with the wrong number of label values is dropped
//   with a warning; duplicate label sets keep the first.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/utf8.h"  // IsValidUtf8

namespace eft {

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kCounter, kGauge, kHistogram };
const char* MetricTypeName(MetricType type);  // "counter", "gauge", "histogram"

// Prometheus' client defaults: .005 .01 .025 .05 .1 .25 .5 1 2.5 5 10 (seconds of a request).
std::vector<double> DefaultHistogramBuckets();
// start, start*factor, ... (count bounds); start > 0, factor > 1, count >= 1, else empty.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// start, start+width, ... (count bounds); width > 0, count >= 1, else empty.
std::vector<double> LinearBuckets(double start, double width, int count);

// Monotonic value. Negative or NaN increments are ignored: a counter that went down would read as a
// process restart to rate().
class Counter {
 public:
  void Inc(double amount = 1.0) {
    if (!(amount >= 0)) return;
    value_.fetch_add(amount, std::memory_order_relaxed);
  }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  void Inc(double delta = 1.0) { Add(delta); }
  void Dec(double delta = 1.0) { Add(-delta); }
  void SetToCurrentTime();  // Unix time in seconds, for "..._timestamp_seconds" gauges.
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `upper_bounds` strictly increasing and finite (validated by the registry); +Inf is implicit.
  explicit Histogram(std::shared_ptr<const std::vector<double>> upper_bounds);

  // Counts v in the first bucket whose bound is >= v (NaN lands in +Inf only and makes the sum NaN).
  void Observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;        // without +Inf
    std::vector<uint64_t> cumulative_counts;  // upper_bounds.size() + 1 entries; the last is +Inf
    double sum = 0;
    uint64_t count = 0;  // == cumulative_counts.back()
  };
  // Buckets are read one by one, so a snapshot taken during Observe() calls may split an observation
  // between count and sum, but the counts are always cumulative and consistent with `count`.
  Snapshot Snap() const;

 private:
  std::shared_ptr<const std::vector<double>> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative; last is +Inf
  std::atomic<double> sum_{0.0};
};

namespace metrics_internal {

// Orders label-value lists lexicographically; transparent so a lookup need not build a key.
struct LabelsLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                        [](std::string_view x, std::string_view y) { return x < y; });
  }
};

class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, MetricType type, std::vector<std::string> label_names)
      : name_(std::move(name)), help_(std::move(help)), type_(type), label_names_(std::move(label_names)) {}
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Appends this family's HELP, TYPE and sample lines.
  virtual void AppendText(std::string* out) const = 0;
  // Called by Unregister before the family leaves the registry.
  virtual void Retire() {}

 private:
  std::string name_;
  std::string help_;
  MetricType type_;
  std::vector<std::string> label_names_;
};

}  // namespace metrics_internal

// A named set of children of type T (Counter, Gauge or Histogram), one per label-value list.
template <typename T>
class MetricFamily final : public metrics_internal::FamilyBase {
 public:
  // Created only by MetricsRegistry; public for make_shared.
  MetricFamily(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
               std::shared_ptr<const std::vector<double>> bounds);

  // The child for these label values, created at 0 on first use.
  std::shared_ptr<T> WithLabels(std::initializer_list<std::string_view> values) EXCLUDES(mu_) {
    return Lookup(std::span<const std::string_view>(values.begin(), values.size()));
  }
  std::shared_ptr<T> WithLabels(const std::vector<std::string>& values) EXCLUDES(mu_) {
    return Lookup(std::span<const std::string>(values));
  }
  // The only child of a family without labels.
  std::shared_ptr<T> Get() EXCLUDES(mu_) { return WithLabels({}); }

  // Drops one child (its series disappears from the next scrape); false if it did not exist.
  bool Remove(std::initializer_list<std::string_view> values) EXCLUDES(mu_) {
    return Erase(std::span<const std::string_view>(values.begin(), values.size()));
  }
  bool Remove(const std::vector<std::string>& values) EXCLUDES(mu_) {
    return Erase(std::span<const std::string>(values));
  }
  // Drops every child.
  void Clear() EXCLUDES(mu_);
  size_t size() const EXCLUDES(mu_);

  void AppendText(std::string* out) const override EXCLUDES(mu_);

 private:
  template <typename S>
  std::shared_ptr<T> Lookup(std::span<const S> values) EXCLUDES(mu_);
  template <typename S>
  bool Erase(std::span<const S> values) EXCLUDES(mu_);

  const std::shared_ptr<const std::vector<double>> bounds_;  // histograms only; set at construction
  mutable Mutex mu_;
  std::map<std::vector<std::string>, std::shared_ptr<T>, metrics_internal::LabelsLess> children_ GUARDED_BY(mu_);
};

using CounterFamily = MetricFamily<Counter>;
using GaugeFamily = MetricFamily<Gauge>;
using HistogramFamily = MetricFamily<Histogram>;

extern template class MetricFamily<Counter>;
extern template class MetricFamily<Gauge>;
extern template class MetricFamily<Histogram>;

// One sample produced by a callback family at scrape time.
struct CallbackSample {
  std::vector<std::string> label_values;  // in label-name order
  double value = 0;
};
using MetricsCallback = std::function<std::vector<CallbackSample>()>;

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Result<CounterFamily*> AddCounter(const std::string& name, const std::string& help,
                                    const std::vector<std::string>& label_names = {}) EXCLUDES(mu_);
  Result<GaugeFamily*> AddGauge(const std::string& name, const std::string& help,
                                const std::vector<std::string>& label_names = {}) EXCLUDES(mu_);
  // `buckets`: strictly increasing finite upper bounds; a trailing +Inf is accepted and dropped.
  Result<HistogramFamily*> AddHistogram(const std::string& name, const std::string& help,
                                        const std::vector<std::string>& label_names = {},
                                        const std::vector<double>& buckets = DefaultHistogramBuckets())
      EXCLUDES(mu_);
  // A counter or gauge family whose samples `fn` produces at every Serialize().
  Status AddCallback(MetricType type, const std::string& name, const std::string& help,
                     const std::vector<std::string>& label_names, MetricsCallback fn) EXCLUDES(mu_);

  // Removes a family of any kind; NotFound if absent. Pointers to it dangle afterwards.
  Status Unregister(const std::string& name) EXCLUDES(mu_);

  std::string Serialize() const EXCLUDES(mu_);

 private:
  Status Register(std::shared_ptr<metrics_internal::FamilyBase> family) EXCLUDES(mu_);

  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<metrics_internal::FamilyBase>, std::less<>> families_ GUARDED_BY(mu_);
  // Sample or family name -> owner family.
  std::map<std::string, std::string, std::less<>> taken_names_ GUARDED_BY(mu_);
};

// Exposition helpers, public for tests and for anyone writing the format by hand.
Status ValidateMetricName(std::string_view name, MetricType type);
Status ValidateLabelNames(const std::vector<std::string>& label_names, MetricType type);
std::string FormatMetricValue(double v);            // "1.5", "1e-09", "+Inf", "-Inf", "NaN"
std::string EscapeLabelValue(std::string_view v);   // \ " newline escaped; invalid UTF-8 -> U+FFFD
std::string EscapeHelp(std::string_view help);      // \ newline escaped
std::string SanitizeUtf8(std::string_view s);       // each invalid byte -> U+FFFD

}  // namespace eft
