// ShardedLlama: a Llama-family model (trainer/model/llama.h) in FSDP units (trainer/parallel/fsdp.h),
// trained a micro-batch at a time, with optional LoRA adapters.
//
// Units: 0 = root (embeddings, final norm, untied head), 1..L = decoder layers. The model's maths is
// llama.h's; when whole parameters exist and when gradients are reduced is Fsdp's (the sharding
// strategies are described there); this class binds the two: the units' parameter specs, the forward
// (embed, layers, loss) and LoRA's dropout seeds.
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
#include "trainer/parallel/fsdp.h"

namespace eft::trainer {

// LoRA (docs/lora.md): the units above then hold the frozen base weights; each decoder layer gets a
// second, trainable unit of fp32 adapters (LoraParamSpecs), which Fsdp handles as it says. Only the
// adapter units are trainable_units().
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
  const ShardingOptions& options() const { return fsdp_.options(); }
  const LoraOptions& lora() const { return lora_; }
  Communicator* comm() const { return fsdp_.comm(); }
  // The model's units: root, then the decoder layers (the frozen base weights under LoRA).
  std::vector<std::unique_ptr<FlatParamUnit>>& units() { return fsdp_.units(); }
  // What the optimizer, clipping and checkpoints see: units(), or under LoRA the adapter units (one
  // per decoder layer, in layer order).
  std::vector<FlatParamUnit*> trainable_units() { return fsdp_.trainable_units(); }

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
  void AfterOptimizerStep() { fsdp_.AfterOptimizerStep(); }

  // Collective: logits [B, T, vocab] in fp32 on the model's device, no gradients (evaluation and tests).
  at::Tensor ForwardLogits(const Batch& batch);
  // Collective, between steps: the summed token loss (labels != -100, as ForwardBackward) of
  // batch_at(0) .. batch_at(count - 1), forward only; the root is gathered once for all of them.
  // Every rank passes the same count; an empty batch joins the collectives and adds 0.
  double EvalLossSum(int64_t count, const std::function<Batch(int64_t)>& batch_at);
  void ZeroGrad() { fsdp_.ZeroGrad(); }
  // Bytes this rank keeps between steps for parameters and their gradients (the shards, and under
  // kNoShard the whole parameters in the compute dtype).
  int64_t ShardBytes() const { return fsdp_.ShardBytes(); }

 private:
  // The decoder layer as Fsdp computes it: llama.h's DecoderLayer on the unit's views, with the
  // layer's LoRA adapters (and, when training with dropout, `dropout_row_seeds[index]`).
  Fsdp::LayerFn Layers(const AttentionContext& ctx, std::vector<at::Tensor> dropout_row_seeds = {});
  // The batch's tensors on the model's device; an empty batch becomes one untrained padding token.
  Batch OnDevice(const Batch& batch) const;

  ModelConfig config_;
  LoraOptions lora_;
  Fsdp fsdp_;
  int64_t step_ = 0;
  RootWeights root_;  // views of the step's gathered root
};

}  // namespace eft::trainer
