// training.device: the choice a rank makes from the request and the GPUs it sees, and the
// communicator that follows from it. The CUDA branches are decided from counts, so they are checked
// here too; actually computing on a GPU needs the GPU build (bench/gpu/run.sh).
#include <gtest/gtest.h>

#include "trainer/parallel/communicator.h"
#include "trainer/parallel/device.h"

namespace eft::trainer {
namespace {

TEST(ChooseDevice, AutoIsTheCpuWithoutGpus) {
  auto d = ChooseDevice("auto", 0, 3);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->is_cpu());
}

TEST(ChooseDevice, CpuStaysOnTheCpuEvenWithGpus) {
  auto d = ChooseDevice("cpu", 8, 0);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->is_cpu());
}

TEST(ChooseDevice, OneVisibleGpuIsDeviceZeroWhateverTheLocalRank) {
  // eft-worker gives each rank its own GPU through CUDA_VISIBLE_DEVICES.
  for (const char* request : {"auto", "cuda"}) {
    auto d = ChooseDevice(request, 1, 5);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, c10::Device(c10::kCUDA, 0)) << request;
  }
}

TEST(ChooseDevice, SeveralVisibleGpusAreIndexedByTheLocalRank) {
  // torchrun / srun / --nproc leave all of a node's GPUs visible to every rank.
  auto d = ChooseDevice("auto", 8, 3);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, c10::Device(c10::kCUDA, 3));
  auto over = ChooseDevice("cuda", 2, 2);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(over.status().message().find("only 2 are visible"), std::string::npos) << over.status();
}

TEST(ChooseDevice, CudaWithoutAGpuSaysWhy) {
  auto d = ChooseDevice("cuda", 0, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("spec.training.device is cuda"), std::string::npos) << d.status();
}

TEST(ChooseDevice, AnUnknownDeviceIsRefused) {
  auto d = ChooseDevice("tpu", 0, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("'tpu' is not one of auto, cpu, cuda"), std::string::npos) << d.status();
}

TEST(CreateCommunicator, CpuRanksAloneNeedNoRendezvous) {
  RendezvousOptions o;
  auto comm = CreateCommunicator(o, c10::Device(c10::kCPU));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->backend(), "local");
  EXPECT_EQ((*comm)->world(), 1);
}

#ifndef EFT_WITH_NCCL
TEST(CreateCommunicator, GpuRanksWithoutNcclInThisBuildAreRefused) {
  RendezvousOptions o;
  o.rank = 1;
  o.world = 2;
  auto comm = CreateCommunicator(o, c10::Device(c10::kCUDA, 0));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(comm.status().message().find("without it"), std::string::npos) << comm.status();
}
#endif

}  // namespace
}  // namespace eft::trainer
