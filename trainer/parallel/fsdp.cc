#include "trainer/parallel/fsdp.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <functional>
#include <utility>

namespace eft::trainer {

// What a layer's autograd function needs in backward. Lives for one micro-batch (the backward runs
// before the next RunLayers).
struct LayerCall {
  Fsdp* fsdp;
  size_t index;  // the unit's
  FlatParamUnit* unit;
  const Fsdp::LayerFn* layer;
  at::ScalarType dtype;
  Fsdp::KeptUnit* kept = nullptr;  // kGradOp/kNoShard while training: parameters live here
  LayerCall* prev = nullptr;  // the layer before this one (computes before it, backpropagates after)
  LayerCall* next = nullptr;
  at::Tensor full;  // the gathered parameters (non-checkpointed mode)
  // A gather started ahead of time into `prefetched`, so communication overlaps the previous
  // layer's compute; `wait` completes it.
  at::Tensor prefetched;
  std::function<void()> wait;
  // Non-checkpointed backward: `full`'s storage is being refilled in the background.
  std::function<void()> refill_wait;
  // ZeRO-3 under LoRA without checkpointing: gradients (of the layer's input, of its adapters) still
  // to arrive before the refilled `full` has no reader left.
  int backward_results_left = 0;
  // LoRA: the layer's adapter unit and its whole fp32 value for this micro-batch (a leaf that
  // requires grad while training).
  FlatParamUnit* adapter = nullptr;
  at::Tensor adapter_full;
  std::function<void()> adapter_wait;  // the background gather into adapter_full
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t Pack(LayerCall* call) { return reinterpret_cast<int64_t>(call); }
LayerCall* Unpack(AutogradContext* ctx) { return reinterpret_cast<LayerCall*>(ctx->saved_data["call"].toInt()); }

at::Tensor LayerForward(const LayerCall& call, const std::vector<at::Tensor>& params, const at::Tensor& adapter,
                        const at::Tensor& hidden) {
  return (*call.layer)(call.index, params, adapter, hidden);
}

at::Tensor LayerForward(const LayerCall& call, const at::Tensor& full, const at::Tensor& adapter,
                        const at::Tensor& hidden) {
  return LayerForward(call, call.unit->Views(full), adapter, hidden);
}

void StartPrefetch(LayerCall* call) {
  if (call == nullptr) return;
  if (Fsdp::KeptUnit* kept = call->kept) {
    if (kept->params.defined()) return;  // gathered (or being gathered) already this step
    kept->params = at::empty({call->unit->padded_numel()}, call->unit->shard().options().dtype(call->dtype));
    kept->gathering = call->unit->GatherIntoAsync(kept->params);
    return;
  }
  if (call->wait) return;
  call->prefetched = at::empty({call->unit->padded_numel()}, call->unit->shard().options().dtype(call->dtype));
  call->wait = call->unit->GatherIntoAsync(call->prefetched);
}

// This layer's whole parameters: the kept ones, the prefetched gather if one was started, else a
// gather now.
at::Tensor TakeGathered(LayerCall* call) {
  if (Fsdp::KeptUnit* kept = call->kept) {
    if (!kept->params.defined()) kept->params = call->unit->Gather(call->dtype);
    if (kept->gathering) std::exchange(kept->gathering, nullptr)();
    return kept->params;
  }
  if (!call->wait) return call->unit->Gather(call->dtype);
  call->wait();
  call->wait = nullptr;
  return std::exchange(call->prefetched, at::Tensor());
}

// Activation checkpointing: forward keeps only the layer's input; backward gathers the parameters
// again (unless the strategy kept them), recomputes the layer with autograd on, and backpropagates
// through the recomputation. `trained` is what the layer trains (the LoRA adapters, else a token
// leaf): an input that requires grad, so autograd calls backward even when `hidden` does not.
class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& trained,
                            int64_t packed) {
    LayerCall* call = reinterpret_cast<LayerCall*>(packed);
    ctx->saved_data["call"] = packed;
    ctx->save_for_backward({hidden});
    at::Tensor full = TakeGathered(call);
    StartPrefetch(call->next);
    return LayerForward(*call, full, call->adapter_full, hidden);  // `full` is freed on return
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    LayerCall* call = Unpack(ctx);
    // Under LoRA the first layer's input (the frozen embedding's output) needs no gradient.
    const bool input_grad = ctx->needs_input_grad(0);
    at::Tensor hidden = ctx->get_saved_variables()[0].detach().requires_grad_(input_grad);
    // Under LoRA the base weights are frozen: no gradient for them is even computed. Otherwise each
    // parameter is a leaf of its own (FlatGradient).
    const bool lora = call->adapter != nullptr;
    std::vector<at::Tensor> params = call->unit->Views(TakeGathered(call));
    if (!lora) {
      for (at::Tensor& p : params) p = p.detach().requires_grad_(true);
    }
    at::Tensor adapter = lora ? call->adapter_full.detach().requires_grad_(true) : at::Tensor();
    StartPrefetch(call->prev);  // backward walks the layers in reverse
    at::Tensor out;
    {
      at::AutoGradMode enable(true);
      out = LayerForward(*call, params, adapter, hidden);
    }
    variable_list inputs;
    if (input_grad) inputs.push_back(hidden);
    if (lora) {
      inputs.push_back(adapter);
    } else {
      inputs.insert(inputs.end(), params.begin(), params.end());
    }
    variable_list g = torch::autograd::grad({out}, inputs, {grads[0]}, std::nullopt, /*create_graph=*/false,
                                            /*allow_unused=*/true);
    const size_t first = input_grad ? 1 : 0;
    if (lora) {
      call->fsdp->AddGrad(call->index, g[first]);
    } else {
      call->fsdp->AddGrads(call->index, {g.begin() + first, g.end()});
    }
    return {input_grad ? g[0] : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void FreeStorage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void AllocateStorage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

// Without checkpointing: the gathered parameters (views of call->full) are the outputs of an
// autograd node of its own, so each one's gradient arrives here once the layer's backward is done.
class GatheredParams : public torch::autograd::Function<GatheredParams> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& token, int64_t packed) {
    LayerCall* call = reinterpret_cast<LayerCall*>(packed);
    ctx->saved_data["call"] = packed;
    at::Tensor full = TakeGathered(call);
    StartPrefetch(call->next);
    // Kept parameters are reused by later micro-batches: hand autograd a tensor of its own.
    call->full = call->kept != nullptr ? full.detach() : full;
    return call->unit->Views(call->full);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    LayerCall* call = Unpack(ctx);
    call->fsdp->AddGrads(call->index, grads);
    // The layer's backward, the last reader, has finished.
    if (call->kept == nullptr) FreeStorage(call->full);
    return {at::Tensor(), at::Tensor()};
  }
};

}  // namespace

Result<ShardingStrategy> ParseShardingStrategy(const std::string& name) {
  if (name == "full") return ShardingStrategy::kFull;
  if (name == "grad_op") return ShardingStrategy::kGradOp;
  if (name == "no_shard") return ShardingStrategy::kNoShard;
  return Status::InvalidArgument("sharding strategy \"" + name + "\" must be one of full, grad_op, no_shard");
}

std::string ShardingStrategyName(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::kFull: return "full";
    case ShardingStrategy::kGradOp: return "grad_op";
    case ShardingStrategy::kNoShard: return "no_shard";
  }
  return "?";
}

Fsdp::Fsdp(std::vector<std::unique_ptr<FlatParamUnit>> units, std::vector<std::unique_ptr<FlatParamUnit>> adapters,
           Communicator* comm, ShardingOptions options)
    : comm_(comm), options_(options), units_(std::move(units)), adapters_(std::move(adapters)) {
  TORCH_CHECK(adapters_.empty() || adapters_.size() == units_.size(), "Fsdp: one adapter slot per unit");
  grad_token_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(options_.device)).requires_grad_(true);
  kept_.resize(units_.size());
}

Fsdp::~Fsdp() = default;

std::vector<FlatParamUnit*> Fsdp::trainable_units() {
  std::vector<FlatParamUnit*> out;
  for (auto& u : lora() ? adapters_ : units_) {
    if (u) out.push_back(u.get());
  }
  return out;
}

const std::vector<at::Tensor>& Fsdp::BeginStep(int64_t micro_batches) {
  micro_batches_ = std::max<int64_t>(1, micro_batches);
  micro_index_ = 0;
  KeptUnit& root = kept_[0];
  if (Keeps() && root.params.defined()) {
    if (root.gathering) std::exchange(root.gathering, nullptr)();
    root_full_ = root.params.detach();
  } else {
    root_full_ = units_[0]->Gather(options_.compute_dtype);
    if (Keeps()) root.params = root_full_;
  }
  root_params_ = units_[0]->Views(root_full_);
  if (!lora()) {
    for (at::Tensor& p : root_params_) p = p.detach().requires_grad_(true);
  }
  return root_params_;
}

void Fsdp::BeginMicroBatch() {
  // A gradient after the step's last reduction would be lost without a trace.
  TORCH_CHECK(micro_index_ < micro_batches_, "ForwardBackward: more micro-batches than BeginStep announced (",
              micro_batches_, ")");
}

void Fsdp::EndMicroBatch() {
  if (lora()) {
    // Checkpointed layers handed their adapter gradients over in backward; the others' leaves hold them.
    if (!options_.activation_checkpointing) {
      for (auto it = calls_.rbegin(); it != calls_.rend(); ++it) AddGrad((*it)->index, (*it)->adapter_full.grad());
    }
  } else {
    std::vector<at::Tensor> grads;
    for (at::Tensor& p : root_params_) grads.push_back(std::exchange(p.mutable_grad(), at::Tensor()));
    AddGrads(0, grads);
  }
  // A micro-batch's reductions end with it under kFull; the strategies that keep parameters sum
  // gradients whole and reduce them during the last micro-batch, finished by EndStep.
  if (!Keeps()) FinishReduces(0);
  ++micro_index_;
}

void Fsdp::EndStep() {
  FinishReduces(0);
  root_params_.clear();
  root_full_ = at::Tensor();
  for (KeptUnit& k : kept_) {
    k.grad_sum = at::Tensor();
    // kGradOp frees whole parameters here; kNoShard keeps them (refreshed after the update).
    if (options_.strategy != ShardingStrategy::kNoShard) k = KeptUnit();
  }
}

void Fsdp::AfterOptimizerStep() {
  // Frozen LoRA base weights never change: nothing to refresh.
  if (options_.strategy != ShardingStrategy::kNoShard || lora()) return;
  for (size_t i = 0; i < units_.size(); ++i) {
    KeptUnit& k = kept_[i];
    if (!k.params.defined()) continue;  // gathered at its first use
    if (k.gathering) std::exchange(k.gathering, nullptr)();
    k.gathering = units_[i]->GatherIntoAsync(k.params);
  }
}

at::Tensor Fsdp::GatherRoot() const { return units_[0]->Gather(options_.compute_dtype); }

void Fsdp::ReleaseLayers() {
  calls_.clear();
  layer_ = nullptr;  // it may refer to the caller's per-batch context
}

void Fsdp::AddGrad(size_t index, const at::Tensor& full_grad) {
  if (comm_->world() == 1) {
    Trainable(index).grad().add_(full_grad);
    return;
  }
  if (!Keeps()) {
    StartReduce(index, full_grad.to(at::kFloat).contiguous());
    // Two layers' reductions in flight overlap communication with backward; more would only hold
    // more whole gradients in memory.
    FinishReduces(2);
    return;
  }
  KeptUnit& k = kept_[index];
  if (!k.grad_sum.defined()) {
    k.grad_sum = full_grad.to(at::kFloat).contiguous();
    if (k.grad_sum.data_ptr() == full_grad.data_ptr()) k.grad_sum = k.grad_sum.clone();
  } else {
    k.grad_sum.add_(full_grad);
  }
  ReduceSumAtStepEnd(index);
}

void Fsdp::AddGrads(size_t index, const std::vector<at::Tensor>& grads) {
  FlatParamUnit& unit = Trainable(index);
  // At world size 1 the shard is the whole vector and there is nothing to reduce: each gradient is
  // added where it belongs, with no flat copy and no step-long sum beside grad()
  // (docs/architecture.md, "Sharding").
  if (comm_->world() == 1) {
    unit.AddGradients(grads, unit.grad());
    return;
  }
  // The collectives take one flat fp32 vector: written once, in fp32, straight from the gradients.
  if (!Keeps()) {
    AddGrad(index, unit.FlatGradient(grads, at::kFloat));
    return;
  }
  KeptUnit& k = kept_[index];
  if (!k.grad_sum.defined()) {
    k.grad_sum = unit.FlatGradient(grads, at::kFloat);
  } else {
    unit.AddGradients(grads, k.grad_sum);
  }
  ReduceSumAtStepEnd(index);
}

void Fsdp::ReduceSumAtStepEnd(size_t index) {
  if (micro_index_ + 1 != micro_batches_) return;
  StartReduce(index, std::exchange(kept_[index].grad_sum, at::Tensor()));
  // As under kFull: a whole fp32 gradient per unit in flight would hold the model's whole gradient
  // (and Gloo's buffers for it) at once.
  FinishReduces(2);
}

void Fsdp::StartReduce(size_t index, at::Tensor full_grad) {
  FlatParamUnit& unit = Trainable(index);
  PendingReduce p{index, at::empty_like(unit.grad()), nullptr};
  // The wait function keeps `full_grad` alive until the collective is done.
  p.wait = comm_->ReduceScatterSumAsync(full_grad, p.shard);
  reducing_.push_back(std::move(p));
}

void Fsdp::FinishReduces(size_t keep) {
  while (reducing_.size() > keep) {
    PendingReduce& p = reducing_.front();
    p.wait();
    Trainable(p.unit).grad().add_(p.shard);
    reducing_.erase(reducing_.begin());
  }
}

at::Tensor Fsdp::RunLayers(at::Tensor hidden, bool with_grad, LayerFn layer) {
  calls_.clear();
  layer_ = std::move(layer);
  for (size_t i = 1; i < units_.size(); ++i) {
    auto call = std::make_unique<LayerCall>();
    call->fsdp = this;
    call->index = i;
    call->unit = units_[i].get();
    call->layer = &layer_;
    if (Keeps() && with_grad) call->kept = &kept_[i];
    call->dtype = options_.compute_dtype;
    if (lora()) call->adapter = adapters_[i].get();
    if (!calls_.empty()) {
      call->prev = calls_.back().get();
      calls_.back()->next = call.get();
    }
    calls_.push_back(std::move(call));
  }
  if (lora()) {
    // Adapters are small (fp32, ~1-3% of a layer's base): every layer's gather starts here, before
    // the first layer computes, so the layers below find theirs done instead of each waiting for a
    // synchronous all-gather. Gathered whole for each micro-batch, kept for the layer's backward.
    for (auto& owned : calls_) {
      LayerCall* call = owned.get();
      call->adapter_full = at::empty({call->adapter->padded_numel()}, call->adapter->shard().options());
      call->adapter_wait = call->adapter->GatherIntoAsync(call->adapter_full);
    }
  }
  for (auto& owned : calls_) {
    LayerCall* call = owned.get();
    if (call->adapter_wait) {
      std::exchange(call->adapter_wait, nullptr)();
      if (with_grad) call->adapter_full.requires_grad_(true);
    }
    if (!with_grad) {
      at::Tensor full = TakeGathered(call);
      StartPrefetch(call->next);
      hidden = LayerForward(*call, full, call->adapter_full, hidden);
    } else if (options_.activation_checkpointing) {
      hidden = CheckpointedLayer::apply(hidden, call->adapter ? call->adapter_full : grad_token_, Pack(call));
    } else if (call->kept != nullptr && call->adapter != nullptr) {
      // Frozen kept weights need no autograd node: the adapters' leaf collects the gradient.
      at::Tensor full = TakeGathered(call);
      StartPrefetch(call->next);
      hidden = LayerForward(*call, full, call->adapter_full, hidden);
    } else if (call->kept != nullptr) {
      hidden = LayerForward(*call, GatheredParams::apply(grad_token_, Pack(call)), call->adapter_full, hidden);
    } else {
      const at::Tensor input = hidden;
      std::vector<at::Tensor> params;
      if (call->adapter == nullptr) {
        params = GatheredParams::apply(grad_token_, Pack(call));  // sets call->full
      } else {
        // Frozen weights need no autograd node (which would compute their gradient). Their storage
        // is freed again once its last readers, the base matmuls' input gradients, have run: by the
        // time the layer's input gradient (if it needs one) and its adapters' have both arrived.
        call->full = TakeGathered(call);
        StartPrefetch(call->next);
        call->backward_results_left = 1 + (input.requires_grad() ? 1 : 0);
        auto arrived = [call](const at::Tensor& grad) {
          if (--call->backward_results_left == 0) FreeStorage(call->full);
          return grad;
        };
        call->adapter_full.register_hook(arrived);
        if (input.requires_grad()) input.register_hook(arrived);
        params = call->unit->Views(call->full);
      }
      hidden = LayerForward(*call, params, call->adapter_full, hidden);
      // The layer's saved tensors still view call->full: free its memory now and refill it just
      // before autograd runs this layer's backward.
      FreeStorage(call->full);
      hidden.register_hook([call](const at::Tensor& grad) {
        if (call->refill_wait) {
          std::exchange(call->refill_wait, nullptr)();
        } else {
          AllocateStorage(call->full);
          call->unit->GatherInto(call->full);
        }
        // Refill the layer that backpropagates next while this one computes.
        if (LayerCall* prev = call->prev) {
          AllocateStorage(prev->full);
          prev->refill_wait = prev->unit->GatherIntoAsync(prev->full);
        }
        return grad;
      });
    }
  }
  return hidden;
}

void Fsdp::ZeroGrad() {
  for (FlatParamUnit* u : trainable_units()) u->ZeroGrad();
}

int64_t Fsdp::ShardBytes() const {
  int64_t bytes = 0;
  for (const auto* list : {&units_, &adapters_}) {
    for (const auto& u : *list) {
      if (!u) continue;
      bytes += u->shard().numel() * static_cast<int64_t>(u->shard().element_size());
      if (!u->frozen()) bytes += u->grad().numel() * 4;
      // Adapters are gathered per micro-batch, never kept.
      if (options_.strategy == ShardingStrategy::kNoShard && list == &units_) {
        bytes += u->padded_numel() * at::elementSize(options_.compute_dtype);
      }
    }
  }
  return bytes;
}

}  // namespace eft::trainer
