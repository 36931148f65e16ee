// Fsdp: the sharding side of a model, apart from the model's maths. It owns the model's FSDP units
// (unit 0 the root, units 1..L a chain of layers computed in order; under LoRA a trainable adapter
// unit beside each layer) and decides when whole parameters exist and when gradients are reduced.
// The model hands it each layer's computation (LayerFn) and uses the gathered root itself.
//
// Master weights, their gradients and the optimizer state are always sharded (each rank holds 1/W of
// every unit, in fp32); the strategy decides how long whole parameters live and how often gradients
// are reduced (docs/architecture.md, "Sharding strategies"):
//  - kFull (ZeRO-3): the root is gathered once per step and stays whole until EndStep, like FSDP's
//    root module; each layer is gathered just before it computes and freed right after. Its
//    backward re-gathers it: with activation checkpointing the layer is recomputed from its saved
//    input inside a custom autograd function; without, its parameters' storage is refilled by a
//    hook that fires just before autograd reaches the layer. Each micro-batch's gradients are
//    reduce-scattered into the owning ranks' slices as soon as they are complete.
//  - kGradOp (ZeRO-2): every unit is gathered once per step, at its first use, and stays whole until
//    EndStep (no re-gather in backward, none for later micro-batches); gradients are summed whole in
//    fp32 over the step's micro-batches and reduce-scattered once, during the last backward (at
//    W = 1, with nothing to reduce, they are added into the gradient slice directly).
//  - kNoShard (ZeRO-1): as kGradOp, but whole parameters are kept between steps too, refreshed by
//    gathers started right after each optimizer update (AfterOptimizerStep).
// In every strategy the next layer's gather is started in the background before the current layer
// computes, and a layer's reduce-scatter runs while the layers before it backpropagate.
//
// Under LoRA the base units are frozen (sharded in the compute dtype only: no fp32 master, no
// gradient, and no gradient of theirs is ever computed); the adapter units are gathered whole for
// each micro-batch (they are small) and reduce-scattered like any gradient.
//
// Every method marked collective must be called by all ranks in the same order.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "common/status.h"
#include "trainer/parallel/communicator.h"
#include "trainer/parallel/flat_param.h"

namespace eft::trainer {

struct LayerCall;  // one layer's part in one micro-batch (fsdp.cc)

enum class ShardingStrategy { kFull, kGradOp, kNoShard };

// "full", "grad_op", "no_shard" (spec.parallel.sharding).
Result<ShardingStrategy> ParseShardingStrategy(const std::string& name);
std::string ShardingStrategyName(ShardingStrategy strategy);

// The strategy and activation checkpointing are the spec's (parallel.sharding,
// training.activation_checkpointing): no defaults here, the trainer passes the spec's
// (BuildShardingOptions in trainer/train/build.h) and tests say which they test.
struct ShardingOptions {
  ShardingOptions(ShardingStrategy strategy, bool activation_checkpointing)
      : strategy(strategy), activation_checkpointing(activation_checkpointing) {}
  ShardingStrategy strategy;
  bool activation_checkpointing;
  at::ScalarType compute_dtype = at::kFloat;  // kBFloat16 for precision: bf16
  c10::Device device = c10::Device(c10::kCPU);  // shards, gathers and compute (batches are moved here)
};

class Fsdp {
 public:
  // Layer `index` (1..L) of the model on `hidden`: `params` are the unit's whole parameters in the
  // compute dtype (FlatParamUnit::Views' order), `adapters` its LoRA unit's whole fp32 flat vector
  // (undefined without LoRA). Called again in backward when activation checkpointing recomputes the
  // layer, so it must be a pure function of its arguments and of what it captured for the micro-batch.
  using LayerFn = std::function<at::Tensor(size_t index, const std::vector<at::Tensor>& params,
                                           const at::Tensor& adapters, const at::Tensor& hidden)>;

  // `adapters`: empty (full fine-tuning), or one per unit with none (null) for the root.
  Fsdp(std::vector<std::unique_ptr<FlatParamUnit>> units, std::vector<std::unique_ptr<FlatParamUnit>> adapters,
       Communicator* comm, ShardingOptions options);
  ~Fsdp();

  const ShardingOptions& options() const { return options_; }
  Communicator* comm() const { return comm_; }
  bool lora() const { return !adapters_.empty(); }
  std::vector<std::unique_ptr<FlatParamUnit>>& units() { return units_; }
  const std::vector<std::unique_ptr<FlatParamUnit>>& units() const { return units_; }
  // By unit index (null for the root); empty without LoRA.
  std::vector<std::unique_ptr<FlatParamUnit>>& adapters() { return adapters_; }
  // The units the optimizer updates: the adapters under LoRA, else all units.
  std::vector<FlatParamUnit*> trainable_units();

  // Collective: the step's root parameters, whole in the compute dtype (FlatParamUnit::Views' order;
  // each an autograd leaf unless frozen), for `micro_batches` micro-batches (the same number on
  // every rank).
  const std::vector<at::Tensor>& BeginStep(int64_t micro_batches);
  // Before a micro-batch's forward: refuses more micro-batches than BeginStep announced.
  void BeginMicroBatch();
  // Collective: the layers on `hidden`, in order. with_grad: for a backward that ends before the
  // next RunLayers (its autograd functions and hooks point into this call); else forward only.
  at::Tensor RunLayers(at::Tensor hidden, bool with_grad, LayerFn layer);
  // Collective, after the micro-batch's backward: hands over the gradients autograd left in leaves
  // (the root's, and the adapters' without checkpointing) and, under kFull, finishes its reductions.
  void EndMicroBatch();
  // Collective: every gradient of the step is in the trainable units' grad() slices when it returns.
  void EndStep();
  // Call after the optimizer changed the shards: kNoShard starts refreshing its whole parameters.
  // Collective.
  void AfterOptimizerStep();
  // Collective: the root gathered for a forward without gradients (evaluation).
  at::Tensor GatherRoot() const;
  // Drops what the last RunLayers kept for its backward.
  void ReleaseLayers();
  void ZeroGrad();
  // Bytes this rank keeps between steps for parameters and their gradients (the shards, and under
  // kNoShard the whole parameters in the compute dtype).
  int64_t ShardBytes() const;

  // A unit's state that outlives one micro-batch under kGradOp/kNoShard. Internal; public for
  // fsdp.cc's autograd functions.
  struct KeptUnit {
    at::Tensor params;                // whole, compute dtype; undefined: not gathered
    std::function<void()> gathering;  // a background gather into `params` to wait for
    at::Tensor grad_sum;              // whole fp32 gradient summed over the step's micro-batches (W > 1)
  };
  // Takes a complete gradient of unit `index`'s whole flat vector (any float dtype).
  void AddGrad(size_t index, const at::Tensor& full_grad);
  // The same, given as one gradient per parameter (FlatParamUnit::FlatGradient's form).
  void AddGrads(size_t index, const std::vector<at::Tensor>& grads);

 private:
  struct PendingReduce {
    size_t unit;
    at::Tensor shard;  // this rank's slice of the sum, once `wait` returned
    std::function<void()> wait;
  };
  bool Keeps() const { return options_.strategy != ShardingStrategy::kFull; }
  // The unit whose gradient AddGrad(index, ...) receives.
  FlatParamUnit& Trainable(size_t index) { return lora() ? *adapters_[index] : *units_[index]; }
  // Starts reducing `full_grad` of unit `index` in the background (world size > 1).
  void StartReduce(size_t index, at::Tensor full_grad);
  // kGradOp/kNoShard: after the step's last micro-batch added to unit `index`'s grad_sum, reduces it.
  void ReduceSumAtStepEnd(size_t index);
  // Waits for reduce-scatters until at most `keep` are still running, oldest first.
  void FinishReduces(size_t keep);

  Communicator* comm_;
  ShardingOptions options_;
  std::vector<std::unique_ptr<FlatParamUnit>> units_;
  std::vector<std::unique_ptr<FlatParamUnit>> adapters_;
  std::vector<KeptUnit> kept_;  // by unit index; used under kGradOp/kNoShard
  std::vector<PendingReduce> reducing_;
  int64_t micro_batches_ = 1, micro_index_ = 0;
  at::Tensor root_full_;                 // the gathered root during a step
  std::vector<at::Tensor> root_params_;  // its parameters, each a leaf of its own (FlatGradient)
  at::Tensor grad_token_;  // a leaf that makes autograd call the parameter-gather functions
  LayerFn layer_;          // the last RunLayers' layer function, which its backward calls again
  // The current micro-batch's layer calls: autograd functions and hooks point into them until the
  // backward pass, which ends before the next micro-batch starts.
  std::vector<std::unique_ptr<LayerCall>> calls_;
};

}  // namespace eft::trainer
