#include "controller/loss_history.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace eft::controller {

LossSeries::LossSeries(size_t cap) : cap_(std::max<size_t>(cap, 2)) {}

LossSeries LossSeries::FromPoints(std::vector<LossPointRecord> points, size_t cap) {
  LossSeries s(cap);
  // The stride is not stored: every point but the newest holds a full stride of reports, so the
  // largest count, rounded up to a power of two, is the stride (1 before any merge).
  int64_t most = 1;
  for (const auto& p : points) most = std::max(most, p.samples);
  while (s.stride_ < most) s.stride_ *= 2;
  s.points_ = std::move(points);
  return s;
}

void LossSeries::Touch(size_t index) {
  dirty_from_ = dirty_ ? std::min(dirty_from_, index) : index;
  dirty_ = true;
}

void LossSeries::MarkSaved() {
  dirty_ = false;
  dirty_from_ = points_.size();
}

void LossSeries::Add(int64_t step, double value) {
  if (!std::isfinite(value)) return;
  if (!points_.empty() && points_.back().step >= step) {
    while (!points_.empty() && points_.back().step >= step) points_.pop_back();
    Touch(points_.size());
  }
  if (!points_.empty() && points_.back().samples < stride_) {
    LossPointRecord& last = points_.back();
    last.value = (last.value * static_cast<double>(last.samples) + value) / static_cast<double>(last.samples + 1);
    last.samples += 1;
    last.step = step;
    Touch(points_.size() - 1);
  } else {
    points_.push_back({step, value, 1});
    Touch(points_.size() - 1);
  }
  if (points_.size() <= cap_) return;
  std::vector<LossPointRecord> merged;
  merged.reserve(points_.size() / 2 + 1);
  for (size_t i = 0; i < points_.size(); i += 2) {
    if (i + 1 == points_.size()) {
      merged.push_back(points_[i]);
      break;
    }
    const LossPointRecord& a = points_[i];
    const LossPointRecord& b = points_[i + 1];
    const int64_t n = a.samples + b.samples;
    merged.push_back({b.step, (a.value * static_cast<double>(a.samples) + b.value * static_cast<double>(b.samples)) /
                                  static_cast<double>(n),
                      n});
  }
  points_ = std::move(merged);
  stride_ *= 2;
  Touch(0);
}

}  // namespace eft::controller
