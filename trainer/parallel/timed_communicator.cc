#include "trainer/parallel/timed_communicator.h"

#include <chrono>

namespace eft::trainer {
namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Runs `f`, adding its wall time to *total.
template <typename F>
void Timed(double* total, F&& f) {
  const double start = Now();
  f();
  *total += Now() - start;
}

std::function<void()> TimedWait(std::shared_ptr<double> total, std::function<void()> wait) {
  return [total = std::move(total), wait = std::move(wait)] { Timed(total.get(), wait); };
}

}  // namespace

void TimedCommunicator::AllGather(const at::Tensor& shard, at::Tensor& full) {
  Timed(blocked_.get(), [&] { inner_->AllGather(shard, full); });
}

std::function<void()> TimedCommunicator::AllGatherAsync(const at::Tensor& shard, at::Tensor& full) {
  return TimedWait(blocked_, inner_->AllGatherAsync(shard, full));
}

std::function<void()> TimedCommunicator::GatherAsync(const at::Tensor& shard, at::Tensor& full, int root) {
  return TimedWait(blocked_, inner_->GatherAsync(shard, full, root));
}

void TimedCommunicator::ReduceScatterSum(const at::Tensor& full, at::Tensor& shard) {
  Timed(blocked_.get(), [&] { inner_->ReduceScatterSum(full, shard); });
}

std::function<void()> TimedCommunicator::ReduceScatterSumAsync(const at::Tensor& full, at::Tensor& shard) {
  return TimedWait(blocked_, inner_->ReduceScatterSumAsync(full, shard));
}

void TimedCommunicator::AllReduceSum(at::Tensor& tensor) {
  Timed(blocked_.get(), [&] { inner_->AllReduceSum(tensor); });
}

void TimedCommunicator::Broadcast(at::Tensor& tensor, int root) {
  Timed(blocked_.get(), [&] { inner_->Broadcast(tensor, root); });
}

void TimedCommunicator::Barrier() {
  Timed(blocked_.get(), [&] { inner_->Barrier(); });
}

}  // namespace eft::trainer
