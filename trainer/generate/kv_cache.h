// KvCache: the keys and values every decoder layer has already computed for one sequence, so a new
// token costs one position of work instead of the whole prefix.
//
// Contract: positions 0..length()-1 are cached for every layer. A forward of n new positions calls
// Reserve(n), then Append once per layer (which writes positions length()..length()+n-1 and returns
// all of them), then Commit(n). Truncate(m) forgets positions m.. (a new prompt that shares only a
// prefix with the cached one). Keys are stored after RoPE, so they never need rotating again.
// Storage grows by doubling (amortised O(1) per token) up to `max_positions`; one sequence only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace eft::trainer {

class KvCache {
 public:
  // `options`: the compute dtype and device of the model's activations.
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t max_positions, at::TensorOptions options);

  int64_t length() const { return length_; }
  int64_t max_positions() const { return max_positions_; }

  // Makes room for `n` more positions. Throws c10::Error past max_positions (callers check first).
  void Reserve(int64_t n);
  // k, v: [1, kv_heads, n, head_dim] of the n reserved positions. Returns views of positions
  // [0, length() + n) of this layer: [1, kv_heads, length() + n, head_dim].
  std::pair<at::Tensor, at::Tensor> Append(int64_t layer, const at::Tensor& k, const at::Tensor& v);
  void Commit(int64_t n);
  void Truncate(int64_t length);

  int64_t capacity() const { return capacity_; }

 private:
  int64_t kv_heads_, head_dim_, max_positions_;
  at::TensorOptions options_;
  int64_t length_ = 0, capacity_ = 0;
  std::vector<at::Tensor> keys_, values_;  // per layer [1, kv_heads, capacity, head_dim]
};

}  // namespace eft::trainer
