#include "controller/grpc_services.h"

#include <thread>

#include "common/logging.h"

namespace eft::controller {

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

namespace {

template <typename T>
grpc::Status Reply(Result<T> result, T* out) {
  if (!result.ok()) return ToGrpc(result.status());
  *out = std::move(result).value();
  return grpc::Status::OK;
}

}  // namespace

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req, v1::Job* out) {
  return Reply(c_->SubmitJob(req->spec(), req->request_id()), out);
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext*, const v1::GetJobRequest* req, v1::Job* out) {
  return Reply(c_->GetJob(req->id()), out);
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                                      v1::ListJobsResponse* out) {
  return Reply(c_->ListJobs(*req), out);
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req, v1::Job* out) {
  return Reply(c_->CancelJob(req->id()), out);
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                      grpc::ServerWriter<v1::Job>* writer) {
  uint64_t version = 0;
  while (!ctx->IsCancelled()) {
    bool changed = false;
    auto job = c_->WaitForJobChange(req->id(), &version, std::chrono::milliseconds(500), &changed);
    if (!job.ok()) return ToGrpc(job.status());
    if (changed && !writer->Write(*job)) return grpc::Status::OK;  // the client went away
    if (Controller::IsTerminal(job->state())) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
}

grpc::Status JobServiceImpl::GetLogs(grpc::ServerContext* ctx, const v1::GetLogsRequest* req,
                                     grpc::ServerWriter<v1::LogChunk>* writer) {
  auto job = c_->GetJob(req->job_id());
  if (!job.ok()) return ToGrpc(job.status());
  constexpr size_t kChunk = 64 * 1024;
  std::map<LogId, int64_t> sent;
  auto quiet_since = std::chrono::steady_clock::now();
  while (!ctx->IsCancelled()) {
    bool progressed = false;
    for (const LogId& id : c_->logs().List(req->job_id())) {
      if (req->has_rank() && id.rank != req->rank()) continue;
      if (req->attempt() != 0 && id.attempt != req->attempt()) continue;
      int64_t& offset = sent[id];
      while (true) {
        auto data = c_->logs().Read(id, offset, kChunk);
        if (!data.ok()) return ToGrpc(data.status());
        if (data->empty()) break;
        v1::LogChunk chunk;
        chunk.set_job_id(id.job_id);
        chunk.set_attempt(id.attempt);
        chunk.set_rank(id.rank);
        chunk.set_offset(offset);
        offset += static_cast<int64_t>(data->size());
        chunk.set_data(std::move(data).value());
        if (!writer->Write(chunk)) return grpc::Status::OK;
        progressed = true;
      }
    }
    if (!req->follow()) return grpc::Status::OK;
    auto now = std::chrono::steady_clock::now();
    if (progressed) quiet_since = now;
    // Workers ship the last lines shortly after their ranks exit: once the job ended, wait for the
    // logs to stay quiet for a moment before closing the stream.
    auto current = c_->GetJob(req->job_id());
    if (!current.ok()) return ToGrpc(current.status());
    if (Controller::IsTerminal(current->state()) && now - quiet_since > std::chrono::seconds(2)) {
      return grpc::Status::OK;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
}

grpc::Status NodeServiceImpl::ListNodes(grpc::ServerContext*, const v1::ListNodesRequest*,
                                        v1::ListNodesResponse* out) {
  *out = c_->ListNodes();
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::DrainNode(grpc::ServerContext*, const v1::DrainNodeRequest* req, v1::Node* out) {
  return Reply(c_->SetDrained(req->name(), true), out);
}

grpc::Status NodeServiceImpl::UndrainNode(grpc::ServerContext*, const v1::UndrainNodeRequest* req, v1::Node* out) {
  return Reply(c_->SetDrained(req->name(), false), out);
}

grpc::Status AgentServiceImpl::Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                                        v1::RegisterResponse* out) {
  return Reply(c_->Register(*req), out);
}

grpc::Status AgentServiceImpl::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                         v1::HeartbeatResponse* out) {
  return Reply(c_->Heartbeat(*req), out);
}

grpc::Status AgentServiceImpl::PushLogs(grpc::ServerContext*, const v1::PushLogsRequest* req,
                                        v1::PushLogsResponse* out) {
  for (const auto& chunk : req->chunks()) {
    LogId id{chunk.job_id(), chunk.attempt(), chunk.rank()};
    if (!IsSafeJobId(id.job_id)) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad job id in log chunk");
    auto end = c_->logs().Append(id, chunk.offset(), chunk.data());
    if (!end.ok()) return ToGrpc(end.status());
    v1::LogOffset* o = out->add_committed();
    o->mutable_key()->set_job_id(id.job_id);
    o->mutable_key()->set_attempt(id.attempt);
    o->mutable_key()->set_rank(id.rank);
    o->set_offset(*end);
  }
  return grpc::Status::OK;
}

}  // namespace eft::controller
