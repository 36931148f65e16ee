// Controller: the worker-facing side. Registration, heartbeats, rank reports and relayed events,
// and the desired set of ranks each worker is told to run.
#include <algorithm>

#include <google/protobuf/util/time_util.h>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "common/rank_protocol.h"
#include "controller/controller.h"

namespace eft::controller {

namespace {

bool IsLive(const v1::RankStatus& r) {
  return r.state() == v1::RANK_STATE_RUNNING || r.state() == v1::RANK_STATE_STOPPING;
}

// The slots a worker reports busy, and by what: what scheduling sees of a node's report.
template <typename Ranks>
std::vector<std::tuple<std::string, int, int, int>> LiveSlots(const Ranks& ranks) {
  std::vector<std::tuple<std::string, int, int, int>> out;
  for (const auto& r : ranks) {
    if (IsLive(r)) out.emplace_back(r.key().job_id(), r.key().attempt(), r.key().rank(), r.slot());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Result<v1::RegisterResponse> Controller::Register(const v1::RegisterRequest& req) {
  if (req.node_name().empty()) return Status::InvalidArgument("node_name: must not be empty");
  if (req.incarnation().empty()) return Status::InvalidArgument("incarnation: must not be empty");
  if (req.slots() < 1 || req.slots() > 1024) return Status::InvalidArgument("slots: must be in 1..1024");
  std::lock_guard<std::mutex> lock(mu_);
  NodeEntry& node = nodes_[req.node_name()];
  bool known = !node.rec.name.empty();
  NodeRecord rec = node.rec;
  rec.name = req.node_name();
  rec.address = req.address().empty() ? req.node_name() : req.address();
  rec.slots = req.slots();
  rec.version = req.version();
  rec.registered_ms = clock_->WallMillis();
  rec.lost = false;
  rec.state_reason.clear();
  Status s = store_->UpsertNode(rec);
  if (!s.ok()) {
    if (!known) nodes_.erase(req.node_name());
    return s.WithContext("storing node " + req.node_name());
  }
  bool was_lost = known && !node.ready;
  bool restarted = known && !node.incarnation.empty() && node.incarnation != req.incarnation();
  node.rec = rec;
  node.ready = true;
  if (node.incarnation != req.incarnation()) node.acked_seq = 0;
  node.incarnation = req.incarnation();
  node.shutting_down = false;
  node.last_heartbeat = clock_->Now();
  node.last_heartbeat_ms = clock_->WallMillis();
  node.reported.assign(req.ranks().begin(), req.ranks().end());
  CapacityChangedLocked();
  EFT_LOG(INFO) << "node " << rec.name << (known ? " re-registered" : " registered") << " (" << rec.slots
                << " slots, address " << rec.address << ", " << req.ranks_size() << " ranks reported)"
                << (was_lost ? ": READY again after being LOST" : "") << (restarted ? ": worker restarted" : "");
  ApplyRankReportsLocked(node);
  MaybeScheduleLocked();
  v1::RegisterResponse out;
  out.set_heartbeat_interval_ms(static_cast<int32_t>(config_.heartbeat_interval.count()));
  DesiredForLocked(node, out.mutable_desired(), out.mutable_attempt_specs());
  return out;
}

Result<v1::HeartbeatResponse> Controller::Heartbeat(const v1::HeartbeatRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  v1::HeartbeatResponse out;
  out.set_heartbeat_interval_ms(static_cast<int32_t>(config_.heartbeat_interval.count()));
  auto it = nodes_.find(req.node_name());
  // Unknown node, a worker we have not heard from since we started, or one we declared LOST:
  // everything it knows must be re-checked through Register.
  if (it == nodes_.end() || !it->second.ready || it->second.incarnation != req.incarnation()) {
    out.set_reregister(true);
    return out;
  }
  NodeEntry& node = it->second;
  if (req.shutting_down() && !node.shutting_down) {
    EFT_LOG(INFO) << "node " << node.rec.name << ": worker shutting down; no new ranks go there";
  }
  if (node.shutting_down != req.shutting_down()) CapacityChangedLocked();
  node.shutting_down = req.shutting_down();
  node.last_heartbeat = clock_->Now();
  node.last_heartbeat_ms = clock_->WallMillis();
  out.set_acked_event_seq(ProcessEventsLocked(node, req));
  if (LiveSlots(node.reported) != LiveSlots(req.ranks())) CapacityChangedLocked();
  node.reported.assign(req.ranks().begin(), req.ranks().end());
  ApplyRankReportsLocked(node);
  MaybeScheduleLocked();
  DesiredForLocked(node, out.mutable_desired(), out.mutable_attempt_specs());
  return out;
}

void Controller::ApplyRankReportsLocked(NodeEntry& node) {
  std::set<std::string> active;
  if (auto it = active_on_node_.find(node.rec.name); it != active_on_node_.end()) active = it->second;
  for (const auto& id : active) {
    JobEntry& j = jobs_.at(id);
    if (!j.active() || !j.current()) continue;
    const AttemptRecord& a = *j.current();
    auto pos = std::find(a.nodes.begin(), a.nodes.end(), node.rec.name);
    if (pos == a.nodes.end()) continue;
    int first = static_cast<int>(pos - a.nodes.begin()) * a.ranks_per_node;
    for (int rank = first; rank < first + a.ranks_per_node && j.active(); ++rank) {
      const v1::RankStatus* st = nullptr;
      for (const auto& r : node.reported) {
        if (r.key().job_id() == id && r.key().attempt() == a.number && r.key().rank() == rank) st = &r;
      }
      RankView& view = j.ranks[rank];
      if (st == nullptr) {
        if (view.seen_running && !view.exited) {
          (void)EndAttemptLocked(j, "rank " + std::to_string(rank) + " on node " + node.rec.name +
                                        " vanished (its worker restarted or lost track of it)",
                                 Outcome::kRestart);
        }
        continue;
      }
      if (IsLive(*st)) {
        view.seen_running = true;
      } else if (!view.exited && (st->state() == v1::RANK_STATE_EXITED ||
                                  st->state() == v1::RANK_STATE_FAILED_TO_START)) {
        OnRankExitLocked(j, rank, *st);
      }
    }
    if (j.rec.state == v1::JOB_STATE_STARTING &&
        std::all_of(j.ranks.begin(), j.ranks.end(), [](const RankView& r) { return r.seen_running; })) {
      JobChange c{j.rec, {}, {}, {}};
      c.rec.state = v1::JOB_STATE_RUNNING;
      c.events.push_back(MakeEvent(j, "running", "all " + std::to_string(j.ranks.size()) + " ranks of attempt " +
                                                     std::to_string(a.number) + " started"));
      (void)Apply(j, std::move(c));
    }
  }
}

uint64_t Controller::ProcessEventsLocked(NodeEntry& node, const v1::HeartbeatRequest& req) {
  for (const auto& ev : req.events()) {
    if (ev.seq() <= node.acked_seq) continue;  // seen before: the ack was lost on the way back
    JobEntry* j = FindJob(ev.key().job_id());
    nlohmann::json doc = nlohmann::json::parse(ev.json(), nullptr, /*allow_exceptions=*/false);
    if (j == nullptr || !doc.is_object() || !doc.contains("event") || !doc["event"].is_string()) {
      EFT_LOG(WARNING) << "node " << node.rec.name << ": ignoring malformed or orphan rank event: " << ev.json();
      node.acked_seq = ev.seq();
      continue;
    }
    const std::string kind = doc["event"];
    auto num = [&](const char* k) { return doc.contains(k) && doc[k].is_number() ? doc[k].get<double>() : 0.0; };
    if (kind == "step" && ev.key().attempt() == j->rec.attempt) {
      v1::TrainingProgress& p = j->progress;
      p.set_step(static_cast<int64_t>(num("step")));
      if (doc.contains("total_steps")) p.set_total_steps(static_cast<int64_t>(num("total_steps")));
      p.set_loss(num("loss"));
      p.set_lr(num("lr"));
      p.set_grad_norm(num("grad_norm"));
      p.set_tokens(static_cast<int64_t>(num("tokens")));
      p.set_tokens_per_s(num("tokens_per_s"));
      p.set_mfu(num("mfu"));
      *p.mutable_time() = google::protobuf::util::TimeUtil::MillisecondsToTimestamp(ev.time_ms());
      Bump(*j);
    } else if (kind == "error" && ev.key().attempt() == j->rec.attempt) {
      // Arrives before the exit it explains (the worker reads a rank's events to EOF before
      // reporting its exit), and goes into the attempt's end reason.
      auto decoded = rank::DecodeEvent(ev.json());
      const int r = ev.key().rank();
      if (decoded.ok() && r >= 0 && r < static_cast<int>(j->ranks.size())) {
        j->ranks[r].error = std::get<rank::ErrorEvent>(*decoded).message;
      }
    } else if (kind == "no_valid_checkpoint") {
      auto decoded = rank::DecodeEvent(ev.json());
      if (decoded.ok()) {
        const auto& none = std::get<rank::NoValidCheckpointEvent>(*decoded);
        JobChange c{j->rec, {}, {}, {}};
        c.events.push_back(MakeEvent(*j, "no_valid_checkpoint",
                                     "no valid checkpoint in " + none.dir + ": starting from scratch, " +
                                         std::to_string(none.skipped) + " checkpoint" + (none.skipped == 1 ? "" : "s") +
                                         " skipped (attempt " + std::to_string(ev.key().attempt()) + ")"));
        Status s = Apply(*j, std::move(c));
        if (!s.ok()) {
          EFT_LOG(ERROR) << "job " << j->rec.id << ": could not record a no_valid_checkpoint event: " << s;
          break;  // not acknowledged: the worker sends it again
        }
      }
    } else if (kind == "checkpoint_deleted") {
      // Retention removed it: it must not be listed, nor handed to a later attempt.
      const std::string path = doc.value("path", std::string());
      Status s = path.empty() ? Status::Ok() : store_->DeleteCheckpoint(j->rec.id, path);
      if (!s.ok()) {
        EFT_LOG(ERROR) << "job " << j->rec.id << ": could not forget deleted checkpoint " << path << ": " << s;
        break;  // not acknowledged: the worker sends it again
      }
      auto gone = std::remove_if(j->checkpoints.begin(), j->checkpoints.end(),
                                 [&](const CheckpointRecord& k) { return k.path == path; });
      if (gone != j->checkpoints.end()) {
        j->checkpoints.erase(gone, j->checkpoints.end());
        Bump(*j);
      }
    } else if (kind == "checkpoint") {
      CheckpointRecord c;
      c.job_id = j->rec.id;
      c.step = static_cast<int64_t>(num("step"));
      c.kind = doc.value("kind", std::string("sharded"));
      c.path = doc.value("path", std::string());
      c.bytes = static_cast<int64_t>(num("bytes"));
      c.attempt = ev.key().attempt();
      c.time_ms = ev.time_ms();
      if (c.path.empty()) {
        EFT_LOG(WARNING) << "job " << j->rec.id << ": checkpoint event without a path ignored: " << ev.json();
      } else {
        Status s = store_->InsertCheckpoint(c);
        // Not acknowledged: the worker sends it again with the next heartbeat.
        if (!s.ok()) {
          EFT_LOG(ERROR) << "job " << j->rec.id << ": could not store checkpoint " << c.path << ": " << s;
          break;
        }
        bool seen = std::any_of(j->checkpoints.begin(), j->checkpoints.end(),
                                [&](const CheckpointRecord& k) { return k.path == c.path; });
        if (!seen) {
          EFT_LOG(INFO) << "job " << j->rec.id << ": checkpoint at step " << c.step << " (" << c.kind << ") " << c.path;
          j->checkpoints.push_back(c);
          Bump(*j);
          if (checkpoint_observer_) {
            auto seconds = [&](const char* k) {
              return doc.contains(k) && doc[k].is_number() ? doc[k].get<double>() : -1.0;  // -1: not reported
            };
            checkpoint_observer_(CheckpointReport{c.job_id, c.kind, c.step, c.bytes, seconds("seconds"),
                                                  seconds("stall_seconds")});
          }
        }
      }
    }
    node.acked_seq = ev.seq();
  }
  return node.acked_seq;
}

void Controller::DesiredForLocked(const NodeEntry& node,
                                  google::protobuf::RepeatedPtrField<v1::RankAssignment>* out,
                                  google::protobuf::RepeatedPtrField<v1::AttemptSpec>* specs) const {
  auto it = active_on_node_.find(node.rec.name);
  if (it == active_on_node_.end()) return;
  for (const auto& id : it->second) {
    const JobEntry& j = jobs_.at(id);
    if (!j.active() || !j.current()) continue;
    const AttemptRecord& a = *j.current();
    auto pos = std::find(a.nodes.begin(), a.nodes.end(), node.rec.name);
    if (pos == a.nodes.end()) continue;
    size_t node_index = static_cast<size_t>(pos - a.nodes.begin());
    const v1::JobSpec& spec = j.rec.spec;
    bool spec_sent = false;
    for (int local = 0; local < a.ranks_per_node; ++local) {
      v1::RankAssignment* r = out->Add();
      r->mutable_key()->set_job_id(id);
      r->mutable_key()->set_attempt(a.number);
      r->mutable_key()->set_rank(static_cast<int>(node_index) * a.ranks_per_node + local);
      r->set_local_rank(local);
      r->set_world_size(a.world_size);
      r->set_local_world_size(a.ranks_per_node);
      r->set_master_addr(a.master_addr);
      r->set_master_port(a.master_port);
      r->set_slot(node_index < a.slots.size() && local < static_cast<int>(a.slots[node_index].size())
                      ? a.slots[node_index][local]
                      : local);
      if (spec.command().empty()) {
        r->add_command(config_.trainer_program);
        r->add_command("train");
      } else {
        r->mutable_command()->CopyFrom(spec.command());
      }
      // The job's own variables only: the worker builds the rank environment from the typed fields.
      r->mutable_env()->insert(spec.env().begin(), spec.env().end());
      r->set_resume_from(a.resume_from);
      r->set_stop_grace_seconds(spec.fault_tolerance().stop_grace_seconds());
      const bool reported = std::any_of(node.reported.begin(), node.reported.end(), [&](const v1::RankStatus& st) {
        return st.key().job_id() == id && st.key().attempt() == a.number && st.key().rank() == r->key().rank();
      });
      if (!reported && !spec_sent) {
        v1::AttemptSpec* s = specs->Add();
        s->set_job_id(id);
        s->set_attempt(a.number);
        s->set_spec_json(j.spec_json);
        spec_sent = true;
      }
    }
  }
}

}  // namespace eft::controller
