#include "trainer/kernels/gpu_info.h"

#include <array>
#include <mutex>

#ifdef EFT_WITH_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace eft::trainer {

GpuMemoryPeak PeakGpuMemory(const c10::Device& device) {
  GpuMemoryPeak peak;
#ifdef EFT_WITH_CUDA_KERNELS
  if (device.is_cuda()) {
    using c10::CachingAllocator::StatType;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    peak.allocated = stats.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].peak;
    peak.reserved = stats.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)].peak;
  }
#else
  (void)device;
#endif
  return peak;
}

std::string GpuProperties::describe() const {
  const std::string who = name.empty() ? "a GPU" : name;
  if (capability < 0) return who + ", compute capability unknown";
  return who + ", compute capability " + std::to_string(capability / 10) + "." + std::to_string(capability % 10);
}

GpuProperties GetGpuProperties(const c10::Device& device) {
#ifdef EFT_WITH_CUDA_KERNELS
  if (device.is_cuda()) {
    constexpr int kDevices = 64;  // more than any node has
    static std::array<std::once_flag, kDevices> once;
    static std::array<GpuProperties, kDevices> known;
    const int index = device.index() < 0 ? 0 : device.index();
    TORCH_CHECK(index < kDevices, "GetGpuProperties: device index ", index, " is out of range");
    std::call_once(once[index], [index] {
      const cudaDeviceProp* props = at::cuda::getDeviceProperties(index);
      GpuProperties& p = known[index];
      p.name = props->name;
      p.capability = props->major * 10 + props->minor;
      p.total_memory = static_cast<int64_t>(props->totalGlobalMem);
    });
    return known[index];
  }
#else
  (void)device;
#endif
  return {};
}

}  // namespace eft::trainer
