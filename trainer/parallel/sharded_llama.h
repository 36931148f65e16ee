// ShardedLlama: a Llama-family model whose parameters live in FSDP units, trained a micro-batch at
// a time.
//
// Units: 0 = root (embeddings, final norm, untied head), 1..L = decoder layers. The root is
// gathered once per step (BeginStep) and stays whole until EndStep, like FSDP's root module; each
// layer is gathered just before it computes (the next layer's gather is started in the background
// first, so communication overlaps compute) and freed right after. Its backward re-gathers it:
// with activation checkpointing the layer is recomputed from its saved input inside a custom
// autograd function; without, its parameters' storage is refilled by a hook that fires just before
// autograd reaches the layer. Every gradient is reduce-scattered into the owning ranks' fp32 slices
// as soon as it is complete.
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

struct ShardingOptions {
  at::ScalarType compute_dtype = at::kFloat;  // kBFloat16 for precision: bf16
  bool activation_checkpointing = true;
  c10::Device device = c10::Device(c10::kCPU);  // shards, gathers and compute (batches are moved here)
};

class ShardedLlama {
 public:
  ShardedLlama(ModelConfig config, Communicator* comm, ShardingOptions options);
  ~ShardedLlama();

  const ModelConfig& config() const { return config_; }
  const ShardingOptions& options() const { return options_; }
  std::vector<std::unique_ptr<FlatParamUnit>>& units() { return units_; }

  // HF initialisation, identical for every world size.
  Status InitRandom(uint64_t seed);
  // Whole parameters by spec, e.g. from a safetensors directory; each rank keeps its slices.
  Status InitFrom(const std::function<Result<at::Tensor>(const ParamSpec&)>& value);

  // Collective: gathers the root for this step's micro-batches.
  void BeginStep();
  // Forward and backward of one micro-batch, backpropagating loss_sum * loss_scale. An empty batch
  // (a rank with fewer micro-batches this step) still takes part in every collective and adds no
  // gradient. Collective. Returns the micro-batch's loss sum (unscaled).
  double ForwardBackward(const Batch& batch, double loss_scale);
  void EndStep();

  // Collective: logits [B, T, vocab] in fp32 on the model's device, no gradients (evaluation and tests).
  at::Tensor ForwardLogits(const Batch& batch);
  // Collective: every parameter whole, fp32, on the CPU, by HF name, in checkpoint order.
  std::vector<std::pair<std::string, at::Tensor>> FullParameters();
  void ZeroGrad();
  // Bytes this rank keeps between steps for parameters and their gradients (the shards).
  int64_t ShardBytes() const;

 private:
  at::Tensor RunLayers(at::Tensor hidden, const AttentionContext& ctx, bool with_grad);
  // The batch's tensors on the model's device; an empty batch becomes one untrained padding token.
  Batch OnDevice(const Batch& batch) const;

  ModelConfig config_;
  Communicator* comm_;
  ShardingOptions options_;
  std::vector<std::unique_ptr<FlatParamUnit>> units_;
  at::Tensor root_full_;     // the gathered root during a step (autograd leaf)
  RootWeights root_;         // views of root_full_
  at::Tensor grad_token_;    // a leaf that makes autograd call the parameter-gather functions
  // The current micro-batch's layer calls: autograd functions and hooks point into them until the
  // backward pass, which ends before the next micro-batch starts.
  std::vector<std::unique_ptr<LayerCall>> calls_;
};

}  // namespace eft::trainer
