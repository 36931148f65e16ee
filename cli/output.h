// How eftctl prints things: aligned tables (like kubectl), or the API message as JSON/YAML.
#pragma once

#include <string>
#include <vector>

#include <google/protobuf/message.h>

#include "eft/v1/job.pb.h"
#include "eft/v1/node.pb.h"

namespace eft::cli {

enum class OutputFormat { kTable, kJson, kYaml };

// Columns padded to the widest cell, separated by three spaces, header in capitals.
std::string FormatTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
// The message by protobuf's JSON mapping (lowerCamelCase names, as grpc-gateway emits them).
std::string FormatJson(const google::protobuf::Message& message);
std::string FormatYaml(const google::protobuf::Message& message);

// "RUNNING" for JOB_STATE_RUNNING.
std::string ShortState(v1::JobState state);
std::string ShortState(v1::NodeState state);
// "5s", "3m", "2h", "4d" since a timestamp; "-" when unset.
std::string Age(const google::protobuf::Timestamp& t);
std::string FormatTime(const google::protobuf::Timestamp& t);
std::string FormatBytes(int64_t bytes);

std::string JobsTable(const std::vector<v1::Job>& jobs);
std::string NodesTable(const std::vector<v1::Node>& nodes);
std::string CheckpointsTable(const v1::Job& job);
// Everything about one job: spec summary, progress, attempts, checkpoints, events.
std::string DescribeJob(const v1::Job& job);
// One line of progress for --follow.
std::string ProgressLine(const v1::Job& job);

}  // namespace eft::cli
