// The peak a rank's model FLOPs utilisation (MFU) is measured against: --peak-tflops when given, else
// the dense bf16/fp16 tensor-core peak of a GPU eft knows by name (NVIDIA's datasheets: half the
// figure they quote "with sparsity"; docs/gpu.md, "MFU"), else none and no MFU is reported.
// CPUs have no entry: their peak depends on clocks, cores and ISA no name says.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace eft::trainer {

// Dense TFLOP/s of the GPU called `gpu_name` (as the driver names it: "NVIDIA H100 80GB HBM3",
// "NVIDIA A100-SXM4-80GB") computing in `dtype`; nullopt for an unknown GPU or a dtype other than
// bf16/fp16 (fp32 matrix products run on CUDA cores or TF32 by settings, no one figure fits).
std::optional<double> KnownDensePeakTflops(std::string_view gpu_name, c10::ScalarType dtype);

struct PeakFlops {
  double tflops = 0;   // per rank; 0: MFU not reported
  std::string source;  // for the start-up line: "--peak-tflops", "NVIDIA H100 80GB HBM3, bf16 dense",
                       // or why there is none
};

// `flag_tflops` (> 0: given by the user) wins; then the GPU's known peak; a CPU gets none, silently.
PeakFlops ChoosePeakFlops(double flag_tflops, const c10::Device& device, const std::string& gpu_name,
                          c10::ScalarType dtype);

}  // namespace eft::trainer
