// What the trainer needs to know about its GPU: the CUDA caching allocator's peaks (the memory
// report, trainer/train: ReportMemory), its name (the MFU's peak, trainer/train/peak_flops.h) and
// compute capability (the precision, the fused kernels).
// Here, below everything, because it needs the CUDA headers this layer is built with.
#pragma once

#include <cstdint>
#include <string>

#include <c10/core/Device.h>

namespace eft::trainer {

struct GpuMemoryPeak {
  int64_t allocated = -1;  // bytes, the most held by tensors at once (torch.cuda.max_memory_allocated)
  int64_t reserved = -1;   // bytes, the most the allocator held from the driver (max_memory_reserved)
};
// Since the process started, on `device`; -1 each for a CPU device or a build without CUDA.
GpuMemoryPeak PeakGpuMemory(const c10::Device& device);


// What decides which precision and kernels a GPU gets.
struct GpuProperties {
  std::string name;     // as the driver names it ("NVIDIA H100 80GB HBM3", torch.cuda.get_device_name)
  int capability = -1;  // compute capability, major * 10 + minor (90: H100); -1: unknown
  int64_t total_memory = -1;  // bytes; -1: unknown
  // bf16 in hardware (tensor cores, conversions) from compute capability 8.0 (A100) on; older GPUs
  // (V100 7.0, T4 7.5) emulate it. Unknown (a build without the CUDA headers): assumed, as every
  // GPU eft is meant for has it.
  bool bf16() const { return capability < 0 || capability >= 80; }
  // "NVIDIA H100 80GB HBM3, compute capability 9.0"
  std::string describe() const;
};
// A CPU device, or a build without the CUDA headers (no fused kernels either): name empty,
// capability -1. Read from the driver once per device and kept (the fused kernels ask per layer).
GpuProperties GetGpuProperties(const c10::Device& device);

}  // namespace eft::trainer
