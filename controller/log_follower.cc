#include "controller/log_follower.h"

#include <algorithm>

namespace eft::controller {

LogFollower::LogFollower(Controller* controller, v1::GetLogsRequest request, LogFollowerOptions options)
    : controller_(controller),
      request_(std::move(request)),
      options_(options),
      quiet_since_(std::chrono::steady_clock::now()) {}

Result<LogFollower> LogFollower::Open(Controller* controller, const v1::GetLogsRequest& request,
                                      LogFollowerOptions options) {
  auto job = controller->GetJob(request.job_id());
  if (!job.ok()) return job.status();
  return LogFollower(controller, request, options);
}

Result<LogFollower::Step> LogFollower::Poll(const std::function<bool(v1::LogChunk&&)>& emit) {
  LogStore& logs = controller_->logs();
  bool progressed = false;
  size_t budget = options_.max_bytes_per_poll;
  for (const LogId& id : logs.List(request_.job_id())) {
    if (request_.has_rank() && id.rank != request_.rank()) continue;
    if (request_.attempt() != 0 && id.attempt != request_.attempt()) continue;
    int64_t& offset = sent_[id];
    while (true) {
      if (budget == 0) return Step::kAgain;
      auto data = logs.Read(id, offset, std::min(options_.chunk_bytes, budget));
      if (!data.ok()) return data.status();
      if (data->empty()) break;
      budget -= data->size();
      v1::LogChunk chunk;
      chunk.set_job_id(id.job_id);
      chunk.set_attempt(id.attempt);
      chunk.set_rank(id.rank);
      chunk.set_offset(offset);
      offset += static_cast<int64_t>(data->size());
      chunk.set_data(std::move(data).value());
      if (!emit(std::move(chunk))) return Step::kDone;
      progressed = true;
    }
  }
  if (!request_.follow()) return Step::kDone;
  auto now = std::chrono::steady_clock::now();
  if (progressed) quiet_since_ = now;
  auto job = controller_->GetJob(request_.job_id());
  if (!job.ok()) return job.status();
  if (Controller::IsTerminal(job->state()) && now - quiet_since_ > options_.quiet_period) return Step::kDone;
  return Step::kWait;
}

}  // namespace eft::controller
