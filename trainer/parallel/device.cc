#include "trainer/parallel/device.h"

#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

#include "trainer/kernels/gpu_info.h"
#include "trainer/kernels/kernels.h"
#include "trainer/parallel/communicator.h"

#include <cstdlib>

namespace eft::trainer {

int VisibleCudaDevices() {
  if (!at::hasCUDA()) return 0;
  return static_cast<int>(at::getNumGPUs());
}

bool CudaBuild() { return c10::impl::hasDeviceGuardImpl(c10::kCUDA); }

std::string BuildAndDevices() {
  std::string s = "LibTorch ";
  s += TORCH_VERSION;
  s += CudaBuild() ? ", CUDA build: yes" : ", CUDA build: no";
  s += NcclCommunicatorBuilt() ? ", NCCL communicator: yes" : ", NCCL communicator: no";
  s += FusedCudaKernelsBuilt() ? ", fused CUDA kernels: yes" : ", fused CUDA kernels: no";
  const int gpus = VisibleCudaDevices();
  s += ", GPUs visible: " + std::to_string(gpus);
  for (int i = 0; i < gpus; ++i) {
    const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(i));
    const GpuProperties gpu = GetGpuProperties(device);
    s += (i == 0 ? " (" : "; ") + std::string("cuda:") + std::to_string(i) + " " + gpu.describe() +
         (FusedKernelsRunOn(gpu) ? "" : ", without fused kernels") + (i + 1 == gpus ? ")" : "");
  }
  return s;
}

bool GpuAssignedByLauncher() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr) return false;
  const std::string s(v);
  return !s.empty() && s.find(',') == std::string::npos;
}

Result<c10::Device> ChooseDevice(const DeviceRequest& r) {
  if (r.requested != "auto" && r.requested != "cpu" && r.requested != "cuda") {
    return Status::InvalidArgument("spec.training.device: '" + r.requested + "' is not one of auto, cpu, cuda");
  }
  if (r.requested == "cpu") return c10::Device(c10::kCPU);
  std::string why_not;
  if (r.cuda_devices == 0) {
    why_not = CudaBuild() ? "no GPU is visible (CUDA_VISIBLE_DEVICES, driver)"
                          : "this eft-train was built against a LibTorch without CUDA (docs/gpu.md)";
  } else if (r.assigned || r.local_world == 1) {
    return c10::Device(c10::kCUDA, 0);
  } else if (r.local_world <= r.cuda_devices && r.local_rank < r.cuda_devices) {
    // Decided from node-wide facts, so every rank of the node decides the same way.
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(r.local_rank));
  } else if (r.share_gpus) {
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(r.local_rank % r.cuda_devices));
  } else {
    why_not = std::to_string(r.local_world) + " ranks on this node but only " + std::to_string(r.cuda_devices) +
              " GPU" + (r.cuda_devices == 1 ? " is" : "s are") +
              " visible, and NCCL ranks cannot share one (EFT_GPU_COLLECTIVES=gloo lets them, slowly; docs/gpu.md)";
  }
  if (r.requested == "auto") return c10::Device(c10::kCPU);
  return Status::FailedPrecondition("spec.training.device is cuda, but " + why_not);
}

}  // namespace eft::trainer
