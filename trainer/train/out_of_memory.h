// What a rank says when it runs out of memory, GPU or host (it then exits
// rank::ExitCode::kOutOfMemory; docs/gpu.md, "Out of memory"): where and when, the settings that
// decide how much memory a rank needs, and which of them to change. The allocator's own words
// (LibTorch's "CUDA out of memory. Tried to allocate ...") are kept in it.
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

}  // namespace eft::trainer
