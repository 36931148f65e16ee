// Which device a rank computes on (training.device).
//
//   auto  the GPU when this LibTorch was built with CUDA and a GPU is visible, else the CPU
//   cuda  a GPU, or an error saying why there is none
//   cpu   the CPU, even on a GPU node
//
// With one GPU visible (eft-worker gives every rank its own through CUDA_VISIBLE_DEVICES) a rank
// uses cuda:0; with several (torchrun, srun, `eft-train train --nproc N` on a multi-GPU machine)
// it uses cuda:LOCAL_RANK, which must then exist.
#pragma once

#include <string>

#include <c10/core/Device.h>

#include "common/status.h"

namespace eft::trainer {

// GPUs this process sees; 0 when LibTorch has no CUDA.
int VisibleCudaDevices();

// The decision itself, from the request and what the process sees (tests pass their own).
// InvalidArgument for an unknown request; FailedPrecondition for cuda without a usable GPU.
Result<c10::Device> ChooseDevice(const std::string& requested, int cuda_devices, int local_rank);

}  // namespace eft::trainer
