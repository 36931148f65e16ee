// What the trainer reports about its GPU: the CUDA caching allocator's peaks (the memory report,
// trainer/train: ReportMemory) and the device's name (the MFU's peak, trainer/train/peak_flops.h).
// Here, below everything, because it needs the CUDA headers this layer is built with.
#pragma once

#include <cstdint>
#include <string>

#include <c10/core/Device.h>

namespace eft::trainer {

struct GpuMemoryPeak {
  int64_t allocated = -1;  // bytes, the most held by tensors at once (torch.cuda.max_memory_allocated)
  int64_t reserved = -1;   // bytes, the most the allocator held from the driver (max_memory_reserved)
  int64_t total = -1;      // bytes, the device's memory (torch.cuda.get_device_properties().total_memory)
};
// Since the process started, on `device`; -1 each for a CPU device or a build without CUDA.
GpuMemoryPeak PeakGpuMemory(const c10::Device& device);

// The driver's name of `device` ("NVIDIA H100 80GB HBM3", as torch.cuda.get_device_name says); empty
// for a CPU device or a build without CUDA.
std::string GpuName(const c10::Device& device);

}  // namespace eft::trainer
