#include "worker/snapshot_stager.h"

#include <set>

#include "common/logging.h"
#include "common/stopwatch.h"

namespace eft::worker {
namespace {

std::string OrderKey(const v1::StageOrder& o) {
  std::string key = o.job_id() + '\n' + std::to_string(o.attempt()) + '\n' + std::to_string(o.step()) + '\n' +
                    std::to_string(o.world_size()) + '\n' + o.dir() + '\n';
  for (int r : o.ranks()) key += std::to_string(r) + ',';
  return key;
}

}  // namespace

SnapshotStager::SnapshotStager(SnapshotStore* store, std::function<void()> on_done)
    : store_(store), on_done_(std::move(on_done)) {}

SnapshotStager::~SnapshotStager() { Stop(); }

void SnapshotStager::Start() { thread_ = std::thread([this] { Loop(); }); }

void SnapshotStager::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void SnapshotStager::Update(const google::protobuf::RepeatedPtrField<v1::StageOrder>& orders) {
  std::set<std::string> listed;
  bool added = false;
  {
    MutexLock lock(&mu_);
    for (const auto& o : orders) {
      const std::string key = OrderKey(o);
      listed.insert(key);
      if (orders_.try_emplace(key, Order{o, std::nullopt}).second) {
        queue_.push_back(key);
        added = true;
      }
    }
    for (auto it = orders_.begin(); it != orders_.end();) {
      it = listed.count(it->first) ? std::next(it) : orders_.erase(it);
    }
  }
  if (added) cv_.NotifyAll();
}

std::vector<v1::StageResult> SnapshotStager::Results() const {
  std::vector<v1::StageResult> out;
  MutexLock lock(&mu_);
  for (const auto& [key, o] : orders_) {
    if (o.result) out.push_back(*o.result);
  }
  return out;
}

void SnapshotStager::Loop() {
  while (true) {
    std::string key;
    v1::StageOrder order;
    {
      MutexLock lock(&mu_);
      cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return stop_ || !queue_.empty(); });
      if (stop_) return;
      key = queue_.front();
      queue_.pop_front();
      auto it = orders_.find(key);
      if (it == orders_.end()) continue;  // no longer asked for
      order = it->second.order;
    }
    const Stopwatch took;
    v1::StageResult result = store_->Stage(order);
    if (result.error().empty()) {
      EFT_LOG(INFO) << "staged " << order.ranks_size() << (order.ranks_size() == 1 ? " shard" : " shards")
                    << " of job " << order.job_id() << " attempt " << order.attempt() << " step " << order.step()
                    << " into " << order.dir() << " in " << took.Seconds() << " s";
    } else {
      EFT_LOG(WARNING) << "cannot stage the memory snapshot of job " << order.job_id() << " attempt "
                       << order.attempt() << " step " << order.step() << " into " << order.dir() << ": "
                       << result.error();
    }
    {
      MutexLock lock(&mu_);
      if (auto it = orders_.find(key); it != orders_.end()) it->second.result = std::move(result);
    }
    if (on_done_) on_done_();
  }
}

}  // namespace eft::worker
