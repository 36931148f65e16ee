#include "controller/grpc_services.h"

#include <thread>

#include "common/logging.h"
#include "controller/log_follower.h"
#include "controller/records.h"

namespace eft::controller {

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

Result<Principal> CheckAccess(const Authenticator* auth, Controller* c, const std::string& authorization, Action action,
                              const std::string& job_id) {
  if (!auth) {
    Principal anonymous;
    anonymous.anonymous = true;
    anonymous.role = Role::kAdmin;
    return anonymous;
  }
  EFT_ASSIGN_OR_RETURN(Principal p, auth->Authenticate(authorization));
  if (action != Action::kCancelJob) {
    EFT_RETURN_IF_ERROR(Authorize(p, action));
    return p;
  }
  // Refuse those who may cancel no job at all before saying whether the job exists.
  EFT_RETURN_IF_ERROR(Authorize(p, action, p.user));
  EFT_ASSIGN_OR_RETURN(std::string owner, c->JobOwner(job_id));
  EFT_RETURN_IF_ERROR(Authorize(p, action, owner));
  return p;
}

std::string AuthorizationMetadata(const grpc::ServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

namespace {

template <typename T>
grpc::Status Reply(Result<T> result, T* out) {
  if (!result.ok()) return ToGrpc(result.status());
  *out = std::move(result).value();
  return grpc::Status::OK;
}

}  // namespace

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req, v1::Job* out) {
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kSubmitJob);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status s = AuthorizePriority(*who, req->spec().priority(), c_->config().max_submitter_priority); !s.ok()) {
    return ToGrpc(s);
  }
  return Reply(c_->SubmitJob(req->spec(), req->request_id(), who->anonymous ? "" : who->user), out);
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* out) {
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kReadJobs);
  if (!who.ok()) return ToGrpc(who.status());
  return Reply(c_->GetJob(req->id()), out);
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                      v1::ListJobsResponse* out) {
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kReadJobs);
  if (!who.ok()) return ToGrpc(who.status());
  return Reply(c_->ListJobs(*req), out);
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req, v1::Job* out) {
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kCancelJob, req->id());
  if (!who.ok()) return ToGrpc(who.status());
  return Reply(c_->CancelJob(req->id()), out);
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                      grpc::ServerWriter<v1::Job>* writer) {
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kReadJobs);
  if (!who.ok()) return ToGrpc(who.status());
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
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kReadLogs);
  if (!who.ok()) return ToGrpc(who.status());
  auto follower = LogFollower::Open(c_, *req);
  if (!follower.ok()) return ToGrpc(follower.status());
  // This handler owns its thread, so it may simply sleep between polls.
  while (!ctx->IsCancelled()) {
    auto step = follower->Poll([&](v1::LogChunk&& chunk) { return writer->Write(chunk); });
    if (!step.ok()) return ToGrpc(step.status());
    if (*step == LogFollower::Step::kDone) return grpc::Status::OK;  // complete, or the client went away
    if (*step == LogFollower::Step::kWait) std::this_thread::sleep_for(follower->options().poll_interval);
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
}

grpc::Status NodeServiceImpl::ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest*,
                                        v1::ListNodesResponse* out) {
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kReadNodes);
  if (!who.ok()) return ToGrpc(who.status());
  *out = c_->ListNodes();
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::DrainNode(grpc::ServerContext* ctx, const v1::DrainNodeRequest* req, v1::Node* out) {
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kDrainNode);
  if (!who.ok()) return ToGrpc(who.status());
  return Reply(c_->SetDrained(req->name(), true, req->evict()), out);
}

grpc::Status NodeServiceImpl::UndrainNode(grpc::ServerContext* ctx, const v1::UndrainNodeRequest* req, v1::Node* out) {
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kDrainNode);
  if (!who.ok()) return ToGrpc(who.status());
  return Reply(c_->SetDrained(req->name(), false), out);
}

grpc::Status AgentServiceImpl::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                        v1::RegisterResponse* out) {
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kAgent);
  if (!who.ok()) return ToGrpc(who.status());
  return Reply(c_->Register(*req), out);
}

grpc::Status AgentServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                         v1::HeartbeatResponse* out) {
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kAgent);
  if (!who.ok()) return ToGrpc(who.status());
  return Reply(c_->Heartbeat(*req), out);
}

grpc::Status AgentServiceImpl::PushLogs(grpc::ServerContext* ctx, const v1::PushLogsRequest* req,
                                        v1::PushLogsResponse* out) {
  auto who = CheckAccess(auth_, c_, AuthorizationMetadata(ctx), Action::kAgent);
  if (!who.ok()) return ToGrpc(who.status());
  for (const auto& chunk : req->chunks()) {
    LogId id{chunk.job_id(), chunk.attempt(), chunk.rank()};
    if (!IsJobId(id.job_id)) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad job id in log chunk");
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
