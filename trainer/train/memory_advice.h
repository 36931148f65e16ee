// What a rank says about its memory and the settings that decide it (docs/gpu.md, "Out of memory"):
//   - when it runs out, GPU or host (it then exits rank::ExitCode::kOutOfMemory): where and when,
//     the settings, and which of them to change; the allocator's own words ("CUDA out of memory.
//     Tried to allocate ...") are kept in it;
//   - after its first step on a GPU, when far from it: that twice the micro-batch would likely fit
//     (fewer, larger kernels).
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>

namespace eft::trainer {

struct MemoryContext {
  int rank = 0;
  int world = 1;
  std::string device;  // "cuda:0", "cpu"; empty: not chosen yet
  int64_t step = 0;    // the step that ran out; 0: before the first (loading, resuming)
  int64_t micro_batch_size = 1;
  int64_t max_seq_len = 0;
  bool activation_checkpointing = false;
  std::string sharding;  // full | grad_op | no_shard
};

// The allocator's message when `e` is an out-of-memory error, without backtrace or source location:
// c10::OutOfMemoryError (CUDA's caching allocator), the c10::Error of LibTorch's CPU allocator
// ("DefaultCPUAllocator: can't allocate memory: ..."), or std::bad_alloc; nullopt otherwise.
std::optional<std::string> OutOfMemoryMessage(const std::exception& e);

// One paragraph for the log and the controller's end reason.
std::string DescribeOutOfMemory(const std::string& allocator_message, const MemoryContext& c);

// After the first step on a GPU of `total` bytes that peaked at `peak_allocated` with
// `persistent` bytes of parameters, gradients and optimizer state: the line suggesting twice
// `micro_batch_size` when the rank's `sequences_per_step` allow it and the estimate (the step's
// transient memory doubled: 2 peak - persistent, an upper bound as the gathered parameters do not
// double) stays within 85% of the GPU; nullopt otherwise.
std::optional<std::string> LargerMicroBatchHint(int64_t persistent, int64_t peak_allocated, int64_t total,
                                                int64_t micro_batch_size, int64_t sequences_per_step);

}  // namespace eft::trainer
