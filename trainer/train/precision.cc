#include "trainer/train/precision.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <ATen/ATen.h>

#include "common/logging.h"
#include "trainer/parallel/communicator.h"

namespace eft::trainer {

std::string CpuBf16Support::describe() const {
  if (amx_bf16 && avx512_bf16) return "AMX-BF16, AVX512-BF16";
  if (amx_bf16) return "AMX-BF16";
  if (avx512_bf16) return "AVX512-BF16";
  return "no native bf16";
}

CpuBf16Support DetectCpuBf16() {
  CpuBf16Support s;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's cpuid reading also checks that the OS saves the AVX-512 state (XCR0).
  __builtin_cpu_init();
  s.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  s.amx_bf16 = __builtin_cpu_supports("amx-bf16");
#endif
  return s;
}

Result<PrecisionChoice> ChoosePrecision(const std::string& requested, const c10::Device& device, bool native_bf16,
                                        const std::string& hardware) {
  PrecisionChoice c;
  if (requested == "fp32" || requested == "bf16") {
    c.name = requested;
    c.reason = "as set";
  } else if (requested == "auto" || requested.empty()) {
    c.name = native_bf16 ? "bf16" : "fp32";
    c.reason = native_bf16 ? "auto: " + hardware + " computes bf16 natively"
                           : "auto: " + hardware + " has no native bf16, which LibTorch would emulate many times "
                                                   "slower; set precision: bf16 to use it anyway";
  } else {
    return Status::InvalidArgument("spec.training.precision (\"" + requested + "\") must be one of auto, bf16, fp32");
  }
  c.dtype = c.name == "bf16" ? at::kBFloat16 : at::kFloat;
  c.emulated_bf16 = c.name == "bf16" && device.is_cpu() && !native_bf16;
  return c;
}

double MeasureCpuBf16Slowdown() {
  // A layer-sized product: [256 x 512] by [512 x 512], the shape class of a small model's projections.
  const at::Tensor x = at::randn({256, 512}), w = at::randn({512, 512});
  auto best_seconds = [](const at::Tensor& a, const at::Tensor& b) {
    at::linear(a, b);  // first call: kernel selection and scratch buffers
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      at::linear(a, b);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double fp32 = best_seconds(x, w);
  const double bf16 = best_seconds(x.to(at::kBFloat16), w.to(at::kBFloat16));
  return bf16 / std::max(fp32, 1e-9);
}

Result<PrecisionChoice> AgreePrecision(const std::string& requested, const c10::Device& device,
                                       const CpuBf16Support& cpu, Communicator* comm) {
  const bool native_here = device.is_cuda() || cpu.native();
  bool native_everywhere = native_here;
  if ((requested == "auto" || requested.empty()) && comm->world() > 1) {
    at::Tensor without = at::full({1}, native_here ? 0.0f : 1.0f);  // ranks lacking native bf16
    comm->AllReduceSum(without);
    native_everywhere = without.item<float>() == 0;
  }
  std::string hardware = device.is_cuda() ? "the GPU" : "this CPU (" + cpu.describe() + ")";
  if (native_here && !native_everywhere) hardware = "another rank's CPU";
  EFT_ASSIGN_OR_RETURN(PrecisionChoice choice, ChoosePrecision(requested, device, native_everywhere, hardware));
  if (choice.emulated_bf16 && comm->rank() == 0) {
    char slowdown[32];
    std::snprintf(slowdown, sizeof(slowdown), "%.1f", MeasureCpuBf16Slowdown());
    EFT_LOG(WARNING) << "precision bf16 on a CPU without native bf16 (no AVX512-BF16 or AMX-BF16): LibTorch emulates "
                     << "it, and a bf16 matrix product took " << slowdown << "x the time of fp32 on this CPU just "
                     << "now; training will be about that much slower. precision: auto (the default) or fp32 "
                     << "computes in fp32 here.";
  }
  return choice;
}

}  // namespace eft::trainer
