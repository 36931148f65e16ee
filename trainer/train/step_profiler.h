// StepProfiler: LibTorch's profiler (Kineto) over a window of optimizer steps, for
// `eft-train train --profile-steps A:B`: every ATen op on the CPU and, on a GPU, every kernel and copy,
// written per rank as a Chrome trace (<dir>/trace.rank<R>.json: Perfetto or chrome://tracing opens
// it; bench/gpu/profile_summary.py sums it by kernel family, docs/benchmarks.md "Where a step's time
// goes"). Each profiled step is one "eft_step <n>" annotation in the trace.
//
// Steps are 1-based, as on the progress line. The first steps include warm-up (allocator growth,
// kernel autotuning): profile later ones.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <ATen/record_function.h>
#include <c10/core/Device.h>

#include "common/status.h"

namespace eft::trainer {

struct ProfileWindow {
  int64_t first = 0, last = 0;  // steps, inclusive; first 0: off
  std::string dir;              // where the traces go
  bool enabled() const { return first > 0; }
};

// "A:B" (steps A to B) or "A" (step A alone), and the directory (created if missing).
Result<ProfileWindow> ParseProfileWindow(const std::string& steps, const std::string& dir);

class StepProfiler {
 public:
  StepProfiler(ProfileWindow window, int rank, c10::Device device);
  ~StepProfiler();

  // Around step `step` (1-based) of the loop.
  void BeforeStep(int64_t step);
  // After the window's last step: waits for the device, then writes the trace. Returns its path
  // there (empty otherwise).
  Result<std::string> AfterStep(int64_t step);

 private:
  ProfileWindow window_;
  int rank_;
  c10::Device device_;
  bool active_ = false;
  std::optional<at::RecordFunction> step_scope_;
};

}  // namespace eft::trainer
