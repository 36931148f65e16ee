// Which device a rank computes on (training.device).
//
//   auto  its own GPU when this LibTorch was built with CUDA and every local rank can have one,
//         else the CPU
//   cuda  its own GPU, or an error saying why there is none
//   cpu   the CPU, even on a GPU node
//
// A rank owns a GPU when a launcher gave it one (eft-worker sets CUDA_VISIBLE_DEVICES to a single
// device per rank: cuda:0), or when all of a node's GPUs are visible and there are at least as many
// as local ranks (torchrun, srun, `eft-train train --nproc N`: cuda:LOCAL_RANK). Ranks share a GPU
// only when their collectives are staged Gloo (EFT_GPU_COLLECTIVES=gloo: cuda:LOCAL_RANK mod GPUs):
// NCCL refuses two ranks on one device.
#pragma once

#include <string>

#include <c10/core/Device.h>

#include "common/status.h"

namespace eft::trainer {

// GPUs this process sees; 0 when LibTorch has no CUDA.
int VisibleCudaDevices();
// Whether LibTorch's CUDA part is loaded (a CUDA build), GPUs or not.
bool CudaBuild();
// What this eft-train was built with and sees, for `eft-train version` and bug reports:
// "LibTorch 2.11.0, CUDA build: yes, NCCL communicator: yes, fused CUDA kernels: yes, GPUs visible: 0";
// each visible GPU follows with its name and compute capability ("GPUs visible: 1 (cuda:0 NVIDIA H100
// 80GB HBM3, compute capability 9.0)"), and ", without fused kernels" where they do not run on it.
std::string BuildAndDevices();
// True when CUDA_VISIBLE_DEVICES names exactly one device (a launcher assigned this rank its GPU).
bool GpuAssignedByLauncher();

struct DeviceRequest {
  std::string requested = "auto";  // auto | cpu | cuda
  int cuda_devices = 0;            // visible to this process
  bool assigned = false;           // GpuAssignedByLauncher()
  int local_rank = 0;
  int local_world = 1;
  bool share_gpus = false;  // the collectives allow ranks on one GPU (GpuCollectives::kGlooStaged)
};

// The decision itself, from the request and what the process sees (tests pass their own).
// InvalidArgument for an unknown request; FailedPrecondition for cuda without a GPU of its own.
Result<c10::Device> ChooseDevice(const DeviceRequest& r);

}  // namespace eft::trainer
