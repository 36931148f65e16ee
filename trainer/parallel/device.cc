#include "trainer/parallel/device.h"

#include <ATen/Context.h>

namespace eft::trainer {

int VisibleCudaDevices() {
  if (!at::hasCUDA()) return 0;
  return static_cast<int>(at::getNumGPUs());
}

Result<c10::Device> ChooseDevice(const std::string& requested, int cuda_devices, int local_rank) {
  if (requested != "auto" && requested != "cpu" && requested != "cuda") {
    return Status::InvalidArgument("spec.training.device: '" + requested + "' is not one of auto, cpu, cuda");
  }
  if (requested == "cpu" || (requested == "auto" && cuda_devices == 0)) return c10::Device(c10::kCPU);
  if (cuda_devices == 0) {
    return Status::FailedPrecondition(
        "spec.training.device is cuda, but " +
        std::string(at::hasCUDA() ? "no GPU is visible (CUDA_VISIBLE_DEVICES, driver)"
                                  : "this eft-train was built against a LibTorch without CUDA (docs/gpu.md)"));
  }
  if (cuda_devices == 1) return c10::Device(c10::kCUDA, 0);
  if (local_rank >= cuda_devices) {
    return Status::FailedPrecondition("local rank " + std::to_string(local_rank) + " needs GPU " +
                                      std::to_string(local_rank) + ", but only " + std::to_string(cuda_devices) +
                                      " are visible: start at most one rank per GPU");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

}  // namespace eft::trainer
