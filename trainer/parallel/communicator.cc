#include "trainer/parallel/communicator.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/listen_port.h"
#include "common/net_address.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "trainer/parallel/rendezvous.h"

#include <vector>

namespace eft::trainer {

std::function<void()> Communicator::GatherAsync(const at::Tensor& shard, at::Tensor& full, int root) {
  if (rank() == root) return AllGatherAsync(shard, full);
  auto scratch = std::make_shared<at::Tensor>(at::empty({shard.numel() * world()}, shard.options()));
  std::function<void()> wait = AllGatherAsync(shard, *scratch);
  return [wait, scratch] { wait(); };  // the scratch lives until the gather is done
}

namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  std::string backend() const override { return "local"; }
  void AllGather(const at::Tensor& shard, at::Tensor& full) override {
    if (full.data_ptr() != shard.data_ptr()) full.copy_(shard);
  }
  std::function<void()> AllGatherAsync(const at::Tensor& shard, at::Tensor& full) override {
    AllGather(shard, full);
    return [] {};
  }
  std::function<void()> GatherAsync(const at::Tensor& shard, at::Tensor& full, int) override {
    AllGather(shard, full);
    return [] {};
  }
  std::function<void()> ReduceScatterSumAsync(const at::Tensor& full, at::Tensor& shard) override {
    if (full.data_ptr() != shard.data_ptr()) shard.copy_(full);
    return [] {};
  }
  void AllReduceSum(at::Tensor&) override {}
  void Broadcast(at::Tensor&, int) override {}
  void Barrier() override {}
};

// Gloo refuses bf16 (and int16); its bits travel as fp16 instead, which Gloo only copies for
// gathers and broadcasts. A reinterpreting view, so the values arrive bit-exact.
at::Tensor AsTransferable(const at::Tensor& t) {
  if (t.scalar_type() == at::kBFloat16) return t.view(at::kHalf);
  return t;
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, int rank,
                   int world)
      : store_(std::move(store)), pg_(std::move(pg)), rank_(rank), world_(world) {}

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "gloo"; }

  void AllGather(const at::Tensor& shard, at::Tensor& full) override { AllGatherAsync(shard, full)(); }

  std::function<void()> AllGatherAsync(const at::Tensor& shard, at::Tensor& full) override {
    TORCH_CHECK(full.numel() == shard.numel() * world_, "AllGather: full has ", full.numel(), " elements, expected ",
                shard.numel() * world_);
    // The list form writes each rank's piece straight into its chunk of `full`.
    auto outputs = std::make_shared<std::vector<std::vector<at::Tensor>>>(
        std::vector<std::vector<at::Tensor>>{AsTransferable(full).chunk(world_)});
    auto inputs = std::make_shared<std::vector<at::Tensor>>(std::vector<at::Tensor>{AsTransferable(shard)});
    c10::intrusive_ptr<c10d::Work> work = pg_->allgather(*outputs, *inputs);
    return [work, outputs, inputs] { work->wait(); };
  }

  std::function<void()> GatherAsync(const at::Tensor& shard, at::Tensor& full, int root) override {
    TORCH_CHECK(root >= 0 && root < world_, "Gather: root ", root, " is not a rank");
    TORCH_CHECK(rank_ != root || full.numel() == shard.numel() * world_, "Gather: full has ", full.numel(),
                " elements, expected ", shard.numel() * world_);
    // Root lists one output per rank (its chunks of `full`); the others must list none.
    auto outputs = std::make_shared<std::vector<std::vector<at::Tensor>>>();
    if (rank_ == root) outputs->push_back(AsTransferable(full).chunk(world_));
    auto inputs = std::make_shared<std::vector<at::Tensor>>(std::vector<at::Tensor>{AsTransferable(shard)});
    c10d::GatherOptions opts;
    opts.rootRank = root;
    c10::intrusive_ptr<c10d::Work> work = pg_->gather(*outputs, *inputs, opts);
    return [work, outputs, inputs] { work->wait(); };
  }

  std::function<void()> ReduceScatterSumAsync(const at::Tensor& full, at::Tensor& shard) override {
    TORCH_CHECK(full.scalar_type() == at::kFloat && shard.scalar_type() == at::kFloat,
                "ReduceScatterSum: fp32 only");
    TORCH_CHECK(full.numel() == shard.numel() * world_, "ReduceScatterSum: size mismatch");
    // Gloo has no reduce-scatter: an all-to-all gives every rank all W contributions to its own
    // chunk, which it then sums itself, in rank order.
    at::Tensor received = at::empty_like(full);
    at::Tensor input = full.contiguous();
    std::vector<int64_t> splits;  // empty: equal splits
    c10::intrusive_ptr<c10d::Work> work = pg_->alltoall_base(received, input, splits, splits);
    const int64_t world = world_;
    return [work, received, input, shard, world]() mutable {
      work->wait();
      at::sum_out(shard, received.view({world, -1}), 0);
    };
  }

  void AllReduceSum(at::Tensor& tensor) override {
    std::vector<at::Tensor> tensors{tensor};
    pg_->allreduce(tensors)->wait();
  }

  void Broadcast(at::Tensor& tensor, int root) override {
    std::vector<at::Tensor> tensors{AsTransferable(tensor)};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    pg_->broadcast(tensors, opts)->wait();
  }

  void Barrier() override { pg_->barrier()->wait(); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  int rank_, world_;
};

}  // namespace

namespace internal {

c10::intrusive_ptr<c10d::Store> ConnectStore(const RendezvousOptions& o) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(o.master_port);
  so.isServer = o.rank == 0;
  so.numWorkers = static_cast<size_t>(o.world);
  so.waitWorkers = true;
  so.timeout = o.timeout;
  return c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
}

void DisableFlightRecorderUnlessAsked() {
  // Once, before any group exists: the recorder reads its size when the first group creates it,
  // and setenv must not race with another rank thread's getenv.
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("TORCH_FR_BUFFER_SIZE") == nullptr && std::getenv("TORCH_NCCL_TRACE_BUFFER_SIZE") == nullptr) {
      ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
    }
  });
}

Status RendezvousFailed(const RendezvousOptions& o, const std::exception& e) {
  // Rank 0 checked the port just before; another program may still have taken it in between.
  if (o.rank == 0 && std::strstr(e.what(), "Address already in use") != nullptr) {
    return Status::AlreadyExists("rendezvous port " + std::to_string(o.master_port) +
                                 " (MASTER_PORT) is in use by another program on this node: " + e.what());
  }
  return Status::Unavailable("rendezvous at " + o.master_addr + ":" + std::to_string(o.master_port) + " as rank " +
                             std::to_string(o.rank) + " of " + std::to_string(o.world) + " failed: " + e.what());
}

}  // namespace internal

Result<std::unique_ptr<Communicator>> CreateCpuCommunicator(const RendezvousOptions& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world) {
    return Status::InvalidArgument("rank " + std::to_string(o.rank) + " is not in [0, " + std::to_string(o.world) + ")");
  }
  if (o.world == 1) return std::unique_ptr<Communicator>(new LocalCommunicator());
  internal::DisableFlightRecorderUnlessAsked();
  try {
    auto store = internal::ConnectStore(o);
    auto options = c10d::ProcessGroupGloo::Options::create(o.timeout);
    // The node's address, which the worker resolved once (docs/architecture.md, "Rank traffic and
    // the node's address"): never what the host name happens to resolve to (127.0.1.1 on many
    // images), which peers cannot reach. Without one, on one machine loopback, across machines the
    // host name's address. GLOO_SOCKET_IFNAME overrides, as in PyTorch.
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (!o.node_address.empty()) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(o.node_address));
    } else if (net::IsLoopback(o.master_addr)) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.world, options);
    return std::unique_ptr<Communicator>(new GlooCommunicator(store, pg, o.rank, o.world));
  } catch (const std::exception& e) {
    return internal::RendezvousFailed(o, e);
  }
}

bool NcclCommunicatorBuilt() {
#ifdef EFT_WITH_NCCL
  return true;
#else
  return false;
#endif
}

#ifndef EFT_WITH_NCCL
Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const RendezvousOptions&, c10::Device) {
  return Status::FailedPrecondition(
      "GPU ranks talk over NCCL, and this eft-train was built against a LibTorch without it (docs/gpu.md)");
}
#endif

Result<GpuCollectives> ParseGpuCollectives(const std::string& value) {
  if (value.empty() || value == "nccl") return GpuCollectives::kNccl;
  if (value == "gloo") return GpuCollectives::kGlooStaged;
  return Status::InvalidArgument("EFT_GPU_COLLECTIVES=" + value + " is not one of nccl, gloo");
}

Result<std::unique_ptr<Communicator>> CreateCommunicator(const RendezvousOptions& o, c10::Device device,
                                                         GpuCollectives gpu) {
  if (o.world > 1 && o.rank == 0) {
    // Checked here rather than left to the store's bind: its error is a generic runtime_error.
    Status port = CheckPortFreeToListen(o.master_port);
    if (port.code() == StatusCode::kAlreadyExists) {
      return Status::AlreadyExists("rendezvous port " + std::to_string(o.master_port) +
                                   " (MASTER_PORT) is in use by another program on this node");
    }
  }
  if (device.is_cpu() || o.world == 1) return CreateCpuCommunicator(o);
  if (o.rank < 0 || o.rank >= o.world) {
    return Status::InvalidArgument("rank " + std::to_string(o.rank) + " is not in [0, " + std::to_string(o.world) + ")");
  }
  if (gpu == GpuCollectives::kGlooStaged) {
    EFT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> gloo, CreateCpuCommunicator(o));
    return StageThroughHost(std::move(gloo), device);
  }
  return CreateNcclCommunicator(o, device);
}

}  // namespace eft::trainer
