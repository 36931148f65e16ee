// The controller's gRPC services: thin adapters from eft.v1 RPCs onto Controller.
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "controller/auth.h"
#include "controller/controller.h"
#include "eft/v1/agent.grpc.pb.h"
#include "eft/v1/job.grpc.pb.h"
#include "eft/v1/node.grpc.pb.h"

namespace eft::controller {

// eft::Status codes are gRPC's, one to one.
grpc::Status ToGrpc(const Status& status);

// The access check of every client and worker call, shared by gRPC and REST. `auth` nullptr: auth
// is not configured and everyone is an anonymous admin. `authorization` is the raw header value.
// For kCancelJob, `job_id` names the job whose owner decides (NOT_FOUND if there is none, but only
// after the caller proved it may cancel some job).
Result<Principal> CheckAccess(const Authenticator* auth, Controller* c, const std::string& authorization, Action action,
                              const std::string& job_id = "");
// The "authorization" metadata of a gRPC call ("" when absent).
std::string AuthorizationMetadata(const grpc::ServerContext* ctx);

class JobServiceImpl final : public v1::JobService::Service {
 public:
  explicit JobServiceImpl(Controller* controller, const Authenticator* auth = nullptr) : c_(controller), auth_(auth) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::Job*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::Job*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*, v1::Job*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*, grpc::ServerWriter<v1::Job>*) override;
  grpc::Status GetLogs(grpc::ServerContext*, const v1::GetLogsRequest*, grpc::ServerWriter<v1::LogChunk>*) override;

 private:
  Controller* c_;
  const Authenticator* auth_;
};

class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  explicit NodeServiceImpl(Controller* controller, const Authenticator* auth = nullptr) : c_(controller), auth_(auth) {}
  grpc::Status ListNodes(grpc::ServerContext*, const v1::ListNodesRequest*, v1::ListNodesResponse*) override;
  grpc::Status DrainNode(grpc::ServerContext*, const v1::DrainNodeRequest*, v1::Node*) override;
  grpc::Status UndrainNode(grpc::ServerContext*, const v1::UndrainNodeRequest*, v1::Node*) override;

 private:
  Controller* c_;
  const Authenticator* auth_;
};

class AgentServiceImpl final : public v1::AgentService::Service {
 public:
  explicit AgentServiceImpl(Controller* controller, const Authenticator* auth = nullptr) : c_(controller), auth_(auth) {}
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*, v1::RegisterResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override;
  grpc::Status PushLogs(grpc::ServerContext*, const v1::PushLogsRequest*, v1::PushLogsResponse*) override;

 private:
  Controller* c_;
  const Authenticator* auth_;
};

}  // namespace eft::controller
