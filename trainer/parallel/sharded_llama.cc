#include "trainer/parallel/sharded_llama.h"

#include <c10/core/GradMode.h>

#include <utility>

namespace eft::trainer {
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

std::vector<std::unique_ptr<FlatParamUnit>> MakeUnits(const ModelConfig& config, Communicator* comm,
                                                     const ShardingOptions& options, const LoraOptions& lora) {
  std::optional<at::ScalarType> frozen;
  if (lora.enabled) frozen = options.compute_dtype;
  std::vector<std::unique_ptr<FlatParamUnit>> units;
  units.push_back(std::make_unique<FlatParamUnit>("root", RootParamSpecs(config), comm, options.device, frozen));
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    units.push_back(std::make_unique<FlatParamUnit>(
        "layer." + std::to_string(i), LayerParamSpecs(config, static_cast<int>(i)), comm, options.device, frozen));
  }
  return units;
}

// One per unit, none for the root; none at all without LoRA.
std::vector<std::unique_ptr<FlatParamUnit>> MakeAdapters(const ModelConfig& config, Communicator* comm,
                                                        const ShardingOptions& options, const LoraOptions& lora) {
  std::vector<std::unique_ptr<FlatParamUnit>> adapters;
  if (!lora.enabled) return adapters;
  TORCH_CHECK(lora.r > 0 && !lora.modules.empty(), "LoRA needs r > 0 and at least one target module");
  adapters.resize(static_cast<size_t>(config.num_hidden_layers) + 1);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    adapters[i + 1] = std::make_unique<FlatParamUnit>(
        "layer." + std::to_string(i) + ".lora", LoraParamSpecs(config, static_cast<int>(i), lora.modules, lora.r),
        comm, options.device);
  }
  return adapters;
}

}  // namespace

ShardedLlama::ShardedLlama(ModelConfig config, Communicator* comm, ShardingOptions options, LoraOptions lora)
    : config_(std::move(config)),
      lora_(std::move(lora)),
      fsdp_(MakeUnits(config_, comm, options, lora_), MakeAdapters(config_, comm, options, lora_), comm, options) {}

ShardedLlama::~ShardedLlama() = default;

Status ShardedLlama::InitRandom(uint64_t seed) {
  auto init = [&](const ParamSpec& spec) -> Result<at::Tensor> { return InitParameter(config_, spec, seed); };
  EFT_RETURN_IF_ERROR(InitFrom(init));
  return lora_.enabled ? InitAdapters(init) : Status::Ok();
}

Status ShardedLlama::InitAdapters(const std::function<Result<at::Tensor>(const ParamSpec&)>& value) {
  for (auto& u : fsdp_.adapters()) {
    if (u) EFT_RETURN_IF_ERROR(u->InitShard(value).WithContext("unit " + u->name()));
  }
  return Status::Ok();
}

Status ShardedLlama::InitFrom(const std::function<Result<at::Tensor>(const ParamSpec&)>& value) {
  for (auto& u : fsdp_.units()) EFT_RETURN_IF_ERROR(u->InitShard(value).WithContext("unit " + u->name()));
  return Status::Ok();
}

void ShardedLlama::BeginStep(int64_t micro_batches) {
  root_ = BindRoot(config_, fsdp_.BeginStep(micro_batches));
}

void ShardedLlama::EndStep() {
  fsdp_.EndStep();
  root_ = RootWeights();
}

Fsdp::LayerFn ShardedLlama::Layers(const AttentionContext& ctx, std::vector<at::Tensor> dropout_row_seeds) {
  return [this, &ctx, seeds = std::move(dropout_row_seeds)](size_t index, const std::vector<at::Tensor>& params,
                                                             const at::Tensor& adapters, const at::Tensor& hidden) {
    const LayerWeights w = BindLayer(config_, params);
    if (!lora_.enabled) return DecoderLayer(config_, w, hidden, ctx);
    LayerLora lora = BindLora(lora_.modules, fsdp_.adapters()[index]->Views(adapters));
    lora.scale = lora_.scale;
    if (!seeds.empty()) {
      lora.dropout = lora_.dropout;
      lora.dropout_row_seeds = seeds[index];
    }
    return DecoderLayer(config_, w, hidden, ctx, &lora);
  };
}

Batch ShardedLlama::OnDevice(const Batch& input) const {
  Batch batch = input;
  const auto longs = at::TensorOptions().dtype(at::kLong).device(options().device);
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
    if (t->defined()) *t = t->to(options().device);
  }
  return batch;
}

double ShardedLlama::ForwardBackward(const Batch& input, double loss_scale) {
  fsdp_.BeginMicroBatch();
  const Batch batch = OnDevice(input);
  AttentionContext ctx = MakeAttentionContext(config_, batch, options().compute_dtype);
  at::Tensor hidden = Embed(root_, batch.input_ids);
  std::vector<at::Tensor> dropout_row_seeds;
  if (lora_.enabled && lora_.dropout > 0) {
    const at::Tensor& keys = batch.sample_keys;
    TORCH_CHECK(keys.defined() && keys.dim() == 1 && keys.size(0) == hidden.size(0),
                "LoRA dropout needs Batch::sample_keys, one per row (", hidden.size(0), " rows)");
    dropout_row_seeds.resize(fsdp_.units().size());
    for (size_t i = 1; i < dropout_row_seeds.size(); ++i) {
      dropout_row_seeds[i] = DropoutRowSeeds(lora_.seed, step_, keys, i);
    }
  }
  hidden = fsdp_.RunLayers(hidden, /*with_grad=*/true, Layers(ctx, std::move(dropout_row_seeds)));
  at::Tensor loss_sum = LossSum(config_, root_, hidden, batch.labels);
  // Keep the graph connected even with nothing to train, so every layer's backward (and its
  // collectives) still runs.
  at::Tensor objective = loss_sum * loss_scale + hidden.sum() * 0.0;
  objective.backward();
  fsdp_.EndMicroBatch();
  return loss_sum.item<double>();
}

at::Tensor ShardedLlama::ForwardLogits(const Batch& input) {
  c10::NoGradGuard no_grad;
  const Batch batch = OnDevice(input);
  at::Tensor root_full = fsdp_.GatherRoot();
  RootWeights root = BindRoot(config_, fsdp_.units()[0]->Views(root_full));
  AttentionContext ctx = MakeAttentionContext(config_, batch, options().compute_dtype);
  at::Tensor hidden = fsdp_.RunLayers(Embed(root, batch.input_ids), /*with_grad=*/false, Layers(ctx));
  return Logits(config_, root, hidden).to(at::kFloat);
}

double ShardedLlama::EvalLossSum(int64_t count, const std::function<Batch(int64_t)>& batch_at) {
  c10::NoGradGuard no_grad;
  at::Tensor root_full = fsdp_.GatherRoot();
  RootWeights root = BindRoot(config_, fsdp_.units()[0]->Views(root_full));
  double total = 0;
  for (int64_t i = 0; i < count; ++i) {
    const Batch batch = OnDevice(batch_at(i));
    AttentionContext ctx = MakeAttentionContext(config_, batch, options().compute_dtype);
    at::Tensor hidden = fsdp_.RunLayers(Embed(root, batch.input_ids), /*with_grad=*/false, Layers(ctx));
    total += LossSum(config_, root, hidden, batch.labels).item<double>();
  }
  fsdp_.ReleaseLayers();
  return total;
}

}  // namespace eft::trainer
