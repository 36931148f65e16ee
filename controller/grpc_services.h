// The controller's gRPC services: thin adapters from eft.v1 RPCs onto Controller.
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "controller/controller.h"
#include "eft/v1/agent.grpc.pb.h"
#include "eft/v1/job.grpc.pb.h"
#include "eft/v1/node.grpc.pb.h"

namespace eft::controller {

// eft::Status codes are gRPC's, one to one.
grpc::Status ToGrpc(const Status& status);

class JobServiceImpl final : public v1::JobService::Service {
 public:
  explicit JobServiceImpl(Controller* controller) : c_(controller) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::Job*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::Job*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*, v1::Job*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*, grpc::ServerWriter<v1::Job>*) override;
  grpc::Status GetLogs(grpc::ServerContext*, const v1::GetLogsRequest*, grpc::ServerWriter<v1::LogChunk>*) override;

 private:
  Controller* c_;
};

class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  explicit NodeServiceImpl(Controller* controller) : c_(controller) {}
  grpc::Status ListNodes(grpc::ServerContext*, const v1::ListNodesRequest*, v1::ListNodesResponse*) override;
  grpc::Status DrainNode(grpc::ServerContext*, const v1::DrainNodeRequest*, v1::Node*) override;
  grpc::Status UndrainNode(grpc::ServerContext*, const v1::UndrainNodeRequest*, v1::Node*) override;

 private:
  Controller* c_;
};

class AgentServiceImpl final : public v1::AgentService::Service {
 public:
  explicit AgentServiceImpl(Controller* controller) : c_(controller) {}
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*, v1::RegisterResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override;
  grpc::Status PushLogs(grpc::ServerContext*, const v1::PushLogsRequest*, v1::PushLogsResponse*) override;

 private:
  Controller* c_;
};

}  // namespace eft::controller
