// training.device: the choice a rank makes from the request and the GPUs it sees, and the
// communicator that follows from it. The CUDA branches are decided from counts, so they are checked
// here too; actually computing on a GPU needs the GPU build (bench/gpu/run.sh).
#include <gtest/gtest.h>

#include <cstdlib>

#include "trainer/parallel/communicator.h"
#include "trainer/parallel/device.h"

namespace eft::trainer {
namespace {

DeviceRequest Request(const std::string& requested, int gpus, int local_rank = 0, int local_world = 1,
                      bool assigned = false) {
  DeviceRequest r;
  r.requested = requested;
  r.cuda_devices = gpus;
  r.local_rank = local_rank;
  r.local_world = local_world;
  r.assigned = assigned;
  return r;
}

c10::Device Chosen(const DeviceRequest& r) {
  auto d = ChooseDevice(r);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : c10::Device(c10::kMeta);
}

TEST(ChooseDevice, AutoIsTheCpuWithoutGpus) { EXPECT_TRUE(Chosen(Request("auto", 0, 3, 4)).is_cpu()); }

TEST(ChooseDevice, CpuStaysOnTheCpuEvenWithGpus) { EXPECT_TRUE(Chosen(Request("cpu", 8, 0, 8)).is_cpu()); }

TEST(ChooseDevice, AGpuTheLauncherAssignedIsDeviceZeroWhateverTheLocalRank) {
  // eft-worker gives each of a node's 8 ranks its own GPU through CUDA_VISIBLE_DEVICES.
  for (const char* request : {"auto", "cuda"}) {
    EXPECT_EQ(Chosen(Request(request, 1, 5, 8, /*assigned=*/true)), c10::Device(c10::kCUDA, 0)) << request;
  }
  // A single rank on a one-GPU machine owns it too.
  EXPECT_EQ(Chosen(Request("auto", 1, 0, 1)), c10::Device(c10::kCUDA, 0));
}

TEST(ChooseDevice, AllOfANodesGpusVisibleAreIndexedByTheLocalRank) {
  // torchrun / srun / --nproc leave all of a node's GPUs visible to every rank.
  EXPECT_EQ(Chosen(Request("auto", 8, 3, 8)), c10::Device(c10::kCUDA, 3));
  EXPECT_EQ(Chosen(Request("cuda", 8, 1, 2)), c10::Device(c10::kCUDA, 1));
}

TEST(ChooseDevice, RanksNeverShareAGpu) {
  // Two local ranks, one GPU nobody assigned: auto trains on the CPU, cuda says why it cannot.
  EXPECT_TRUE(Chosen(Request("auto", 1, 0, 2)).is_cpu());
  EXPECT_TRUE(Chosen(Request("auto", 1, 1, 2)).is_cpu());
  EXPECT_TRUE(Chosen(Request("auto", 2, 2, 4)).is_cpu());
  auto over = ChooseDevice(Request("cuda", 2, 3, 4));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(over.status().message().find("4 ranks on this node but only 2 GPUs are visible"), std::string::npos)
      << over.status();
  EXPECT_NE(over.status().message().find("EFT_GPU_COLLECTIVES=gloo"), std::string::npos) << "the way out is named";
}

TEST(ChooseDevice, StagedGlooRanksShareTheGpusRoundRobin) {
  auto sharing = [](const char* requested, int gpus, int local_rank, int local_world) {
    DeviceRequest r = Request(requested, gpus, local_rank, local_world);
    r.share_gpus = true;
    return Chosen(r);
  };
  // Two ranks on a one-GPU machine (bench/gpu/run.sh's multi-rank check), four on two GPUs.
  for (const char* request : {"auto", "cuda"}) {
    EXPECT_EQ(sharing(request, 1, 0, 2), c10::Device(c10::kCUDA, 0)) << request;
    EXPECT_EQ(sharing(request, 1, 1, 2), c10::Device(c10::kCUDA, 0)) << request;
    EXPECT_EQ(sharing(request, 2, 3, 4), c10::Device(c10::kCUDA, 1)) << request;
    EXPECT_EQ(sharing(request, 2, 2, 4), c10::Device(c10::kCUDA, 0)) << request;
  }
  // Enough GPUs: each rank still has its own; none: the CPU, or cuda's error.
  EXPECT_EQ(sharing("auto", 8, 3, 8), c10::Device(c10::kCUDA, 3));
  EXPECT_TRUE(sharing("auto", 0, 1, 2).is_cpu());
  EXPECT_TRUE(sharing("cpu", 1, 1, 2).is_cpu());
  DeviceRequest none = Request("cuda", 0, 1, 2);
  none.share_gpus = true;
  EXPECT_FALSE(ChooseDevice(none).ok());
}

TEST(ChooseDevice, CudaWithoutAGpuSaysWhy) {
  auto d = ChooseDevice(Request("cuda", 0));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("spec.training.device is cuda, but"), std::string::npos) << d.status();
}

TEST(ChooseDevice, AnUnknownDeviceIsRefused) {
  auto d = ChooseDevice(Request("tpu", 0));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("'tpu' is not one of auto, cpu, cuda"), std::string::npos) << d.status();
}

TEST(GpuAssignedByLauncher, OneDeviceInCudaVisibleDevices) {
  const char* old = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = old ? old : "";
  ::setenv("CUDA_VISIBLE_DEVICES", "3", 1);
  EXPECT_TRUE(GpuAssignedByLauncher());
  ::setenv("CUDA_VISIBLE_DEVICES", "GPU-5f1c0a2e", 1);
  EXPECT_TRUE(GpuAssignedByLauncher());
  ::setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
  EXPECT_FALSE(GpuAssignedByLauncher());
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_FALSE(GpuAssignedByLauncher());
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_FALSE(GpuAssignedByLauncher());
  if (old) ::setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
}

TEST(CreateCommunicator, CpuRanksAloneNeedNoRendezvous) {
  RendezvousOptions o;
  auto comm = CreateCommunicator(o, c10::Device(c10::kCPU));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->backend(), "local");
  EXPECT_EQ((*comm)->world(), 1);
}

// A GPU rank without NCCL in the build, or with NCCL but without the GPU, is refused before any
// rendezvous (which would wait for the other rank and then fail inside NCCL).
TEST(CreateCommunicator, GpuRanksWithoutNcclOrWithoutTheGpuAreRefused) {
  if (VisibleCudaDevices() > 0) GTEST_SKIP() << "a GPU is visible";
  RendezvousOptions o;
  o.rank = 1;
  o.world = 2;
  auto comm = CreateCommunicator(o, c10::Device(c10::kCUDA, 0));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(comm.status().message().find(NcclCommunicatorBuilt() ? "sees 0 GPU(s)" : "without it"), std::string::npos)
      << comm.status();
}

}  // namespace
}  // namespace eft::trainer
