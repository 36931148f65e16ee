// TimedCommunicator: forwards every collective to another Communicator and adds up how long the
// caller was blocked in them (synchronous calls, and the waits of asynchronous ones). That sum is
// the "waiting on communication" part of a step's timeline: communication that overlaps compute
// costs nothing here, only the part the trainer thread had to wait for.
//
// Used from one thread (the rank's training loop), like the Communicator it wraps. Time is read on
// the Clock given (the trainer's: its step timeline is all on one clock).
#pragma once

#include <memory>

#include "common/clock.h"
#include "trainer/parallel/communicator.h"

namespace eft::trainer {

class TimedCommunicator final : public Communicator {
 public:
  // `clock` is not owned.
  explicit TimedCommunicator(std::unique_ptr<Communicator> inner, const Clock* clock = RealClock::Get())
      : inner_(std::move(inner)), clock_(clock) {}

  // Seconds spent blocked in collectives since construction.
  double blocked_seconds() const { return *blocked_; }

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  std::string backend() const override { return inner_->backend(); }
  void AllGather(const at::Tensor& shard, at::Tensor& full) override;
  std::function<void()> AllGatherAsync(const at::Tensor& shard, at::Tensor& full) override;
  std::function<void()> GatherAsync(const at::Tensor& shard, at::Tensor& full, int root) override;
  void ReduceScatterSum(const at::Tensor& full, at::Tensor& shard) override;
  std::function<void()> ReduceScatterSumAsync(const at::Tensor& full, at::Tensor& shard) override;
  void AllReduceSum(at::Tensor& tensor) override;
  void Broadcast(at::Tensor& tensor, int root) override;
  void Barrier() override;

 private:
  std::unique_ptr<Communicator> inner_;
  const Clock* clock_;
  // Shared with the wait functions handed out, which may outlive a call but not the communicator.
  std::shared_ptr<double> blocked_ = std::make_shared<double>(0.0);
};

}  // namespace eft::trainer
