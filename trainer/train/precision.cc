#include "trainer/train/precision.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <ATen/ATen.h>

#include "common/logging.h"
#include "trainer/parallel/communicator.h"

namespace eft::trainer {

std::string CpuBf16Support::describe() const {
  std::string s = amx_bf16 && avx512_bf16 ? "AMX-BF16, AVX512-BF16"
                  : amx_bf16              ? "AMX-BF16"
                  : avx512_bf16           ? "AVX512-BF16"
                                          : "no native bf16";
  if (!held_by.empty() && (amx_bf16 || avx512_bf16)) s += ", held back by " + held_by;
  return s;
}

CpuBf16Support DetectCpuBf16() {
  CpuBf16Support s;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's cpuid reading also checks that the OS saves the AVX-512 state (XCR0).
  __builtin_cpu_init();
  s.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
#if defined(__clang__) && __clang_major__ < 19
  s.amx_bf16 = false;  // clang knows this name from 19 on; before, it refuses to compile it
#else
  s.amx_bf16 = __builtin_cpu_supports("amx-bf16");
#endif
#endif
  // ATen's vectorised kernels: default and avx2 have no bf16 instructions.
  if (const char* cap = std::getenv("ATEN_CPU_CAPABILITY"); cap != nullptr) {
    const std::string v = cap;
    if (v == "default" || v == "avx2") s.held_by = "ATEN_CPU_CAPABILITY=" + v;
  }
  // oneDNN's matrix products: an ISA cap below AVX512_CORE_BF16 (ALL, *BF16*, *AMX*, AVX10* have it).
  if (const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA"); isa != nullptr && *isa != '\0') {
    std::string v = isa;
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::toupper(ch); });
    if (v != "ALL" && v.find("BF16") == std::string::npos && v.find("AMX") == std::string::npos &&
        v.rfind("AVX10", 0) != 0 && s.held_by.empty()) {
      s.held_by = "ONEDNN_MAX_CPU_ISA=" + std::string(isa);
    }
  }
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
                           : "auto: " + hardware + " does not compute bf16 natively, LibTorch would emulate it many "
                                                   "times slower; set precision: bf16 to use it anyway";
  } else {
    return Status::InvalidArgument("spec.training.precision (\"" + requested + "\") must be one of auto, bf16, fp32");
  }
  c.dtype = c.name == "bf16" ? at::kBFloat16 : at::kFloat;
  c.emulated_bf16 = c.name == "bf16" && !native_bf16;
  return c;
}

double MeasureCpuBf16Slowdown() {
  // The three products of a linear layer's training step, forward x W^T and backward g W and g^T x, at
  // a small model's projection size ([256 x 512] by [512 x 512]). All three: an emulating LibTorch is
  // far slower on some layouts than on others (measured with LibTorch held to AVX2: 2.4x, 35x, 2.3x).
  const at::Tensor x = at::randn({256, 512}), w = at::randn({512, 512}), g = at::randn({256, 512});
  auto best_seconds = [](const at::Tensor& x, const at::Tensor& w, const at::Tensor& g) {
    auto layer_step = [&] {
      at::linear(x, w);
      at::mm(g, w);
      at::mm(g.t(), x);
    };
    layer_step();  // first call: kernel selection and scratch buffers
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      layer_step();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double fp32 = best_seconds(x, w, g);
  const at::ScalarType bf16_type = at::kBFloat16;
  const double bf16 = best_seconds(x.to(bf16_type), w.to(bf16_type), g.to(bf16_type));
  return bf16 / std::max(fp32, 1e-9);
}

Result<PrecisionChoice> AgreePrecision(const std::string& requested, const c10::Device& device,
                                       const CpuBf16Support& cpu, const GpuProperties& gpu, Communicator* comm) {
  const bool native_here = device.is_cuda() ? gpu.bf16() : cpu.native();
  bool native_everywhere = native_here;
  if ((requested == "auto" || requested.empty()) && comm->world() > 1) {
    at::Tensor without = at::full({1}, native_here ? 0.0f : 1.0f);  // ranks lacking native bf16
    comm->AllReduceSum(without);
    native_everywhere = without.item<float>() == 0;
  }
  std::string hardware = device.is_cuda() ? "the GPU (" + gpu.describe() + ")" : "this CPU (" + cpu.describe() + ")";
  if (native_here && !native_everywhere) hardware = "another rank's hardware";
  EFT_ASSIGN_OR_RETURN(PrecisionChoice choice, ChoosePrecision(requested, device, native_everywhere, hardware));
  if (choice.emulated_bf16 && comm->rank() == 0 && device.is_cuda()) {
    EFT_LOG(WARNING) << "precision bf16 on a GPU without native bf16 (" << gpu.describe()
                     << ": bf16 is native from compute capability 8.0): its products are emulated and slower "
                     << "than fp32 there. precision: auto (the default) or fp32 computes in fp32.";
  } else if (choice.emulated_bf16 && comm->rank() == 0) {
    char slowdown[32];
    std::snprintf(slowdown, sizeof(slowdown), "%.1f", MeasureCpuBf16Slowdown());
    EFT_LOG(WARNING) << "precision bf16 on a CPU that does not compute it natively (" << cpu.describe()
                     << "): LibTorch emulates it, and a bf16 matrix product took " << slowdown
                     << "x the time of fp32 on this CPU just now; training will be slower by a similar factor. "
                     << "precision: auto (the default) or fp32 computes in fp32 here.";
  }
  return choice;
}

}  // namespace eft::trainer
