#include "trainer/parallel/flat_param.h"

#include <algorithm>

#include "trainer/kernels/kernels.h"

namespace eft::trainer {

FlatParamUnit::FlatParamUnit(std::string name, std::vector<ParamSpec> specs, Communicator* comm, c10::Device device,
                             std::optional<at::ScalarType> frozen_dtype)
    : name_(std::move(name)), specs_(std::move(specs)), comm_(comm) {
  for (const auto& s : specs_) {
    offsets_.push_back(numel_);
    numel_ += s.numel();
  }
  const int64_t world = comm_->world();
  shard_numel_ = (numel_ + world - 1) / world;
  const auto fp32 = at::TensorOptions().dtype(at::kFloat).device(device);
  if (frozen_dtype) {
    shard_ = at::zeros({shard_numel_}, fp32.dtype(*frozen_dtype));
    return;
  }
  shard_ = at::zeros({shard_numel_}, fp32);
  grad_ = at::zeros({shard_numel_}, fp32);
  decay_mask_ = at::zeros({shard_numel_}, fp32);
  const int64_t lo = shard_offset(), hi = lo + shard_numel_;
  for (size_t i = 0; i < specs_.size(); ++i) {
    int64_t a = std::max(lo, offsets_[i]), b = std::min(hi, offsets_[i] + specs_[i].numel());
    if (a < b && specs_[i].decay) decay_mask_.slice(0, a - lo, b - lo).fill_(1.0);
  }
}

std::pair<int64_t, int64_t> FlatParamUnit::OwnedRange() const {
  const int64_t lo = std::min(shard_offset(), numel_);
  return {lo, std::min(shard_offset() + shard_numel_, numel_)};
}

at::Tensor FlatParamUnit::GatherSlices(const at::Tensor& slice) const {
  at::Tensor full = at::empty({padded_numel()}, slice.options());
  comm_->AllGather(slice.contiguous(), full);
  return full;
}

std::function<void()> FlatParamUnit::GatherSlicesToAsync(const at::Tensor& slice, int root, at::Tensor* full) const {
  *full = comm_->rank() == root ? at::empty({padded_numel()}, slice.options()) : at::Tensor();
  return comm_->GatherAsync(slice.contiguous(), *full, root);
}

Status FlatParamUnit::FillSlice(at::Tensor& slice, const WholeValue& value) const {
  const int64_t lo = shard_offset(), hi = lo + shard_numel_;
  slice.zero_();
  for (size_t i = 0; i < specs_.size(); ++i) {
    int64_t a = std::max(lo, offsets_[i]), b = std::min(hi, offsets_[i] + specs_[i].numel());
    if (a >= b) continue;  // not in this rank's slice: do not even materialise it
    EFT_ASSIGN_OR_RETURN(at::Tensor whole, value(specs_[i]));
    if (whole.sizes().vec() != specs_[i].shape) {
      return Status::InvalidArgument(specs_[i].name + ": shape " + c10::str(whole.sizes()) + ", expected " +
                                     c10::str(at::IntArrayRef(specs_[i].shape)));
    }
    at::Tensor flat = whole.reshape({-1}).to(slice.device(), slice.scalar_type());
    slice.slice(0, a - lo, b - lo).copy_(flat.slice(0, a - offsets_[i], b - offsets_[i]));
  }
  return Status::Ok();
}

at::Tensor FlatParamUnit::Gather(at::ScalarType dtype) const {
  at::Tensor full = at::empty({padded_numel()}, shard_.options().dtype(dtype));
  GatherInto(full);
  return full;
}

void FlatParamUnit::GatherInto(const at::Tensor& full) const { GatherIntoAsync(full)(); }

std::function<void()> FlatParamUnit::GatherIntoAsync(const at::Tensor& full) const {
  // A second tensor over the same storage has its own version counter: writing through it does not
  // make autograd think a saved tensor was modified in place.
  at::Tensor alias = at::empty({0}, full.options());
  alias.set_(full.storage(), full.storage_offset(), full.sizes(), full.strides());
  if (comm_->world() == 1) {  // nothing to exchange: cast straight into `full`, one pass
    alias.copy_(shard_);
    return [] {};
  }
  // Casting before the gather halves the traffic in bf16.
  at::Tensor local = full.scalar_type() == shard_.scalar_type() ? shard_ : shard_.to(full.scalar_type());
  std::function<void()> wait = comm_->AllGatherAsync(local, alias);
  return [wait, local, alias] { wait(); };
}

std::vector<at::Tensor> FlatParamUnit::Views(const at::Tensor& full) const {
  std::vector<at::Tensor> views;
  views.reserve(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) {
    views.push_back(full.slice(0, offsets_[i], offsets_[i] + specs_[i].numel()).view(specs_[i].shape));
  }
  return views;
}

at::Tensor FlatParamUnit::FlatGradient(const std::vector<at::Tensor>& grads, at::ScalarType dtype) const {
  TORCH_CHECK(grads.size() == specs_.size(), "FlatGradient: ", grads.size(), " gradients for ", specs_.size(),
              " parameters of unit ", name_);
  at::Tensor flat = at::empty({padded_numel()}, shard_.options().dtype(dtype));
  std::vector<at::Tensor> views = Views(flat);
  for (size_t i = 0; i < views.size(); ++i) {
    if (grads[i].defined()) {
      views[i].copy_(grads[i]);
    } else {
      views[i].zero_();
    }
  }
  if (padded_numel() > numel_) flat.narrow(0, numel_, padded_numel() - numel_).zero_();
  return flat;
}

void FlatParamUnit::AddGradients(const std::vector<at::Tensor>& grads, const at::Tensor& flat) const {
  TORCH_CHECK(grads.size() == specs_.size(), "AddGradients: ", grads.size(), " gradients for ", specs_.size(),
              " parameters of unit ", name_);
  TORCH_CHECK(flat.numel() == padded_numel(), "AddGradients: ", flat.numel(), " elements, expected ",
              padded_numel(), " (unit ", name_, ")");
  std::vector<at::Tensor> views = Views(flat);
  for (size_t i = 0; i < views.size(); ++i) {
    if (grads[i].defined()) AddConverted(views[i], grads[i]);
  }
}

}  // namespace eft::trainer
