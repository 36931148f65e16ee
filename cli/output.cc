#include "cli/output.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "common/memory_snapshot.h"

#include "cli/loss_chart.h"
#include "common/yaml_json.h"

namespace eft::cli {

using google::protobuf::util::TimeUtil;

std::string FormatTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size(), 0);
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t i = 0; i < cells.size(); ++i) {
      text += cells[i];
      if (i + 1 < cells.size()) text += std::string(width[i] - cells[i].size() + 3, ' ');
    }
    out << text << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
  return out.str();
}

std::string FormatJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  return out;
}

std::string FormatYaml(const google::protobuf::Message& m) {
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(m, &json);
  return JsonToYaml(nlohmann::json::parse(json));
}

std::string ShortState(v1::JobState s) { return v1::JobState_Name(s).substr(sizeof("JOB_STATE_") - 1); }
std::string ShortState(v1::NodeState s) { return v1::NodeState_Name(s).substr(sizeof("NODE_STATE_") - 1); }

std::string Age(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0) return "-";
  int64_t secs = std::time(nullptr) - t.seconds();
  if (secs < 0) secs = 0;
  if (secs < 120) return std::to_string(secs) + "s";
  if (secs < 7200) return std::to_string(secs / 60) + "m";
  if (secs < 172800) return std::to_string(secs / 3600) + "h";
  return std::to_string(secs / 86400) + "d";
}

std::string FormatTime(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0) return "-";
  std::time_t secs = t.seconds();
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string FormatBytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

namespace {

std::string Num(double v, const char* fmt = "%.4g") {
  char buf[32];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string StepText(const v1::Job& j) {
  if (!j.has_progress()) return "-";
  std::string s = std::to_string(j.progress().step());
  if (j.progress().total_steps() > 0) s += "/" + std::to_string(j.progress().total_steps());
  return s;
}

}  // namespace

std::string JobsTable(const std::vector<v1::Job>& jobs) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& j : jobs) {
    rows.push_back({j.id(), j.spec().name(), ShortState(j.state()), std::to_string(j.spec().priority()),
                    std::to_string(j.attempt()),
                    j.world_size() ? std::to_string(j.world_size()) : "-", StepText(j),
                    j.has_progress() ? Num(j.progress().loss()) : "-", Age(j.create_time())});
  }
  return FormatTable({"ID", "NAME", "STATE", "PRIO", "ATTEMPT", "WORLD", "STEP", "LOSS", "AGE"}, rows);
}

std::string NodesTable(const std::vector<v1::Node>& nodes) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& n : nodes) {
    std::string state = ShortState(n.state()) + (n.drained() ? ",DRAINED" : "");
    std::string jobs;
    for (const auto& id : n.jobs()) jobs += (jobs.empty() ? "" : ",") + id;
    // The address rank traffic uses, when it is not the one given (a host name, a data network).
    std::string address = n.address();
    if (!n.data_address().empty() && n.data_address() != n.address()) address += " (" + n.data_address() + ")";
    rows.push_back({n.name(), state, address, std::to_string(n.slots()), std::to_string(n.free_slots()),
                    jobs.empty() ? "-" : jobs, Age(n.last_heartbeat_time()), n.version()});
  }
  return FormatTable({"NAME", "STATE", "ADDRESS", "SLOTS", "FREE", "JOBS", "HEARTBEAT", "VERSION"}, rows);
}

std::string CheckpointsTable(const v1::Job& j) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : j.checkpoints()) {
    rows.push_back({std::to_string(c.step()), c.kind(), std::to_string(c.attempt()), FormatBytes(c.bytes()),
                    FormatTime(c.time()), c.path()});
  }
  return FormatTable({"STEP", "KIND", "ATTEMPT", "SIZE", "TIME", "PATH"}, rows);
}

std::string DescribeJob(const v1::Job& j) {
  std::ostringstream out;
  const auto& r = j.spec().resources();
  out << "ID:          " << j.id() << "\n"
      << "Name:        " << j.spec().name() << "\n"
      << "State:       " << ShortState(j.state()) << (j.reason().empty() ? "" : " (" + j.reason() + ")") << "\n"
      << "Priority:    " << j.spec().priority() << "\n"
      << "Created:     " << FormatTime(j.create_time()) << "\n"
      << "Started:     " << FormatTime(j.start_time()) << "\n"
      << "Ended:       " << FormatTime(j.end_time()) << "\n"
      << "Resources:   " << r.nodes().min() << ".." << r.nodes().max() << " nodes x " << r.gpus_per_node()
      << " ranks\n"
      << "Restarts:    " << j.restarts() << " of at most " << j.spec().fault_tolerance().max_restarts() << "\n"
      << "Checkpoints: " << j.spec().checkpoint().dir() << "\n";
  if (j.has_progress()) {
    const auto& p = j.progress();
    out << "Progress:    step " << StepText(j);
    if (p.total_steps() > 0) out << " (" << Num(100.0 * p.step() / p.total_steps(), "%.1f") << "%)";
    out << ", loss " << Num(p.loss()) << ", lr " << Num(p.lr(), "%.3g");
    if (p.tokens_per_s() > 0) out << ", " << Num(p.tokens_per_s(), "%.0f") << " tokens/s";
    if (p.tokens_per_s() > 0 && p.mfu() > 0) out << " (MFU " << Num(100 * p.mfu(), "%.1f") << "%)";
    if (p.total_steps() > 0 && j.state() == v1::JOB_STATE_RUNNING && j.attempts_size() > 0) {
      // Pace of the current attempt: steps since the checkpoint it resumed from, over its run time.
      const v1::Attempt& a = j.attempts(j.attempts_size() - 1);
      int64_t resumed_step = 0;
      for (const auto& c : j.checkpoints()) {
        if (c.path() == a.resume_from()) resumed_step = c.step();
      }
      int64_t elapsed = p.time().seconds() - a.start_time().seconds();
      if (p.step() > resumed_step && elapsed > 0) {
        double per_step = static_cast<double>(elapsed) / static_cast<double>(p.step() - resumed_step);
        int64_t eta = static_cast<int64_t>(per_step * static_cast<double>(p.total_steps() - p.step()));
        out << ", ETA " << eta / 3600 << "h" << (eta / 60) % 60 << "m" << eta % 60 << "s";
      }
    }
    out << "\n";
  }
  if (j.has_progress() && j.progress().evals_size() > 1) {
    // Named eval sets (spec.data.eval): one line each, in the spec's order.
    out << "Eval:\n";
    for (const v1::EvalLoss& e : j.progress().evals()) {
      out << "  " << e.set() << ": loss " << Num(e.loss()) << " at step " << e.step() << " (" << e.tokens()
          << " tokens)\n";
    }
  } else if (j.has_progress() && j.progress().has_eval_loss()) {
    const auto& p = j.progress();
    out << "Eval:        loss " << Num(p.eval_loss()) << " at step " << p.eval_step() << " ("
        << p.eval_tokens() << " tokens)\n";
  }
  // The curves at a glance (`eftctl job plot` draws them); after a controller restart the progress
  // above is gone until the next step, the history is not.
  out << LossSummary(j.loss_history());
  out << "\nAttempts:\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& a : j.attempts()) {
    std::string nodes;
    for (const auto& n : a.nodes()) nodes += (nodes.empty() ? "" : ",") + n;
    // Where it resumed: "memory 137" (a staged memory snapshot), "disk 100", "-" for a fresh start.
    std::string from = "-";
    if (a.has_resume_step() && a.resume_step() > 0) {
      const bool memory = snapshot::IsStagedDir(a.resume_from());
      from = (memory ? "memory " : "disk ") + std::to_string(a.resume_step());
    }
    rows.push_back({std::to_string(a.number()), std::to_string(a.world_size()), nodes, FormatTime(a.start_time()),
                    FormatTime(a.end_time()), from, a.has_steps_lost() ? std::to_string(a.steps_lost()) : "-",
                    a.end_reason().empty() ? "-" : a.end_reason()});
  }
  std::string table = FormatTable({"#", "WORLD", "NODES", "STARTED", "ENDED", "FROM", "LOST", "END REASON"}, rows);
  std::istringstream lines(table);
  for (std::string l; std::getline(lines, l);) out << "  " << l << "\n";
  if (j.checkpoints_size()) {
    out << "\nCheckpoints:\n";
    std::istringstream ck(CheckpointsTable(j));
    for (std::string l; std::getline(ck, l);) out << "  " << l << "\n";
  }
  out << "\nEvents:\n";
  for (const auto& e : j.events()) {
    out << "  " << FormatTime(e.time()) << "  " << e.type() << ": " << e.message() << "\n";
  }
  return out.str();
}

std::string ProgressLine(const v1::Job& j) {
  std::ostringstream out;
  out << "job " << j.id() << " " << ShortState(j.state());
  if (j.attempt()) out << " attempt " << j.attempt();
  if (j.world_size()) out << " world " << j.world_size();
  // Before the first step the progress holds only the eval loss of the untrained model.
  if (j.has_progress() && j.progress().step() > 0) out << " step " << StepText(j) << " loss " << Num(j.progress().loss());
  if (j.has_progress() && j.progress().evals_size() > 1) {
    for (const v1::EvalLoss& e : j.progress().evals()) out << " eval_loss[" << e.set() << "] " << Num(e.loss());
    out << " (step " << j.progress().eval_step() << ")";
  } else if (j.has_progress() && j.progress().has_eval_loss()) {
    out << " eval_loss " << Num(j.progress().eval_loss()) << " (step " << j.progress().eval_step() << ")";
  }
  if (!j.reason().empty() && j.state() != v1::JOB_STATE_RUNNING) out << " (" << j.reason() << ")";
  return out.str();
}

}  // namespace eft::cli
