// The peak MFU is measured against (trainer/train/peak_flops.h): the GPUs' names as their drivers
// report them (torch.cuda.get_device_name), the figures of NVIDIA's datasheets halved (dense).
#include "trainer/train/peak_flops.h"

#include <gtest/gtest.h>

namespace eft::trainer {
namespace {

TEST(KnownDensePeakTflops, NamesTheDriversReport) {
  struct Case {
    const char* name;
    double tflops;
  };
  const Case cases[] = {
      {"NVIDIA H100 80GB HBM3", 989.5},  // SXM5
      {"NVIDIA H100 PCIe", 756.5},
      {"NVIDIA H100 NVL", 835.5},
      {"NVIDIA H800", 989.5},
      {"NVIDIA H200", 989.5},
      {"NVIDIA H200 NVL", 835.5},
      {"NVIDIA GH200 480GB", 989.5},
      {"NVIDIA A100-SXM4-80GB", 312},
      {"NVIDIA A100-PCIE-40GB", 312},
      {"NVIDIA A100 80GB PCIe", 312},
      {"NVIDIA A800-SXM4-80GB", 312},
      {"NVIDIA B200", 2250},
      {"NVIDIA L40S", 362.05},
      {"NVIDIA L4", 121},
      {"NVIDIA A10", 125},
      {"nvidia h100 80gb hbm3", 989.5},  // case does not matter
  };
  for (const Case& c : cases) {
    std::optional<double> bf16 = KnownDensePeakTflops(c.name, c10::kBFloat16);
    ASSERT_TRUE(bf16.has_value()) << c.name;
    EXPECT_EQ(*bf16, c.tflops) << c.name;
    EXPECT_EQ(KnownDensePeakTflops(c.name, c10::kHalf), bf16) << c.name << ": fp16 runs at bf16's rate";
    EXPECT_FALSE(KnownDensePeakTflops(c.name, c10::kFloat).has_value()) << c.name << ": no one fp32 figure";
  }
}

TEST(KnownDensePeakTflops, UnknownNamesAndLookAlikesHaveNone) {
  // Whole words only: an A10G is not an A10, an L40 not an L40S or an L4.
  for (const char* name : {"NVIDIA A10G", "NVIDIA L40", "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 4090",
                           "AMD Instinct MI300X", "", "H1000", "NVIDIA A1000"}) {
    EXPECT_FALSE(KnownDensePeakTflops(name, c10::kBFloat16).has_value()) << name;
  }
}

TEST(ChoosePeakFlops, TheFlagWinsThenTheGpuThenNone) {
  const c10::Device gpu(c10::kCUDA, 0), cpu(c10::kCPU);
  PeakFlops given = ChoosePeakFlops(500, gpu, "NVIDIA H100 80GB HBM3", c10::kBFloat16);
  EXPECT_EQ(given.tflops, 500);
  EXPECT_EQ(given.source, "--peak-tflops");
  EXPECT_EQ(ChoosePeakFlops(0.5, cpu, "", c10::kFloat).tflops, 0.5) << "a CPU's peak when the user gives one";

  PeakFlops known = ChoosePeakFlops(0, gpu, "NVIDIA H100 80GB HBM3", c10::kBFloat16);
  EXPECT_EQ(known.tflops, 989.5);
  EXPECT_EQ(known.source, "NVIDIA H100 80GB HBM3, bf16 dense");

  PeakFlops unknown = ChoosePeakFlops(0, gpu, "NVIDIA GeForce RTX 4090", c10::kBFloat16);
  EXPECT_EQ(unknown.tflops, 0);
  EXPECT_EQ(unknown.source, "no known bf16 peak for NVIDIA GeForce RTX 4090; --peak-tflops (EFT_PEAK_TFLOPS) sets one");
  PeakFlops fp32 = ChoosePeakFlops(0, gpu, "NVIDIA H100 80GB HBM3", c10::kFloat);
  EXPECT_EQ(fp32.tflops, 0);
  EXPECT_NE(fp32.source.find("no known fp32 peak"), std::string::npos) << fp32.source;

  PeakFlops on_cpu = ChoosePeakFlops(0, cpu, "", c10::kBFloat16);
  EXPECT_EQ(on_cpu.tflops, 0);
  EXPECT_EQ(on_cpu.source, "") << "a CPU rank says nothing about MFU unless asked";
}

}  // namespace
}  // namespace eft::trainer
