#include "trainer/train/peak_flops.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace eft::trainer {
namespace {

// The name's words, upper-case, split at spaces and dashes: "NVIDIA A100-SXM4-80GB" -> NVIDIA, A100,
// SXM4, 80GB. Whole words, so "A10" is not found in "A100" nor "L4" in "L40S".
std::vector<std::string> Words(std::string_view name) {
  std::vector<std::string> words(1);
  for (char ch : name) {
    if (ch == ' ' || ch == '-' || ch == '_') {
      if (!words.back().empty()) words.emplace_back();
    } else {
      words.back() += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

std::optional<double> KnownDensePeakTflops(std::string_view gpu_name, c10::ScalarType dtype) {
  if (dtype != c10::kBFloat16 && dtype != c10::kHalf) return std::nullopt;
  const std::vector<std::string> w = Words(gpu_name);
  auto has = [&](std::string_view word) { return std::find(w.begin(), w.end(), word) != w.end(); };
  // Dense bf16/fp16 tensor TFLOP/s, half of each datasheet's "with sparsity" figure.
  if (has("GH200")) return 989.5;                               // Grace Hopper: an H100/H200 GPU
  if (has("H200")) return has("NVL") ? 835.5 : 989.5;           // H200 NVL 1,671 / SXM 1,979
  if (has("H100") || has("H800")) {                             // H800: an H100 with less NVLink
    if (has("PCIE")) return 756.5;                              // 1,513
    if (has("NVL")) return 835.5;                               // 1,671
    return 989.5;                                               // SXM ("80GB HBM3"): 1,979
  }
  if (has("A100") || has("A800")) return 312;                   // SXM and PCIe alike: 624
  if (has("B200")) return 2250;                                 // HGX B200: 36 PFLOPS for 8 GPUs
  if (has("L40S")) return 362.05;                               // 733
  if (has("L4")) return 121;                                    // 242
  if (has("A10")) return 125;                                   // 250 (not the A10G, another clock)
  return std::nullopt;
}

PeakFlops ChoosePeakFlops(double flag_tflops, const c10::Device& device, const std::string& gpu_name,
                          c10::ScalarType dtype) {
  if (flag_tflops > 0) return {flag_tflops, "--peak-tflops"};
  if (!device.is_cuda()) return {};
  const std::string dtype_name = dtype == c10::kBFloat16 ? "bf16" : dtype == c10::kHalf ? "fp16" : "fp32";
  const std::string name = gpu_name.empty() ? "this GPU" : gpu_name;
  if (std::optional<double> peak = KnownDensePeakTflops(gpu_name, dtype)) {
    return {*peak, name + ", " + dtype_name + " dense"};
  }
  return {0, "no known " + dtype_name + " peak for " + name + "; --peak-tflops (EFT_PEAK_TFLOPS) sets one"};
}

}  // namespace eft::trainer
