#include "trainer/parallel/sharded_llama.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <functional>
#include <utility>

namespace eft::trainer {

// What a layer's autograd function needs in backward. Lives for one micro-batch (the backward runs
// before ForwardBackward returns).
struct LayerCall {
  const ModelConfig* config;
  ShardedLlama* model;
  size_t index;  // the unit's
  FlatParamUnit* unit;
  const AttentionContext* attention;
  at::ScalarType dtype;
  ShardedLlama::KeptUnit* kept = nullptr;  // kGradOp/kNoShard while training: parameters live here
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
  // LoRA: the layer's adapter unit, its whole fp32 value for this micro-batch (a leaf that requires
  // grad while training) and the dropout applied to its input.
  FlatParamUnit* adapter = nullptr;
  const LoraOptions* lora = nullptr;
  at::Tensor adapter_full;
  std::function<void()> adapter_wait;  // the background gather into adapter_full
  double dropout = 0;
  at::Tensor dropout_row_seeds;  // [B]: a function of (seed, step, the row's sample key, layer)
};

namespace {

// Any fixed function would do; this one is stable across platforms (a SplitMix64-style combine).
uint64_t Combine(uint64_t h, uint64_t v) {
  return (h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2))) * 0xbf58476d1ce4e5b9ULL;
}

// LoRA dropout: one seed per row of the micro-batch from (seed, step, the row's sample key, layer),
// none of which depends on the rank, the micro-batch or the world size (docs/lora.md).
at::Tensor DropoutRowSeeds(uint64_t seed, int64_t step, const at::Tensor& sample_keys, size_t layer) {
  at::Tensor keys = sample_keys.to(at::kLong).contiguous();
  at::Tensor out = at::empty_like(keys);
  const int64_t* key = keys.data_ptr<int64_t>();
  int64_t* row = out.data_ptr<int64_t>();
  for (int64_t b = 0; b < keys.numel(); ++b) {
    uint64_t h = seed;
    for (uint64_t v : {static_cast<uint64_t>(step), static_cast<uint64_t>(key[b]), static_cast<uint64_t>(layer)}) {
      h = Combine(h, v);
    }
    row[b] = static_cast<int64_t>(h);
  }
  return out;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t Pack(LayerCall* call) { return reinterpret_cast<int64_t>(call); }
LayerCall* Unpack(AutogradContext* ctx) { return reinterpret_cast<LayerCall*>(ctx->saved_data["call"].toInt()); }

at::Tensor LayerForward(const LayerCall& call, const at::Tensor& full, const at::Tensor& adapter,
                        const at::Tensor& hidden) {
  const LayerWeights w = BindLayer(*call.config, call.unit->Views(full));
  if (call.adapter == nullptr) return DecoderLayer(*call.config, w, hidden, *call.attention);
  LayerLora lora = BindLora(call.lora->modules, call.adapter->Views(adapter));
  lora.scale = call.lora->scale;
  lora.dropout = call.dropout;
  lora.dropout_row_seeds = call.dropout_row_seeds;
  return DecoderLayer(*call.config, w, hidden, *call.attention, &lora);
}

void StartPrefetch(LayerCall* call) {
  if (call == nullptr) return;
  if (ShardedLlama::KeptUnit* kept = call->kept) {
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
  if (ShardedLlama::KeptUnit* kept = call->kept) {
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
    // Under LoRA the base weights are frozen: no gradient for them is even computed.
    const bool lora = call->adapter != nullptr;
    at::Tensor full = TakeGathered(call).detach().requires_grad_(!lora);
    at::Tensor adapter = lora ? call->adapter_full.detach().requires_grad_(true) : at::Tensor();
    StartPrefetch(call->prev);  // backward walks the layers in reverse
    at::Tensor out;
    {
      at::AutoGradMode enable(true);
      out = LayerForward(*call, full, adapter, hidden);
    }
    const at::Tensor& trained = lora ? adapter : full;
    variable_list g = input_grad ? torch::autograd::grad({out}, {hidden, trained}, {grads[0]})
                                 : variable_list{at::Tensor(), torch::autograd::grad({out}, {trained}, {grads[0]})[0]};
    call->model->AddGrad(call->index, g[1]);
    return {g[0], at::Tensor(), at::Tensor()};
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

// Without checkpointing: the gathered flat parameter is an autograd node of its own, so the
// gradient of every view of it arrives here, summed, once the layer's backward is done.
class GatheredParams : public torch::autograd::Function<GatheredParams> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& token, int64_t packed) {
    LayerCall* call = reinterpret_cast<LayerCall*>(packed);
    ctx->saved_data["call"] = packed;
    at::Tensor full = TakeGathered(call);
    StartPrefetch(call->next);
    // Kept parameters are reused by later micro-batches: hand autograd a tensor of its own.
    return call->kept != nullptr ? full.detach() : full;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    LayerCall* call = Unpack(ctx);
    call->model->AddGrad(call->index, grads[0]);
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

ShardedLlama::ShardedLlama(ModelConfig config, Communicator* comm, ShardingOptions options, LoraOptions lora)
    : config_(std::move(config)), comm_(comm), options_(options), lora_(std::move(lora)) {
  const c10::Device device = options_.device;
  std::optional<at::ScalarType> frozen;
  if (lora_.enabled) frozen = options_.compute_dtype;
  units_.push_back(std::make_unique<FlatParamUnit>("root", RootParamSpecs(config_), comm_, device, frozen));
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    units_.push_back(std::make_unique<FlatParamUnit>(
        "layer." + std::to_string(i), LayerParamSpecs(config_, static_cast<int>(i)), comm_, device, frozen));
  }
  if (lora_.enabled) {
    TORCH_CHECK(lora_.r > 0 && !lora_.modules.empty(), "LoRA needs r > 0 and at least one target module");
    adapters_.resize(units_.size());
    for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
      adapters_[i + 1] = std::make_unique<FlatParamUnit>(
          "layer." + std::to_string(i) + ".lora",
          LoraParamSpecs(config_, static_cast<int>(i), lora_.modules, lora_.r), comm_, device);
    }
  }
  grad_token_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device)).requires_grad_(true);
  kept_.resize(units_.size());
}

ShardedLlama::~ShardedLlama() = default;

std::vector<FlatParamUnit*> ShardedLlama::trainable_units() {
  std::vector<FlatParamUnit*> out;
  for (auto& u : lora_.enabled ? adapters_ : units_) {
    if (u) out.push_back(u.get());
  }
  return out;
}

Status ShardedLlama::InitRandom(uint64_t seed) {
  auto init = [&](const ParamSpec& spec) -> Result<at::Tensor> { return InitParameter(config_, spec, seed); };
  EFT_RETURN_IF_ERROR(InitFrom(init));
  return lora_.enabled ? InitAdapters(init) : Status::Ok();
}

Status ShardedLlama::InitAdapters(const std::function<Result<at::Tensor>(const ParamSpec&)>& value) {
  for (auto& u : adapters_) {
    if (u) EFT_RETURN_IF_ERROR(u->InitShard(value).WithContext("unit " + u->name()));
  }
  return Status::Ok();
}

Status ShardedLlama::InitFrom(const std::function<Result<at::Tensor>(const ParamSpec&)>& value) {
  for (auto& u : units_) EFT_RETURN_IF_ERROR(u->InitShard(value).WithContext("unit " + u->name()));
  return Status::Ok();
}

void ShardedLlama::BeginStep(int64_t micro_batches) {
  micro_batches_ = std::max<int64_t>(1, micro_batches);
  micro_index_ = 0;
  KeptUnit& root = kept_[0];
  if (Keeps() && root.params.defined()) {
    if (root.gathering) std::exchange(root.gathering, nullptr)();
    root_full_ = root.params.detach().requires_grad_(!lora_.enabled);
  } else {
    root_full_ = units_[0]->Gather(options_.compute_dtype).requires_grad_(!lora_.enabled);
    if (Keeps()) root.params = root_full_.detach();
  }
  root_ = BindRoot(config_, units_[0]->Views(root_full_));
}

void ShardedLlama::EndStep() {
  FinishReduces(0);
  root_ = RootWeights();
  root_full_ = at::Tensor();
  for (KeptUnit& k : kept_) {
    k.grad_sum = at::Tensor();
    // kGradOp frees whole parameters here; kNoShard keeps them (refreshed after the update).
    if (options_.strategy != ShardingStrategy::kNoShard) k = KeptUnit();
  }
}

void ShardedLlama::AfterOptimizerStep() {
  // Frozen LoRA base weights never change: nothing to refresh.
  if (options_.strategy != ShardingStrategy::kNoShard || lora_.enabled) return;
  for (size_t i = 0; i < units_.size(); ++i) {
    KeptUnit& k = kept_[i];
    if (!k.params.defined()) continue;  // gathered at its first use
    if (k.gathering) std::exchange(k.gathering, nullptr)();
    k.gathering = units_[i]->GatherIntoAsync(k.params);
  }
}

void ShardedLlama::AddGrad(size_t index, const at::Tensor& full_grad) {
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
  if (micro_index_ + 1 == micro_batches_) {
    StartReduce(index, std::exchange(k.grad_sum, at::Tensor()));
    // As under kFull: a whole fp32 gradient per unit in flight would hold the model's whole
    // gradient (and Gloo's buffers for it) at once.
    FinishReduces(2);
  }
}

void ShardedLlama::StartReduce(size_t index, at::Tensor full_grad) {
  FlatParamUnit& unit = Trainable(index);
  if (comm_->world() == 1) {
    unit.grad().add_(full_grad);
    return;
  }
  PendingReduce p{index, at::empty_like(unit.grad()), nullptr};
  // The wait function keeps `full_grad` alive until the collective is done.
  p.wait = comm_->ReduceScatterSumAsync(full_grad, p.shard);
  reducing_.push_back(std::move(p));
}

void ShardedLlama::FinishReduces(size_t keep) {
  while (reducing_.size() > keep) {
    PendingReduce& p = reducing_.front();
    p.wait();
    Trainable(p.unit).grad().add_(p.shard);
    reducing_.erase(reducing_.begin());
  }
}

at::Tensor ShardedLlama::RunLayers(at::Tensor hidden, const AttentionContext& ctx, bool with_grad,
                                   const at::Tensor& sample_keys) {
  calls_.clear();
  const bool dropout = lora_.enabled && with_grad && lora_.dropout > 0;
  if (dropout) {
    TORCH_CHECK(sample_keys.defined() && sample_keys.dim() == 1 && sample_keys.size(0) == hidden.size(0),
                "LoRA dropout needs Batch::sample_keys, one per row (", hidden.size(0), " rows)");
  }
  for (size_t i = 1; i < units_.size(); ++i) {
    auto call = std::make_unique<LayerCall>();
    call->config = &config_;
    call->model = this;
    call->index = i;
    call->unit = units_[i].get();
    if (Keeps() && with_grad) call->kept = &kept_[i];
    call->attention = &ctx;
    call->dtype = options_.compute_dtype;
    if (lora_.enabled) {
      call->adapter = adapters_[i].get();
      call->lora = &lora_;
      if (dropout) {
        call->dropout = lora_.dropout;
        call->dropout_row_seeds = DropoutRowSeeds(lora_.seed, step_, sample_keys, i);
      }
    }
    if (!calls_.empty()) {
      call->prev = calls_.back().get();
      calls_.back()->next = call.get();
    }
    calls_.push_back(std::move(call));
  }
  if (lora_.enabled) {
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
      call->full = GatheredParams::apply(grad_token_, Pack(call));
      hidden = LayerForward(*call, call->full, call->adapter_full, hidden);
    } else {
      const at::Tensor input = hidden;
      if (call->adapter == nullptr) {
        call->full = GatheredParams::apply(grad_token_, Pack(call));
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
      }
      hidden = LayerForward(*call, call->full, call->adapter_full, hidden);
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

Batch ShardedLlama::OnDevice(const Batch& input) const {
  Batch batch = input;
  const auto longs = at::TensorOptions().dtype(at::kLong).device(options_.device);
  if (batch.empty()) {
    // This rank has no example for this micro-batch but must join the collectives: one padding
    // token, nothing trained.
    batch.input_ids = at::zeros({1, 1}, longs);
    batch.labels = at::full({1, 1}, -100, longs);
    batch.position_ids = at::zeros({1, 1}, longs);
    batch.segment_ids = at::ones({1, 1}, longs);
    batch.sample_keys = at::full({1}, -1, at::kLong);  // any key: the row trains nothing
    return batch;
  }
  for (at::Tensor* t : {&batch.input_ids, &batch.labels, &batch.position_ids, &batch.segment_ids}) {
    if (t->defined()) *t = t->to(options_.device);
  }
  return batch;
}

double ShardedLlama::ForwardBackward(const Batch& input, double loss_scale) {
  // A gradient after the step's last reduction would be lost without a trace.
  TORCH_CHECK(micro_index_ < micro_batches_, "ForwardBackward: more micro-batches than BeginStep announced (",
              micro_batches_, ")");
  const Batch batch = OnDevice(input);
  AttentionContext ctx = MakeAttentionContext(config_, batch, options_.compute_dtype);
  at::Tensor hidden = Embed(root_, batch.input_ids);
  hidden = RunLayers(hidden, ctx, /*with_grad=*/true, batch.sample_keys);
  at::Tensor loss_sum = LossSum(config_, root_, hidden, batch.labels);
  // Keep the graph connected even with nothing to train, so every layer's backward (and its
  // collectives) still runs.
  at::Tensor objective = loss_sum * loss_scale + hidden.sum() * 0.0;
  objective.backward();
  if (lora_.enabled) {
    // Checkpointed layers handed their adapter gradients over in backward; the others' leaves hold them.
    if (!options_.activation_checkpointing) {
      for (auto it = calls_.rbegin(); it != calls_.rend(); ++it) AddGrad((*it)->index, (*it)->adapter_full.grad());
    }
  } else {
    AddGrad(0, root_full_.grad());
    root_full_.mutable_grad() = at::Tensor();
  }
  // A micro-batch's reductions end with it under kFull; the strategies that keep parameters sum
  // gradients whole and reduce them during the last micro-batch, finished by EndStep.
  if (!Keeps()) FinishReduces(0);
  ++micro_index_;
  return loss_sum.item<double>();
}

at::Tensor ShardedLlama::ForwardLogits(const Batch& input) {
  c10::NoGradGuard no_grad;
  const Batch batch = OnDevice(input);
  at::Tensor root_full = units_[0]->Gather(options_.compute_dtype);
  RootWeights root = BindRoot(config_, units_[0]->Views(root_full));
  AttentionContext ctx = MakeAttentionContext(config_, batch, options_.compute_dtype);
  at::Tensor hidden = RunLayers(Embed(root, batch.input_ids), ctx, /*with_grad=*/false);
  return Logits(config_, root, hidden).to(at::kFloat);
}

double ShardedLlama::EvalLossSum(int64_t count, const std::function<Batch(int64_t)>& batch_at) {
  c10::NoGradGuard no_grad;
  at::Tensor root_full = units_[0]->Gather(options_.compute_dtype);
  RootWeights root = BindRoot(config_, units_[0]->Views(root_full));
  double total = 0;
  for (int64_t i = 0; i < count; ++i) {
    const Batch batch = OnDevice(batch_at(i));
    AttentionContext ctx = MakeAttentionContext(config_, batch, options_.compute_dtype);
    at::Tensor hidden = RunLayers(Embed(root, batch.input_ids), ctx, /*with_grad=*/false);
    total += LossSum(config_, root, hidden, batch.labels).item<double>();
  }
  calls_.clear();
  return total;
}

void ShardedLlama::ZeroGrad() {
  for (FlatParamUnit* u : trainable_units()) u->ZeroGrad();
}

int64_t ShardedLlama::ShardBytes() const {
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
