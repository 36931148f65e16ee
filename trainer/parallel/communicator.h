// Communicator: the collectives FSDP needs, behind one interface so the trainer does not care
// whether ranks talk over Gloo (CPU) or NCCL (GPU), or are alone (world size 1).
//
// Every rank must call the same collectives in the same order with tensors of the same shapes.
// Tensors must be contiguous. Supported dtypes: fp32 everywhere; bf16/fp16 for AllGather and Gather
// (moved as raw 16-bit values, bit-exact, because Gloo refuses bf16).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "common/status.h"

namespace eft::trainer {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual std::string backend() const = 0;

  // full[r * n : (r + 1) * n] = shard of rank r, where n = shard.numel() and full.numel() = W * n.
  virtual void AllGather(const at::Tensor& shard, at::Tensor& full) = 0;
  // Starts the same all-gather and returns at once; calling the result waits for it (exactly once).
  // The tensors must stay alive until then. Asynchronous and synchronous collectives must still be
  // issued in the same order on every rank.
  virtual std::function<void()> AllGatherAsync(const at::Tensor& shard, at::Tensor& full) = 0;
  // The same pieces, to `root` only: on root, full[r * n : (r + 1) * n] = shard of rank r; on the
  // other ranks `full` is not used (it may be undefined). Half an all-gather's traffic when one rank
  // needs the whole (a full checkpoint's writer), and no memory for it elsewhere. Same ordering
  // rules as AllGatherAsync. This default all-gathers into a temporary on the other ranks (NCCL);
  // Gloo and world size 1 move only what root needs.
  virtual std::function<void()> GatherAsync(const at::Tensor& shard, at::Tensor& full, int root);
  void Gather(const at::Tensor& shard, at::Tensor& full, int root) { GatherAsync(shard, full, root)(); }
  // shard = sum over ranks r of full_r[rank * n : (rank + 1) * n] (fp32). The sum is taken in rank
  // order on every backend, so results do not depend on timing.
  virtual void ReduceScatterSum(const at::Tensor& full, at::Tensor& shard) { ReduceScatterSumAsync(full, shard)(); }
  // Starts the same reduce-scatter and returns at once; calling the result waits for it and leaves
  // the sum in `shard` (exactly once). Both tensors must stay alive, and `full` unchanged, until then.
  virtual std::function<void()> ReduceScatterSumAsync(const at::Tensor& full, at::Tensor& shard) = 0;
  virtual void AllReduceSum(at::Tensor& tensor) = 0;
  virtual void Broadcast(at::Tensor& tensor, int root) = 0;
  virtual void Barrier() = 0;
};

struct RendezvousOptions {
  int rank = 0;
  int world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // The numeric address this rank's collectives bind to and tell their peers (EFT_NODE_ADDRESS);
  // "": chosen as without eft (below).
  std::string node_address;
};

// World size 1: collectives are copies. Gloo otherwise (TCPStore rendezvous at master_addr:port,
// rank 0 hosting the store), its device bound to GLOO_SOCKET_IFNAME's interface when set (as in
// PyTorch), else to node_address, else to loopback when master_addr is loopback, else to what this
// host's name resolves to (Gloo's default).
Result<std::unique_ptr<Communicator>> CreateCpuCommunicator(const RendezvousOptions& options);

// NCCL between GPU ranks on `device` (same rendezvous). FailedPrecondition when this eft-train was
// built without NCCL. The bookkeeping collectives also accept CPU tensors (staged through the GPU).
Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const RendezvousOptions& options, c10::Device device);
// Whether this build has the NCCL communicator (EFT_WITH_NCCL: a LibTorch with CUDA and NCCL).
bool NcclCommunicatorBuilt();

// How GPU ranks talk (EFT_GPU_COLLECTIVES, docs/gpu.md): NCCL, or Gloo with every tensor staged
// through host memory, which is slow but lets ranks share a GPU (NCCL refuses two ranks on one
// device): for trying multi-rank jobs on a one-GPU machine, and for checking eft's multi-rank GPU
// code where only one GPU is at hand (bench/gpu/run.sh).
enum class GpuCollectives { kNccl, kGlooStaged };
// "" or "nccl", "gloo"; InvalidArgument naming EFT_GPU_COLLECTIVES otherwise.
Result<GpuCollectives> ParseGpuCollectives(const std::string& value);

// `host`'s collectives (a CPU communicator) for tensors on any device: each collective copies its
// inputs to host memory when issued and its results back into the caller's tensors when waited on,
// both copies synchronous with `device`. Barrier also waits for `device`'s queued work, as NCCL's does.
std::unique_ptr<Communicator> StageThroughHost(std::unique_ptr<Communicator> host, c10::Device device);

// The communicator for ranks computing on `device`: world size 1 needs none; GPUs talk over NCCL (or
// staged Gloo, as `gpu` says), CPUs over Gloo. ALREADY_EXISTS when this is rank 0 and another program
// holds MASTER_PORT (the rank then exits rank::ExitCode::kRendezvousPortBusy and the controller
// retries on another port).
Result<std::unique_ptr<Communicator>> CreateCommunicator(const RendezvousOptions& options, c10::Device device,
                                                         GpuCollectives gpu = GpuCollectives::kNccl);

}  // namespace eft::trainer
