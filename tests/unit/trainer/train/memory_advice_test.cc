// What a rank says about its memory (trainer/train/memory_advice.h): which errors are running out of
// it and the advice that fits the run's settings (a real allocation failure end to end:
// tests/e2e/rank_failure_paths_test.cc), and the hint that a larger micro-batch would fit.
#include "trainer/train/memory_advice.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <new>
#include <stdexcept>

namespace eft::trainer {
namespace {

std::optional<std::string> MessageOfThrown(const std::function<void()>& thrower) {
  try {
    thrower();
  } catch (const std::exception& e) {
    return OutOfMemoryMessage(e);
  }
  ADD_FAILURE() << "nothing thrown";
  return std::nullopt;
}

TEST(OutOfMemoryMessage, TheAllocatorsErrorsCountOthersDoNot) {
  auto cuda = MessageOfThrown([] {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 2.00 GiB");
  });
  ASSERT_TRUE(cuda.has_value());
  EXPECT_EQ(*cuda, "CUDA out of memory. Tried to allocate 2.00 GiB") << "no backtrace, no source location";
  // A real failure of LibTorch's CPU allocator: more than the address space holds.
  auto cpu = MessageOfThrown([] { (void)at::empty({int64_t{1} << 60}, at::kByte); });
  ASSERT_TRUE(cpu.has_value());
  EXPECT_EQ(cpu->rfind("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1152921504606846976 bytes", 0),
            0u)
      << *cpu;
  auto host = MessageOfThrown([] { throw std::bad_alloc(); });
  ASSERT_TRUE(host.has_value());
  EXPECT_EQ(host->rfind("host allocation failed (", 0), 0u) << *host;
  EXPECT_FALSE(MessageOfThrown([] { TORCH_CHECK(false, "shape mismatch"); }).has_value());
  EXPECT_FALSE(MessageOfThrown([] { throw std::runtime_error("Connection closed by peer"); }).has_value());
}

MemoryContext Context() {
  MemoryContext c;
  c.rank = 3;
  c.world = 4;
  c.device = "cuda:0";
  c.step = 12;
  c.micro_batch_size = 8;
  c.max_seq_len = 2048;
  c.activation_checkpointing = false;
  c.sharding = "grad_op";
  return c;
}

TEST(DescribeOutOfMemory, SaysWhereWhenWithWhatAndWhatToChange) {
  EXPECT_EQ(DescribeOutOfMemory("CUDA out of memory. Tried to allocate 9.27 GiB", Context()),
            "rank 3 ran out of GPU memory on cuda:0 in step 12: CUDA out of memory. Tried to allocate 9.27 GiB. "
            "Each rank computes micro-batches of 8 sequences of up to 2048 tokens, activation checkpointing none, "
            "sharding grad_op, world size 4. To fit: lower training.micro_batch_size (gradient accumulation keeps "
            "global_batch_size), set training.activation_checkpointing: full, set parallel.sharding: full (whole "
            "parameters then exist one layer at a time), or train on more ranks (FSDP spreads the parameters' state "
            "over them).");
}

TEST(DescribeOutOfMemory, TheAdviceLeavesOutWhatIsAlreadySo) {
  MemoryContext c = Context();
  c.micro_batch_size = 1;
  c.activation_checkpointing = true;
  c.sharding = "full";
  const std::string s = DescribeOutOfMemory("CUDA out of memory.", c);
  EXPECT_NE(s.find("To fit: lower data.max_seq_len, or train on more ranks"), std::string::npos) << s;
  EXPECT_EQ(s.find("micro_batch_size ("), std::string::npos) << s;
  EXPECT_EQ(s.find("activation_checkpointing: full"), std::string::npos) << s;

  c.sharding = "no_shard";
  EXPECT_NE(DescribeOutOfMemory("x", c).find("set parallel.sharding: grad_op or full"), std::string::npos);
}

TEST(DescribeOutOfMemory, BeforeTheFirstStepOnlyTheStateMatters) {
  MemoryContext c = Context();
  c.step = 0;
  c.device = "";  // not chosen yet when loading failed
  const std::string s = DescribeOutOfMemory("CUDA out of memory. Tried to allocate 1.00 GiB", c);
  EXPECT_EQ(s.rfind("rank 3 ran out of GPU memory before the first step (loading the model, its optimizer state or "
                    "a checkpoint): CUDA out of memory.",
                    0),
            0u)
      << s;
  EXPECT_EQ(s.find("micro_batch_size ("), std::string::npos) << "activations are not what filled it: " << s;
  EXPECT_NE(s.find("To fit: set parallel.sharding: full"), std::string::npos) << s;
  EXPECT_NE(DescribeOutOfMemory("DefaultCPUAllocator: can't allocate memory", c).find("ran out of host memory"),
            std::string::npos);
}

constexpr int64_t kGiB = int64_t{1} << 30;

// The bench's first GPU run: 27.5 GiB at micro-batch 4 without activation checkpointing on an 80 GB
// H100, of which ~7.4 GiB persistent (494M parameters: fp32 master, gradient, two moments, at W = 1).
TEST(LargerMicroBatchHint, SaysTwiceTheMicroBatchFitsWhenFarFromTheLimit) {
  const int64_t total = 80 * kGiB, persistent = 7 * kGiB + 2 * kGiB / 5;
  auto hint = LargerMicroBatchHint(persistent, 27 * kGiB + kGiB / 2, total, 4, 16);
  ASSERT_TRUE(hint.has_value());
  EXPECT_EQ(*hint,
            "GPU memory peaked at 27.5 of 80.0 GiB: training.micro_batch_size 8 (now 4) would need at most about 47.6 "
            "GiB and run fewer, larger kernels, usually faster (gradient accumulation keeps global_batch_size)");
}

TEST(LargerMicroBatchHint, SilentNearTheLimitWithoutRoomInTheBatchOrOnTheCpu) {
  const int64_t total = 80 * kGiB;
  EXPECT_FALSE(LargerMicroBatchHint(7 * kGiB, 40 * kGiB, total, 4, 16)) << "73 GiB > 85% of 80";
  EXPECT_FALSE(LargerMicroBatchHint(7 * kGiB, 20 * kGiB, total, 8, 8)) << "no accumulation left to trade";
  EXPECT_FALSE(LargerMicroBatchHint(7 * kGiB, 20 * kGiB, total, 4, 7)) << "7 sequences: no two micro-batches of 4";
  EXPECT_FALSE(LargerMicroBatchHint(7 * kGiB, -1, -1, 4, 16)) << "a CPU rank: no GPU figures";
}

}  // namespace
}  // namespace eft::trainer
