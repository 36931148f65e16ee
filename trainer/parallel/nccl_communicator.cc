// NCCL communicator (GPU ranks), on c10d's ProcessGroupNCCL, which runs every collective on its
// own CUDA stream and makes the caller's current stream wait for the result when the work is
// waited on: FlatParamUnit's prefetch overlaps compute exactly as it does on Gloo. Compiled only
// against a LibTorch with CUDA and NCCL (EFT_WITH_NCCL, see trainer/parallel/CMakeLists.txt).
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "trainer/parallel/device.h"
#include "trainer/parallel/rendezvous.h"

namespace eft::trainer {
namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg, int rank,
                   int world, c10::Device device)
      : store_(std::move(store)), pg_(std::move(pg)), rank_(rank), world_(world), device_(device) {}

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "nccl"; }

  void AllGather(const at::Tensor& shard, at::Tensor& full) override { AllGatherAsync(shard, full)(); }

  std::function<void()> AllGatherAsync(const at::Tensor& shard, at::Tensor& full) override {
    TORCH_CHECK(full.numel() == shard.numel() * world_, "AllGather: full has ", full.numel(), " elements, expected ",
                shard.numel() * world_);
    TORCH_CHECK(full.is_cuda() && shard.is_cuda(), "AllGather over NCCL needs GPU tensors");
    auto tensors = std::make_shared<std::pair<at::Tensor, at::Tensor>>(full, shard);
    c10::intrusive_ptr<c10d::Work> work = pg_->_allgather_base(tensors->first, tensors->second);
    return [work, tensors] { work->wait(); };
  }

  std::function<void()> ReduceScatterSumAsync(const at::Tensor& full, at::Tensor& shard) override {
    TORCH_CHECK(full.scalar_type() == at::kFloat && shard.scalar_type() == at::kFloat, "ReduceScatterSum: fp32 only");
    TORCH_CHECK(full.numel() == shard.numel() * world_, "ReduceScatterSum: size mismatch");
    auto tensors = std::make_shared<std::pair<at::Tensor, at::Tensor>>(full.contiguous(), shard);
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    c10::intrusive_ptr<c10d::Work> work = pg_->_reduce_scatter_base(tensors->second, tensors->first, opts);
    return [work, tensors] { work->wait(); };
  }

  // The small bookkeeping collectives (token counts, checkpoint flags) come as CPU tensors: NCCL
  // only moves GPU memory, so they travel through a device copy.
  void AllReduceSum(at::Tensor& tensor) override {
    OnDevice(tensor, [&](at::Tensor& t) {
      std::vector<at::Tensor> tensors{t};
      pg_->allreduce(tensors)->wait();
    });
  }

  void Broadcast(at::Tensor& tensor, int root) override {
    OnDevice(tensor, [&](at::Tensor& t) {
      std::vector<at::Tensor> tensors{t};
      c10d::BroadcastOptions opts;
      opts.rootRank = root;
      pg_->broadcast(tensors, opts)->wait();
    });
  }

  void Barrier() override {
    at::Tensor token = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device_));
    std::vector<at::Tensor> tensors{token};
    pg_->allreduce(tensors)->wait();
    token.cpu();  // waits for the device, so the barrier holds for host code too
  }

 private:
  template <typename F>
  void OnDevice(at::Tensor& tensor, F&& collective) {
    if (tensor.is_cuda()) {
      collective(tensor);
      return;
    }
    at::Tensor staged = tensor.to(device_);
    collective(staged);
    tensor.copy_(staged.cpu());
  }

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
  int rank_, world_;
  c10::Device device_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const RendezvousOptions& o, c10::Device device) {
  // Before the rendezvous, which would otherwise wait for peers and then fail deep inside NCCL.
  if (!device.is_cuda() || device.index() >= VisibleCudaDevices()) {
    return Status::FailedPrecondition("NCCL needs a GPU for every rank, but rank " + std::to_string(o.rank) + " has " +
                                      device.str() + " and sees " + std::to_string(VisibleCudaDevices()) + " GPU(s)");
  }
  internal::DisableFlightRecorderUnlessAsked();
  try {
    auto store = internal::ConnectStore(o);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = o.timeout;
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, o.rank, o.world, options);
    return std::unique_ptr<Communicator>(new NcclCommunicator(store, pg, o.rank, o.world, device));
  } catch (const std::exception& e) {
    return internal::RendezvousFailed(o, e);
  }
}

}  // namespace eft::trainer
