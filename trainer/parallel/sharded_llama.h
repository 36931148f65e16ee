// ShardedLlama: a Llama-family model whose parameters live in FSDP units, trained a micro-batch at
// a time.
//
// Units: 0 = root (embeddings, final norm, untied head), 1..L = decoder layers. Master weights,
// their gradients and the optimizer state are always sharded (each rank holds 1/W of every unit, in
// fp32); the sharding strategy decides how long whole parameters live and how often gradients are
// reduced (docs/architecture.md, "Sharding strategies"):
//  - kFull (ZeRO-3): the root is gathered once per step and stays whole until EndStep, like FSDP's
//    root module; each layer is gathered just before it computes and freed right after. Its
//    backward re-gathers it: with activation checkpointing the layer is recomputed from its saved
//    input inside a custom autograd function; without, its parameters' storage is refilled by a
//    hook that fires just before autograd reaches the layer. Each micro-batch's gradients are
//    reduce-scattered into the owning ranks' slices as soon as they are complete.
//  - kGradOp (ZeRO-2): every unit is gathered once per step, at its first use, and stays whole until
//    EndStep (no re-gather in backward, none for later micro-batches); gradients are summed whole in
//    fp32 over the step's micro-batches and reduce-scattered once, during the last backward.
//  - kNoShard (ZeRO-1): as kGradOp, but whole parameters are kept between steps too, refreshed by
//    gathers started right after each optimizer update (AfterOptimizerStep).
// In every strategy the next layer's gather is started in the background before the current layer
// computes, and a layer's reduce-scatter runs while the layers before it backpropagate.
//
// Every method marked collective must be called by all ranks in the same order.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "trainer/data/batch.h"
#include "trainer/model/llama.h"
#include "trainer/parallel/communicator.h"
#include "trainer/parallel/flat_param.h"

namespace eft::trainer {

struct LayerCall;  // one layer's part in one micro-batch (sharded_llama.cc)

enum class ShardingStrategy { kFull, kGradOp, kNoShard };

// "full", "grad_op", "no_shard" (spec.parallel.sharding).
Result<ShardingStrategy> ParseShardingStrategy(const std::string& name);
std::string ShardingStrategyName(ShardingStrategy strategy);

struct ShardingOptions {
  ShardingStrategy strategy = ShardingStrategy::kFull;
  at::ScalarType compute_dtype = at::kFloat;  // kBFloat16 for precision: bf16
  bool activation_checkpointing = true;
  c10::Device device = c10::Device(c10::kCPU);  // shards, gathers and compute (batches are moved here)
};

// LoRA (docs/lora.md): the units above then hold the frozen base weights, sharded in the compute
// dtype only (no fp32 master, no gradient); each decoder layer gets a second, trainable unit of fp32
// adapters (LoraParamSpecs), sharded like any unit, gathered whole for each micro-batch (they are
// small) and reduce-scattered like any gradient. Only the adapter units are trainable_units().
struct LoraOptions {
  bool enabled = false;
  int64_t r = 16;
  double scale = 2;   // alpha / r
  double dropout = 0;
  std::vector<std::string> modules;  // layer order (LoraParamSpecs)
  // Dropout masks: a function of (seed, step, Batch::sample_keys' row key, layer, module, position,
  // feature), not of the rank or the micro-batch, so every world size draws the same ones.
  uint64_t seed = 0;
};

class ShardedLlama {
 public:
  ShardedLlama(ModelConfig config, Communicator* comm, ShardingOptions options, LoraOptions lora = {});
  ~ShardedLlama();

  const ModelConfig& config() const { return config_; }
  const ShardingOptions& options() const { return options_; }
  const LoraOptions& lora() const { return lora_; }
  Communicator* comm() const { return comm_; }
  // The model's units: root, then the decoder layers (the frozen base weights under LoRA).
  std::vector<std::unique_ptr<FlatParamUnit>>& units() { return units_; }
  // What the optimizer, clipping and checkpoints see: units(), or under LoRA the adapter units (one
  // per decoder layer, in layer order).
  std::vector<FlatParamUnit*> trainable_units();

  // HF initialisation (and PEFT's for adapters), identical for every world size.
  Status InitRandom(uint64_t seed);
  // Whole parameters of units() by spec, e.g. from a safetensors directory; each rank keeps its slices.
  Status InitFrom(const std::function<Result<at::Tensor>(const ParamSpec&)>& value);
  // The same for the LoRA adapter units.
  Status InitAdapters(const std::function<Result<at::Tensor>(const ParamSpec&)>& value);
  // The optimizer step about to be computed: seeds LoRA dropout, so a resumed run draws the same masks.
  void SetStep(int64_t step) { step_ = step; }

  // Collective: gathers the root for this step's `micro_batches` ForwardBackward calls (the same
  // number on every rank).
  void BeginStep(int64_t micro_batches = 1);
  // Forward and backward of one micro-batch, backpropagating loss_sum * loss_scale. An empty batch
  // (a rank with fewer micro-batches this step) still takes part in every collective and adds no
  // gradient. Collective. Returns the micro-batch's loss sum (unscaled). With LoRA dropout the
  // batch needs sample_keys.
  double ForwardBackward(const Batch& batch, double loss_scale);
  // Collective: every gradient of the step is in the units' grad() slices when it returns.
  void EndStep();
  // Call after the optimizer changed the shards: kNoShard starts refreshing its whole parameters.
  // Collective.
  void AfterOptimizerStep();

  // Collective: logits [B, T, vocab] in fp32 on the model's device, no gradients (evaluation and tests).
  at::Tensor ForwardLogits(const Batch& batch);
  // Collective, between steps: the summed token loss (labels != -100, as ForwardBackward) of
  // batch_at(0) .. batch_at(count - 1), forward only; the root is gathered once for all of them.
  // Every rank passes the same count; an empty batch joins the collectives and adds 0.
  double EvalLossSum(int64_t count, const std::function<Batch(int64_t)>& batch_at);
  void ZeroGrad();
  // Bytes this rank keeps between steps for parameters and their gradients (the shards, and under
  // kNoShard the whole parameters in the compute dtype).
  int64_t ShardBytes() const;

  // A unit's state that outlives one micro-batch under kGradOp/kNoShard, and the reduce-scatters
  // still running (every strategy). Internal; public for sharded_llama.cc's autograd functions.
  struct KeptUnit {
    at::Tensor params;                // whole, compute dtype; undefined: not gathered
    std::function<void()> gathering;  // a background gather into `params` to wait for
    at::Tensor grad_sum;              // whole fp32 gradient summed over the step's micro-batches
  };
  // Takes a complete gradient of unit `index`'s whole flat vector (any float dtype).
  void AddGrad(size_t index, const at::Tensor& full_grad);

 private:
  struct PendingReduce {
    size_t unit;
    at::Tensor shard;  // this rank's slice of the sum, once `wait` returned
    std::function<void()> wait;
  };
  // `sample_keys`: the batch's (needed for LoRA dropout while training).
  at::Tensor RunLayers(at::Tensor hidden, const AttentionContext& ctx, bool with_grad,
                       const at::Tensor& sample_keys = {});
  bool Keeps() const { return options_.strategy != ShardingStrategy::kFull; }
  // The unit whose gradient AddGrad(index, ...) receives.
  FlatParamUnit& Trainable(size_t index) { return lora_.enabled ? *adapters_[index] : *units_[index]; }
  // Starts reducing `full_grad` of unit `index` in the background.
  void StartReduce(size_t index, at::Tensor full_grad);
  // Waits for reduce-scatters until at most `keep` are still running, oldest first.
  void FinishReduces(size_t keep);
  // The batch's tensors on the model's device; an empty batch becomes one untrained padding token.
  Batch OnDevice(const Batch& batch) const;

  ModelConfig config_;
  Communicator* comm_;
  ShardingOptions options_;
  std::vector<std::unique_ptr<FlatParamUnit>> units_;
  LoraOptions lora_;
  std::vector<std::unique_ptr<FlatParamUnit>> adapters_;  // LoRA: by unit index (none for the root)
  int64_t step_ = 0;
  std::vector<KeptUnit> kept_;  // by unit index; used under kGradOp/kNoShard
  std::vector<PendingReduce> reducing_;
  int64_t micro_batches_ = 1, micro_index_ = 0;
  at::Tensor root_full_;     // the gathered root during a step (autograd leaf)
  RootWeights root_;         // views of root_full_
  at::Tensor grad_token_;    // a leaf that makes autograd call the parameter-gather functions
  // The current micro-batch's layer calls: autograd functions and hooks point into them until the
  // backward pass, which ends before the next micro-batch starts.
  std::vector<std::unique_ptr<LayerCall>> calls_;
};

}  // namespace eft::trainer
