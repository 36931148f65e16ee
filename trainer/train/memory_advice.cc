#include "trainer/train/memory_advice.h"

#include <algorithm>
#include <cstdio>
#include <new>
#include <vector>

#include <c10/util/Exception.h>

namespace eft::trainer {

std::optional<std::string> OutOfMemoryMessage(const std::exception& e) {
  if (const auto* oom = dynamic_cast<const c10::OutOfMemoryError*>(&e)) return oom->what_without_backtrace();
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    // LibTorch's CPU allocator reports a failed allocation as a plain c10::Error (an enforce whose
    // text starts "[enforce fail at alloc_cpu.cpp:...] err == 0."): its own words are what matter.
    const std::string message = error->what_without_backtrace();
    const size_t at = message.find("DefaultCPUAllocator: can't allocate memory");
    if (at != std::string::npos) return message.substr(at);
    return std::nullopt;
  }
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return std::string("host allocation failed (") + e.what() + ")";
  return std::nullopt;
}

std::string DescribeOutOfMemory(const std::string& allocator_message, const MemoryContext& c) {
  const bool gpu = allocator_message.find("CUDA out of memory") != std::string::npos;
  std::string where = gpu ? "GPU memory" : "host memory";
  if (gpu && c.device.rfind("cuda", 0) == 0) where += " on " + c.device;
  const std::string when = c.step > 0 ? "in step " + std::to_string(c.step)
                                      : "before the first step (loading the model, its optimizer state or a checkpoint)";
  std::string s = "rank " + std::to_string(c.rank) + " ran out of " + where + " " + when + ": " + allocator_message;
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  if (!s.empty() && s.back() != '.') s += ".";
  // What a rank's memory grows with, as this run has it.
  s += " Each rank computes micro-batches of " + std::to_string(c.micro_batch_size) + " sequences of up to " +
       std::to_string(c.max_seq_len) + " tokens, activation checkpointing " +
       (c.activation_checkpointing ? "full" : "none") + ", sharding " + c.sharding + ", world size " +
       std::to_string(c.world) + ".";
  std::vector<std::string> fixes;
  if (c.step > 0) {  // activations: only a step has them
    if (c.micro_batch_size > 1) {
      fixes.push_back("lower training.micro_batch_size (gradient accumulation keeps global_batch_size)");
    } else {
      fixes.push_back("lower data.max_seq_len");
    }
    if (!c.activation_checkpointing) fixes.push_back("set training.activation_checkpointing: full");
  }
  if (c.sharding == "no_shard") {
    fixes.push_back("set parallel.sharding: grad_op or full (each rank then keeps 1/W of the gradients and optimizer "
                    "state)");
  } else if (c.sharding == "grad_op") {
    fixes.push_back("set parallel.sharding: full (whole parameters then exist one layer at a time)");
  }
  fixes.push_back("train on more ranks (FSDP spreads the parameters' state over them)");
  s += " To fit: ";
  for (size_t i = 0; i < fixes.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == fixes.size() ? ", or " : ", ") + fixes[i];
  }
  s += ".";
  return s;
}

std::optional<std::string> LargerMicroBatchHint(int64_t persistent, int64_t peak_allocated, int64_t total,
                                                int64_t micro_batch_size, int64_t sequences_per_step) {
  if (total <= 0 || peak_allocated <= 0 || micro_batch_size < 1 || sequences_per_step < 2 * micro_batch_size) {
    return std::nullopt;
  }
  const int64_t estimate = 2 * peak_allocated - std::min(persistent, peak_allocated);
  if (static_cast<double>(estimate) > 0.85 * static_cast<double>(total)) return std::nullopt;
  auto gib = [](int64_t bytes) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f", static_cast<double>(bytes) / (1 << 30));
    return std::string(s);
  };
  return "GPU memory peaked at " + gib(peak_allocated) + " of " + gib(total) + " GiB: training.micro_batch_size " +
         std::to_string(2 * micro_batch_size) + " (now " + std::to_string(micro_batch_size) +
         ") would need at most about " + gib(estimate) +
         " GiB and run fewer, larger kernels, usually faster (gradient accumulation keeps global_batch_size)";
}

}  // namespace eft::trainer
