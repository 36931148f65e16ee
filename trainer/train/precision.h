// Which dtype the model computes in (training.precision).
//
//   auto  bf16 where the hardware computes it natively: GPUs of compute capability 8.0 and later
//         (A100, H100, ...), and CPUs with AVX512-BF16 or AMX-BF16; fp32 elsewhere (older GPUs such
//         as the V100 and T4, other CPUs), where bf16 is emulated and a step is many times slower
//         than in fp32 (docs/benchmarks.md, "bf16 on CPUs")
//   bf16  bf16 everywhere; on hardware without native bf16 the trainer warns once (on a CPU with
//         the cost measured there at start-up)
//   fp32  fp32 everywhere
//
// Master weights, gradients, optimizer state and checkpoints are fp32 in every case. All ranks of a
// job compute in one dtype: `auto` picks bf16 only when every rank has it natively.
#pragma once

#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "common/status.h"
#include "trainer/kernels/gpu_info.h"

namespace eft::trainer {

class Communicator;

// What this CPU offers for bf16 (cpuid, with the OS's support for the AVX-512/AMX state), and whether
// LibTorch has been held below it (ATEN_CPU_CAPABILITY=default|avx2, or a ONEDNN_MAX_CPU_ISA without
// bf16: then its kernels emulate bf16 whatever the CPU has).
struct CpuBf16Support {
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
  std::string held_by;  // e.g. "ONEDNN_MAX_CPU_ISA=AVX2"; empty: not held
  bool native() const { return (avx512_bf16 || amx_bf16) && held_by.empty(); }
  // "AVX512-BF16", "AMX-BF16, AVX512-BF16", "no native bf16", "AVX512-BF16, held back by ATEN_CPU_CAPABILITY=avx2"
  std::string describe() const;
};
// From cpuid and the process environment.
CpuBf16Support DetectCpuBf16();

struct PrecisionChoice {
  at::ScalarType dtype = at::kFloat;
  std::string name;    // bf16 | fp32
  std::string reason;  // for the start-up line: "auto: ..." or "as set"
  // bf16 was asked for on a CPU that emulates it: the caller measures and warns.
  bool emulated_bf16 = false;
};

// The decision: `requested` is auto | bf16 | fp32 (InvalidArgument otherwise); `native_bf16` is whether
// every rank's device computes bf16 natively (a CUDA device, or a CPU whose CpuBf16Support::native()).
Result<PrecisionChoice> ChoosePrecision(const std::string& requested, const c10::Device& device, bool native_bf16,
                                        const std::string& hardware);

// bf16 time over fp32 time of a linear layer's forward and backward products on this CPU, with the
// threads LibTorch has now (well under a second of work): below 1 where bf16 is native, 10 or more
// where it is emulated. What the slow-bf16 warning quotes.
double MeasureCpuBf16Slowdown();

// The run's choice on every rank: this device's hardware (`cpu`: DetectCpuBf16(); `gpu`:
// GetGpuProperties(device), bf16 from compute capability 8.0), and for `auto` with several ranks
// every rank's (one all-reduce, which every rank must make). Rank 0 warns when bf16 is set on
// hardware that emulates it, on a CPU with the slowdown measured there.
Result<PrecisionChoice> AgreePrecision(const std::string& requested, const c10::Device& device,
                                       const CpuBf16Support& cpu, const GpuProperties& gpu, Communicator* comm);

}  // namespace eft::trainer
