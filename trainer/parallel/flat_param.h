// FlatParamUnit: one FSDP (ZeRO-3) unit, e.g. one decoder layer.
//
// The unit's parameters are laid out back to back in one flat vector, padded to a multiple of the
// world size W. Each rank permanently holds only its 1/W slice, in fp32 (master weights), plus an
// fp32 gradient slice. Whole parameters exist only while the unit computes: Gather() all-gathers
// them in the compute dtype; the gradient of the whole flat vector (FlatGradient) is reduce-scattered
// back into the owning ranks' slices by Fsdp. Padding stays zero. Everything lives on `device` (the rank's
// GPU, or the CPU).
// A frozen unit (LoRA's base weights, docs/lora.md) keeps its slice in `frozen_dtype` (the compute
// dtype) and has no gradient and no decay mask (both undefined): nothing trains it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "common/status.h"
#include "trainer/model/llama.h"
#include "trainer/parallel/communicator.h"

namespace eft::trainer {

class FlatParamUnit {
 public:
  FlatParamUnit(std::string name, std::vector<ParamSpec> specs, Communicator* comm,
                c10::Device device = c10::Device(c10::kCPU),
                std::optional<at::ScalarType> frozen_dtype = std::nullopt);

  const std::string& name() const { return name_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t numel() const { return numel_; }                 // without padding
  int64_t padded_numel() const { return shard_numel_ * comm_->world(); }
  int64_t shard_numel() const { return shard_numel_; }
  int64_t shard_offset() const { return shard_numel_ * comm_->rank(); }  // of this rank's slice
  int64_t offset(size_t i) const { return offsets_[i]; }  // of spec i in the flat vector

  bool frozen() const { return !grad_.defined(); }
  at::Tensor& shard() { return shard_; }
  at::Tensor& grad() { return grad_; }
  const at::Tensor& decay_mask() const { return decay_mask_; }

  using WholeValue = std::function<Result<at::Tensor>(const ParamSpec&)>;
  // Fills this rank's slice: `value(spec)` gives a whole parameter (any float dtype, any device).
  // Only the parameters that overlap the slice are asked for.
  Status InitShard(const WholeValue& value) { return FillSlice(shard_, value); }
  // The same for any tensor laid out like the shard (e.g. an optimizer moment).
  Status FillSlice(at::Tensor& slice, const WholeValue& value) const;
  // Collective. Every rank's slice-shaped fp32 `slice`, gathered into the whole flat vector.
  at::Tensor GatherSlices(const at::Tensor& slice) const;
  // Collective, started in the background: the same, gathered on rank `root` only, where *full is
  // set to the whole flat vector (elsewhere it is left undefined, and no memory is taken). Calling
  // the result waits for it; `slice` must stay unchanged until then.
  std::function<void()> GatherSlicesToAsync(const at::Tensor& slice, int root, at::Tensor* full) const;
  bool is_rank(int rank) const { return comm_->rank() == rank; }
  // [begin, end) of the flat vector this rank's slice holds, padding excluded (may be empty).
  std::pair<int64_t, int64_t> OwnedRange() const;
  // Collective. The whole flat vector in `dtype`.
  at::Tensor Gather(at::ScalarType dtype) const;
  // Collective. Gathers into `full` (padded_numel elements of the compute dtype) without touching
  // its autograd version counter, so it may refill a tensor autograd saved for backward.
  void GatherInto(const at::Tensor& full) const;
  // GatherInto, started in the background; calling the result waits for it.
  std::function<void()> GatherIntoAsync(const at::Tensor& full) const;
  // Views of a gathered flat vector, shaped like the specs.
  std::vector<at::Tensor> Views(const at::Tensor& full) const;
  // The flat gradient (padded_numel elements of `dtype`) made of one gradient per spec, in Views'
  // order (undefined: zero). Written once, where autograd differentiating through the views of one
  // flat tensor would zero-fill and add a whole unit-sized tensor per view.
  at::Tensor FlatGradient(const std::vector<at::Tensor>& grads, at::ScalarType dtype) const;
  // flat += the gradients, where `flat` is laid out like the whole vector (padded_numel elements, e.g.
  // grad() at world size 1) and `grads` are as FlatGradient's: no flat copy of them is made.
  void AddGradients(const std::vector<at::Tensor>& grads, const at::Tensor& flat) const;
  void ZeroGrad() {
    if (grad_.defined()) grad_.zero_();
  }

 private:
  std::string name_;
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> offsets_;
  Communicator* comm_;
  int64_t numel_ = 0;
  int64_t shard_numel_ = 0;
  at::Tensor shard_, grad_, decay_mask_;
};

}  // namespace eft::trainer
