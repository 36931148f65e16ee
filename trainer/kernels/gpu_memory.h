// The CUDA caching allocator's statistics for the memory reports (trainer/train: ReportMemory). Here,
// below everything, because it needs the CUDA headers this layer is built with.
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

namespace eft::trainer {

struct GpuMemoryPeak {
  int64_t allocated = -1;  // bytes, the most held by tensors at once (torch.cuda.max_memory_allocated)
  int64_t reserved = -1;   // bytes, the most the allocator held from the driver (max_memory_reserved)
};
// Since the process started, on `device`; -1 each for a CPU device or a build without CUDA.
GpuMemoryPeak PeakGpuMemory(const c10::Device& device);

}  // namespace eft::trainer
