#include "trainer/train/step_profiler.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "common/logging.h"

namespace eft::trainer {
namespace {

using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

std::optional<int64_t> ParseStep(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 12) {
    return std::nullopt;
  }
  const int64_t v = std::atoll(text.c_str());
  if (v < 1) return std::nullopt;
  return v;
}

std::set<ActivityType> Activities(c10::Device device) {
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  return activities;
}

}  // namespace

Result<ProfileWindow> ParseProfileWindow(const std::string& steps, const std::string& dir) {
  ProfileWindow w;
  if (steps.empty()) return w;
  const size_t colon = steps.find(':');
  const std::optional<int64_t> first = ParseStep(steps.substr(0, colon));
  const std::optional<int64_t> last = colon == std::string::npos ? first : ParseStep(steps.substr(colon + 1));
  if (!first || !last || *last < *first) {
    return Status::InvalidArgument("--profile-steps \"" + steps +
                                   "\": give A:B (steps A to B, 1 <= A <= B) or A (one step), e.g. 5:7");
  }
  w.first = *first;
  w.last = *last;
  w.dir = dir.empty() ? "." : dir;
  std::error_code ec;
  std::filesystem::create_directories(w.dir, ec);
  if (ec) return Status::IoError("--profile-dir " + w.dir + ": " + ec.message());
  return w;
}

StepProfiler::StepProfiler(ProfileWindow window, int rank, c10::Device device)
    : window_(std::move(window)), rank_(rank), device_(device) {
  // Set up ahead, so the first profiled step does not pay for Kineto's initialisation.
  if (window_.enabled()) torch::autograd::profiler::prepareProfiler(ProfilerConfig(ProfilerState::KINETO), Activities(device_));
}

StepProfiler::~StepProfiler() {
  step_scope_.reset();
  if (active_) torch::autograd::profiler::disableProfiler();
}

void StepProfiler::BeforeStep(int64_t step) {
  if (!window_.enabled() || step < window_.first || step > window_.last) return;
  if (step == window_.first) {
    torch::autograd::profiler::enableProfiler(ProfilerConfig(ProfilerState::KINETO, /*report_input_shapes=*/true),
                                              Activities(device_));
    active_ = true;
  }
  step_scope_.emplace(at::RecordScope::USER_SCOPE);
  if (step_scope_->isActive()) step_scope_->before("eft_step " + std::to_string(step));
}

Result<std::string> StepProfiler::AfterStep(int64_t step) {
  if (!active_ || step < window_.first || step > window_.last) return std::string();
  // The step's kernels may still be running: the annotation and the trace must cover them.
  if (device_.is_cuda()) c10::impl::getDeviceGuardImpl(device_.type())->synchronizeDevice(device_.index());
  step_scope_.reset();  // ends the step's annotation
  if (step < window_.last) return std::string();
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result = torch::autograd::profiler::disableProfiler();
  active_ = false;
  const std::string path = window_.dir + "/trace.rank" + std::to_string(rank_) + ".json";
  try {
    result->save(path);
  } catch (const std::exception& e) {
    return Status::IoError("writing the profile " + path + ": " + e.what());
  }
  EFT_LOG(INFO) << "profile of steps " << window_.first << "-" << window_.last << " written to " << path
                << " (bench/gpu/profile_summary.py " << path << ")";
  return path;
}

}  // namespace eft::trainer
