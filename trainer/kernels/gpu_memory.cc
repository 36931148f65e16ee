#include "trainer/kernels/gpu_memory.h"

#ifdef EFT_WITH_CUDA_KERNELS
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

}  // namespace eft::trainer
