#include "trainer/generate/kv_cache.h"

#include <algorithm>

namespace eft::trainer {

KvCache::KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t max_positions, at::TensorOptions options)
    : kv_heads_(kv_heads), head_dim_(head_dim), max_positions_(max_positions), options_(options),
      keys_(layers), values_(layers) {}

void KvCache::Reserve(int64_t n) {
  const int64_t need = length_ + n;
  TORCH_CHECK(need <= max_positions_, "KvCache: ", need, " positions exceed the model's ", max_positions_);
  if (need <= capacity_) return;
  // Doubling keeps the copies amortised O(1) per position; starting at 256 avoids a string of
  // tiny reallocations while a prompt and the first tokens arrive.
  const int64_t grown = std::min(max_positions_, std::max({need, 2 * capacity_, int64_t{256}}));
  for (size_t l = 0; l < keys_.size(); ++l) {
    at::Tensor k = at::empty({1, kv_heads_, grown, head_dim_}, options_);
    at::Tensor v = at::empty({1, kv_heads_, grown, head_dim_}, options_);
    if (length_ > 0) {
      k.narrow(2, 0, length_).copy_(keys_[l].narrow(2, 0, length_));
      v.narrow(2, 0, length_).copy_(values_[l].narrow(2, 0, length_));
    }
    keys_[l] = k;
    values_[l] = v;
  }
  capacity_ = grown;
}

std::pair<at::Tensor, at::Tensor> KvCache::Append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  const int64_t n = k.size(2);
  TORCH_CHECK(length_ + n <= capacity_, "KvCache::Append: call Reserve(", n, ") first");
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(1) == kv_heads_ && k.size(3) == head_dim_,
              "KvCache::Append: k and v must be [1, ", kv_heads_, ", n, ", head_dim_, "]");
  at::Tensor& keys = keys_.at(static_cast<size_t>(layer));
  at::Tensor& values = values_.at(static_cast<size_t>(layer));
  keys.narrow(2, length_, n).copy_(k);
  values.narrow(2, length_, n).copy_(v);
  return {keys.narrow(2, 0, length_ + n), values.narrow(2, 0, length_ + n)};
}

void KvCache::Commit(int64_t n) {
  TORCH_CHECK(length_ + n <= capacity_, "KvCache::Commit past the reserved positions");
  length_ += n;
}

void KvCache::Truncate(int64_t length) {
  TORCH_CHECK(length >= 0 && length <= length_, "KvCache::Truncate(", length, ") with ", length_, " cached");
  length_ = length;
}

}  // namespace eft::trainer
