#include "trainer/parallel/timed_communicator.h"

#include "common/stopwatch.h"

namespace eft::trainer {
namespace {

// Runs `f`, adding the time it took on `clock` to *total.
template <typename F>
void Timed(const Clock* clock, double* total, F&& f) {
  const Stopwatch watch(clock);
  f();
  *total += watch.Seconds();
}

std::function<void()> TimedWait(const Clock* clock, std::shared_ptr<double> total, std::function<void()> wait) {
  return [clock, total = std::move(total), wait = std::move(wait)] { Timed(clock, total.get(), wait); };
}

}  // namespace

void TimedCommunicator::AllGather(const at::Tensor& shard, at::Tensor& full) {
  Timed(clock_, blocked_.get(), [&] { inner_->AllGather(shard, full); });
}

std::function<void()> TimedCommunicator::AllGatherAsync(const at::Tensor& shard, at::Tensor& full) {
  return TimedWait(clock_, blocked_, inner_->AllGatherAsync(shard, full));
}

std::function<void()> TimedCommunicator::GatherAsync(const at::Tensor& shard, at::Tensor& full, int root) {
  return TimedWait(clock_, blocked_, inner_->GatherAsync(shard, full, root));
}

void TimedCommunicator::ReduceScatterSum(const at::Tensor& full, at::Tensor& shard) {
  Timed(clock_, blocked_.get(), [&] { inner_->ReduceScatterSum(full, shard); });
}

std::function<void()> TimedCommunicator::ReduceScatterSumAsync(const at::Tensor& full, at::Tensor& shard) {
  return TimedWait(clock_, blocked_, inner_->ReduceScatterSumAsync(full, shard));
}

void TimedCommunicator::AllReduceSum(at::Tensor& tensor) {
  Timed(clock_, blocked_.get(), [&] { inner_->AllReduceSum(tensor); });
}

void TimedCommunicator::Broadcast(at::Tensor& tensor, int root) {
  Timed(clock_, blocked_.get(), [&] { inner_->Broadcast(tensor, root); });
}

void TimedCommunicator::Barrier() {
  Timed(clock_, blocked_.get(), [&] { inner_->Barrier(); });
}

}  // namespace eft::trainer
