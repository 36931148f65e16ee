// Collectives of a CPU communicator (Gloo) for tensors on any device, through host copies: what GPU
// ranks use with EFT_GPU_COLLECTIVES=gloo (communicator.h). Every input is copied to host memory
// when the collective is issued, and every result copied back into the caller's tensor when it is
// waited on; both copies are synchronous with the device. Always a copy, even for CPU tensors: the
// same code runs in the CPU tests as on a GPU.
#include <memory>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "trainer/parallel/communicator.h"

namespace eft::trainer {
namespace {

at::Tensor ToHost(const at::Tensor& t) {
  TORCH_CHECK(t.is_contiguous(), "Communicator: tensors must be contiguous");
  return at::empty(t.sizes(), t.options().device(at::kCPU)).copy_(t);
}

at::Tensor HostLike(const at::Tensor& t) {
  TORCH_CHECK(t.is_contiguous(), "Communicator: tensors must be contiguous");
  return at::empty(t.sizes(), t.options().device(at::kCPU));
}

class HostStagedCommunicator final : public Communicator {
 public:
  HostStagedCommunicator(std::unique_ptr<Communicator> host, c10::Device device)
      : host_(std::move(host)), device_(device) {}

  int rank() const override { return host_->rank(); }
  int world() const override { return host_->world(); }
  std::string backend() const override { return host_->backend() + " (staged through host memory)"; }

  void AllGather(const at::Tensor& shard, at::Tensor& full) override { AllGatherAsync(shard, full)(); }

  std::function<void()> AllGatherAsync(const at::Tensor& shard, at::Tensor& full) override {
    auto staged = std::make_shared<std::pair<at::Tensor, at::Tensor>>(ToHost(shard), HostLike(full));
    std::function<void()> wait = host_->AllGatherAsync(staged->first, staged->second);
    return [wait, staged, full] {
      wait();
      full.copy_(staged->second);
    };
  }

  std::function<void()> GatherAsync(const at::Tensor& shard, at::Tensor& full, int root) override {
    // Only root's `full` is written (elsewhere it may be undefined, and is left alone).
    const bool receives = rank() == root;
    auto staged = std::make_shared<std::pair<at::Tensor, at::Tensor>>(
        ToHost(shard), receives && full.defined() ? HostLike(full) : at::Tensor());
    std::function<void()> wait = host_->GatherAsync(staged->first, staged->second, root);
    return [wait, staged, full, receives] {
      wait();
      if (receives) full.copy_(staged->second);
    };
  }

  std::function<void()> ReduceScatterSumAsync(const at::Tensor& full, at::Tensor& shard) override {
    auto staged = std::make_shared<std::pair<at::Tensor, at::Tensor>>(ToHost(full), HostLike(shard));
    std::function<void()> wait = host_->ReduceScatterSumAsync(staged->first, staged->second);
    return [wait, staged, shard] {
      wait();
      shard.copy_(staged->second);
    };
  }

  void AllReduceSum(at::Tensor& tensor) override {
    at::Tensor staged = ToHost(tensor);
    host_->AllReduceSum(staged);
    tensor.copy_(staged);
  }

  void Broadcast(at::Tensor& tensor, int root) override {
    at::Tensor staged = ToHost(tensor);
    host_->Broadcast(staged, root);
    tensor.copy_(staged);
  }

  void Barrier() override {
    // As NCCL's: the device's queued work is done too when the barrier returns.
    if (!device_.is_cpu()) c10::impl::getDeviceGuardImpl(device_.type())->synchronizeDevice(device_.index());
    host_->Barrier();
  }

 private:
  std::unique_ptr<Communicator> host_;
  c10::Device device_;
};

}  // namespace

std::unique_ptr<Communicator> StageThroughHost(std::unique_ptr<Communicator> host, c10::Device device) {
  return std::make_unique<HostStagedCommunicator>(std::move(host), device);
}

}  // namespace eft::trainer
