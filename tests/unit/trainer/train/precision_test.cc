// training.precision: auto's choice from the hardware, the CPU feature detection against the kernel's
// own view (/proc/cpuinfo), the agreement of several ranks, and the measured bf16 cost.
#include "trainer/train/precision.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "../parallel/rank_threads.h"
#include "tests/util/cpu_flags.h"
#include "trainer/parallel/communicator.h"

namespace eft::trainer {
namespace {

const c10::Device kCpu(c10::kCPU), kGpu(c10::kCUDA, 0);

PrecisionChoice Chosen(const std::string& requested, const c10::Device& device, bool native) {
  auto c = ChoosePrecision(requested, device, native, "the hardware");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : PrecisionChoice{};
}

TEST(ChoosePrecision, AutoIsBf16WhereNativeAndFp32Elsewhere) {
  EXPECT_EQ(Chosen("auto", kGpu, true).dtype, at::kBFloat16);
  EXPECT_EQ(Chosen("auto", kCpu, true).dtype, at::kBFloat16);
  const PrecisionChoice emulated = Chosen("auto", kCpu, false);
  EXPECT_EQ(emulated.dtype, at::kFloat);
  EXPECT_EQ(emulated.name, "fp32");
  EXPECT_FALSE(emulated.emulated_bf16);
  // The start-up line says why, and how to get bf16 anyway.
  EXPECT_NE(emulated.reason.find("does not compute bf16 natively"), std::string::npos) << emulated.reason;
  EXPECT_NE(emulated.reason.find("precision: bf16"), std::string::npos) << emulated.reason;
  EXPECT_EQ(Chosen("", kCpu, true).name, "bf16");  // unset (a config built without the spec) is auto
}

TEST(ChoosePrecision, AnExplicitChoiceIsKeptAndEmulatedBf16IsFlagged) {
  EXPECT_EQ(Chosen("fp32", kGpu, true).dtype, at::kFloat);
  EXPECT_EQ(Chosen("bf16", kCpu, true).dtype, at::kBFloat16);
  EXPECT_FALSE(Chosen("bf16", kCpu, true).emulated_bf16);
  const PrecisionChoice slow = Chosen("bf16", kCpu, false);
  EXPECT_EQ(slow.dtype, at::kBFloat16);
  EXPECT_TRUE(slow.emulated_bf16);
  EXPECT_EQ(slow.reason, "as set");
}

TEST(ChoosePrecision, RefusesUnknownNames) {
  auto c = ChoosePrecision("fp16", kCpu, true, "x");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("auto, bf16, fp32"), std::string::npos) << c.status();
}

// The kernel lists the features it enabled (XSAVE state included) as "flags"; cpuid through libgcc
// must agree with it.
TEST(DetectCpuBf16, AgreesWithProcCpuinfo) {
  ::unsetenv("ATEN_CPU_CAPABILITY");
  ::unsetenv("ONEDNN_MAX_CPU_ISA");
  const std::set<std::string> flags = eft::testing::KernelCpuFlags();
  if (flags.empty()) GTEST_SKIP() << "no flags in /proc/cpuinfo";
  const CpuBf16Support s = DetectCpuBf16();
  EXPECT_EQ(s.avx512_bf16, flags.count("avx512_bf16") == 1);
  EXPECT_EQ(s.amx_bf16, flags.count("amx_bf16") == 1);
  std::cout << "this CPU: " << s.describe() << "\n";
}

// LibTorch held below the CPU's bf16 instructions emulates bf16 whatever the CPU has.
TEST(DetectCpuBf16, LibTorchHeldBelowBf16IsNotNative) {
  // Each case sets one variable: the other must not hold LibTorch back already (a run of the suite
  // under ATEN_CPU_CAPABILITY=avx2, say, to stand in for an AVX2-only CPU).
  ::unsetenv("ATEN_CPU_CAPABILITY");
  ::unsetenv("ONEDNN_MAX_CPU_ISA");
  const bool has = DetectCpuBf16().avx512_bf16 || DetectCpuBf16().amx_bf16;
  struct Case {
    const char* var;
    const char* value;
    bool held;
  };
  for (const Case& c : {Case{"ONEDNN_MAX_CPU_ISA", "AVX2", true}, Case{"ONEDNN_MAX_CPU_ISA", "avx512_core", true},
                        Case{"ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16", false}, Case{"ONEDNN_MAX_CPU_ISA", "ALL", false},
                        Case{"ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX", false}, Case{"ATEN_CPU_CAPABILITY", "avx2", true},
                        Case{"ATEN_CPU_CAPABILITY", "default", true}, Case{"ATEN_CPU_CAPABILITY", "avx512", false}}) {
    ::setenv(c.var, c.value, 1);
    const CpuBf16Support s = DetectCpuBf16();
    ::unsetenv(c.var);
    EXPECT_EQ(!s.held_by.empty(), c.held) << c.var << "=" << c.value;
    EXPECT_EQ(s.native(), has && !c.held) << c.var << "=" << c.value;
    if (c.held && has) {
      EXPECT_NE(s.describe().find(std::string("held back by ") + c.var), std::string::npos) << s.describe();
    }
  }
}

TEST(MeasureCpuBf16Slowdown, IsAPositiveRatio) {
  const double r = MeasureCpuBf16Slowdown();
  EXPECT_GT(r, 0);
  EXPECT_LT(r, 1000);
  std::cout << "bf16 / fp32 time of a [256x512] x [512x512] product here: " << r << " ("
            << DetectCpuBf16().describe() << ")\n";
}

GpuProperties Gpu(const std::string& name, int capability) {
  GpuProperties g;
  g.name = name;
  g.capability = capability;
  return g;
}

TEST(AgreePrecision, OneRankFollowsItsHardware) {
  RendezvousOptions o;
  auto comm = CreateCpuCommunicator(o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  CpuBf16Support native, emulated;
  native.amx_bf16 = true;
  const GpuProperties h100 = Gpu("NVIDIA H100 80GB HBM3", 90), none;
  EXPECT_EQ(AgreePrecision("auto", kCpu, native, none, comm->get())->dtype, at::kBFloat16);
  EXPECT_EQ(AgreePrecision("auto", kCpu, emulated, none, comm->get())->dtype, at::kFloat);
  EXPECT_EQ(AgreePrecision("auto", kGpu, emulated, h100, comm->get())->dtype, at::kBFloat16);  // the GPU computes
  EXPECT_EQ(AgreePrecision("fp32", kCpu, native, none, comm->get())->dtype, at::kFloat);
}

// GPUs older than compute capability 8.0 (V100, T4) emulate bf16: auto is fp32 there, and an explicit
// bf16 is flagged (rank 0 warns).
TEST(AgreePrecision, AGpuWithoutNativeBf16GetsFp32) {
  auto comm = CreateCpuCommunicator(RendezvousOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status();
  const CpuBf16Support cpu;
  for (const auto& [gpu, bf16] : {std::pair{Gpu("Tesla T4", 75), false}, {Gpu("Tesla V100-SXM2-16GB", 70), false},
                                  {Gpu("NVIDIA A100-SXM4-80GB", 80), true}, {Gpu("NVIDIA L4", 89), true}}) {
    auto c = AgreePrecision("auto", kGpu, cpu, gpu, comm->get());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->dtype, bf16 ? at::kBFloat16 : at::kFloat) << gpu.describe();
    const std::string said = "auto: the GPU (" + gpu.describe() + ")" + (bf16 ? " computes" : " does not compute");
    EXPECT_EQ(c->reason.rfind(said, 0), 0u) << c->reason;
    auto set = AgreePrecision("bf16", kGpu, cpu, gpu, comm->get());
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_EQ(set->dtype, at::kBFloat16);
    EXPECT_EQ(set->emulated_bf16, !bf16) << gpu.describe();
  }
  EXPECT_EQ(Gpu("Tesla T4", 75).describe(), "Tesla T4, compute capability 7.5");
  // A build without the CUDA headers cannot ask: a GPU is taken to have bf16, as eft's target GPUs do.
  const GpuProperties unknown;
  EXPECT_EQ(AgreePrecision("auto", kGpu, cpu, unknown, comm->get())->dtype, at::kBFloat16);
  EXPECT_EQ(unknown.describe(), "a GPU, compute capability unknown");
}

// Over real Gloo: auto is bf16 only when every rank has it natively, so all ranks compute alike.
TEST(AgreePrecision, AutoIsFp32OnEveryRankWhenOneRankLacksNativeBf16) {
  for (int without : {-1, 0, 2}) {  // which rank lacks it; -1: none
    std::vector<at::ScalarType> chosen(3);
    RunRanks(3, [&](Communicator& comm) {
      CpuBf16Support cpu;
      cpu.avx512_bf16 = comm.rank() != without;
      auto c = AgreePrecision("auto", kCpu, cpu, GpuProperties{}, &comm);
      ASSERT_TRUE(c.ok()) << c.status();
      chosen[comm.rank()] = c->dtype;
      if (without >= 0 && comm.rank() != without) {
        EXPECT_NE(c->reason.find("another rank's hardware"), std::string::npos) << c->reason;
      }
    });
    for (at::ScalarType d : chosen) EXPECT_EQ(d, without < 0 ? at::kBFloat16 : at::kFloat) << "without " << without;
  }
}

}  // namespace
}  // namespace eft::trainer
