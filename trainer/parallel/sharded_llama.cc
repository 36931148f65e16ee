#include "trainer/parallel/sharded_llama.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <functional>
#include <utility>

namespace eft::trainer {

// What a layer's autograd function needs in backward. Lives for one micro-batch (the backward runs
// before ForwardBackward returns).
struct LayerCall {
  const ModelConfig* config;
  FlatParamUnit* unit;
  const AttentionContext* attention;
  at::ScalarType dtype;
  LayerCall* prev = nullptr;  // the layer before this one (computes before it, backpropagates after)
  LayerCall* next = nullptr;
  at::Tensor full;  // the gathered parameters (non-checkpointed mode)
  // A gather started ahead of time into `prefetched`, so communication overlaps the previous
  // layer's compute; `wait` completes it.
  at::Tensor prefetched;
  std::function<void()> wait;
  // Non-checkpointed backward: `full`'s storage is being refilled in the background.
  std::function<void()> refill_wait;
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t Pack(LayerCall* call) { return reinterpret_cast<int64_t>(call); }
LayerCall* Unpack(AutogradContext* ctx) { return reinterpret_cast<LayerCall*>(ctx->saved_data["call"].toInt()); }

at::Tensor LayerForward(const LayerCall& call, const at::Tensor& full, const at::Tensor& hidden) {
  return DecoderLayer(*call.config, BindLayer(*call.config, call.unit->Views(full)), hidden, *call.attention);
}

void StartPrefetch(LayerCall* call) {
  if (call == nullptr || call->wait) return;
  call->prefetched = at::empty({call->unit->padded_numel()}, call->unit->shard().options().dtype(call->dtype));
  call->wait = call->unit->GatherIntoAsync(call->prefetched);
}

// This layer's whole parameters: the prefetched gather if one was started, else a gather now.
at::Tensor TakeGathered(LayerCall* call) {
  if (!call->wait) return call->unit->Gather(call->dtype);
  call->wait();
  call->wait = nullptr;
  return std::exchange(call->prefetched, at::Tensor());
}

// Activation checkpointing: forward keeps only the layer's input; backward gathers the parameters
// again, recomputes the layer with autograd on, and backpropagates through the recomputation.
class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, int64_t packed) {
    LayerCall* call = reinterpret_cast<LayerCall*>(packed);
    ctx->saved_data["call"] = packed;
    ctx->save_for_backward({hidden});
    at::Tensor full = TakeGathered(call);
    StartPrefetch(call->next);
    return LayerForward(*call, full, hidden);  // `full` is freed on return
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    LayerCall* call = Unpack(ctx);
    at::Tensor hidden = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor full = TakeGathered(call).requires_grad_(true);
    StartPrefetch(call->prev);  // backward walks the layers in reverse
    at::Tensor out;
    {
      at::AutoGradMode enable(true);
      out = LayerForward(*call, full, hidden);
    }
    variable_list g = torch::autograd::grad({out}, {hidden, full}, {grads[0]});
    call->unit->ReduceGrad(g[1]);
    return {g[0], at::Tensor()};
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
    return full;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    LayerCall* call = Unpack(ctx);
    call->unit->ReduceGrad(grads[0]);
    FreeStorage(call->full);  // the layer's backward, the last reader, has finished
    return {at::Tensor(), at::Tensor()};
  }
};

}  // namespace

ShardedLlama::ShardedLlama(ModelConfig config, Communicator* comm, ShardingOptions options)
    : config_(std::move(config)), comm_(comm), options_(options) {
  const c10::Device device = options_.device;
  units_.push_back(std::make_unique<FlatParamUnit>("root", RootParamSpecs(config_), comm_, device));
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    units_.push_back(std::make_unique<FlatParamUnit>("layer." + std::to_string(i),
                                                     LayerParamSpecs(config_, static_cast<int>(i)), comm_, device));
  }
  grad_token_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device)).requires_grad_(true);
}

ShardedLlama::~ShardedLlama() = default;

Status ShardedLlama::InitRandom(uint64_t seed) {
  return InitFrom([&](const ParamSpec& spec) -> Result<at::Tensor> { return InitParameter(config_, spec, seed); });
}

Status ShardedLlama::InitFrom(const std::function<Result<at::Tensor>(const ParamSpec&)>& value) {
  for (auto& u : units_) EFT_RETURN_IF_ERROR(u->InitShard(value).WithContext("unit " + u->name()));
  return Status::Ok();
}

void ShardedLlama::BeginStep() {
  root_full_ = units_[0]->Gather(options_.compute_dtype).requires_grad_(true);
  root_ = BindRoot(config_, units_[0]->Views(root_full_));
}

void ShardedLlama::EndStep() {
  root_ = RootWeights();
  root_full_ = at::Tensor();
}

at::Tensor ShardedLlama::RunLayers(at::Tensor hidden, const AttentionContext& ctx, bool with_grad) {
  calls_.clear();
  for (size_t i = 1; i < units_.size(); ++i) {
    auto call = std::make_unique<LayerCall>();
    call->config = &config_;
    call->unit = units_[i].get();
    call->attention = &ctx;
    call->dtype = options_.compute_dtype;
    if (!calls_.empty()) {
      call->prev = calls_.back().get();
      calls_.back()->next = call.get();
    }
    calls_.push_back(std::move(call));
  }
  for (auto& owned : calls_) {
    LayerCall* call = owned.get();
    if (!with_grad) {
      at::Tensor full = TakeGathered(call);
      StartPrefetch(call->next);
      hidden = LayerForward(*call, full, hidden);
    } else if (options_.activation_checkpointing) {
      hidden = CheckpointedLayer::apply(hidden, Pack(call));
    } else {
      call->full = GatheredParams::apply(grad_token_, Pack(call));
      hidden = LayerForward(*call, call->full, hidden);
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
    return batch;
  }
  for (at::Tensor* t : {&batch.input_ids, &batch.labels, &batch.position_ids, &batch.segment_ids}) {
    if (t->defined()) *t = t->to(options_.device);
  }
  return batch;
}

double ShardedLlama::ForwardBackward(const Batch& input, double loss_scale) {
  const Batch batch = OnDevice(input);
  AttentionContext ctx = MakeAttentionContext(config_, batch, options_.compute_dtype);
  at::Tensor hidden = Embed(root_, batch.input_ids);
  hidden = RunLayers(hidden, ctx, /*with_grad=*/true);
  at::Tensor loss_sum = LossSum(config_, root_, hidden, batch.labels);
  // Keep the graph connected even with nothing to train, so every layer's backward (and its
  // collectives) still runs.
  at::Tensor objective = loss_sum * loss_scale + hidden.sum() * 0.0;
  objective.backward();
  units_[0]->ReduceGrad(root_full_.grad());
  root_full_.mutable_grad() = at::Tensor();
  return loss_sum.item<double>();
}

at::Tensor ShardedLlama::ForwardLogits(const Batch& input) {
  at::NoGradGuard no_grad;
  const Batch batch = OnDevice(input);
  at::Tensor root_full = units_[0]->Gather(options_.compute_dtype);
  RootWeights root = BindRoot(config_, units_[0]->Views(root_full));
  AttentionContext ctx = MakeAttentionContext(config_, batch, options_.compute_dtype);
  at::Tensor hidden = RunLayers(Embed(root, batch.input_ids), ctx, /*with_grad=*/false);
  return Logits(config_, root, hidden).to(at::kFloat);
}

std::vector<std::pair<std::string, at::Tensor>> ShardedLlama::FullParameters() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& u : units_) {
    at::Tensor full = u->Gather(at::kFloat);
    std::vector<at::Tensor> views = u->Views(full);
    for (size_t i = 0; i < views.size(); ++i) {
      out.emplace_back(u->specs()[i].name, views[i].to(at::kCPU, at::kFloat, /*non_blocking=*/false, /*copy=*/true));
    }
  }
  return out;
}

void ShardedLlama::ZeroGrad() {
  for (auto& u : units_) u->ZeroGrad();
}

int64_t ShardedLlama::ShardBytes() const {
  int64_t bytes = 0;
  for (const auto& u : units_) bytes += (u->shard().numel() + u->grad().numel()) * 4;
  return bytes;
}

}  // namespace eft::trainer
