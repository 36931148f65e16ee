#include "controller/rank_events.h"

#include <cstdio>
#include <type_traits>
#include <variant>

#include <google/protobuf/util/time_util.h>

#include "common/rank_protocol.h"
#include "spec/job_spec.h"

namespace eft::controller {

RankEventEffect InterpretRankEvent(const v1::RankEvent& ev, int current_attempt) {
  RankEventEffect out;
  auto decoded = rank::DecodeEvent(ev.json());
  if (!decoded.ok()) {
    out.problem = decoded.status().message();
    return out;
  }
  const bool current = ev.key().attempt() == current_attempt;
  std::visit(
      [&](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, rank::StepEvent>) {
          if (!current) return;
          out.kind = RankEventEffect::Kind::kProgress;
          v1::TrainingProgress& p = out.progress;
          p.set_step(e.step);
          p.set_total_steps(e.total_steps);
          p.set_loss(e.loss);
          p.set_lr(e.lr);
          p.set_grad_norm(e.grad_norm);
          p.set_tokens(e.tokens);
          p.set_tokens_per_s(e.tokens_per_s);
          p.set_mfu(e.mfu);
          *p.mutable_time() = google::protobuf::util::TimeUtil::MillisecondsToTimestamp(ev.time_ms());
        } else if constexpr (std::is_same_v<T, rank::CheckpointEvent>) {
          if (!current) {
            out.kind = RankEventEffect::Kind::kJobEvent;
            out.event_type = kLateCheckpointEvent;
            out.message = "attempt " + std::to_string(ev.key().attempt()) + " reported a checkpoint at step " +
                          std::to_string(e.step) + " (" + e.path + ") after attempt " +
                          std::to_string(current_attempt) + " started: not offered to later attempts";
            return;
          }
          out.kind = RankEventEffect::Kind::kRecordCheckpoint;
          CheckpointRecord& c = out.checkpoint;
          c.job_id = ev.key().job_id();
          c.step = e.step;
          c.kind = e.kind.empty() ? "sharded" : e.kind;
          c.path = e.path;
          c.bytes = e.bytes;
          c.attempt = ev.key().attempt();
          c.time_ms = ev.time_ms();
          out.seconds = e.seconds;
          out.stall_seconds = e.stall_seconds;
        } else if constexpr (std::is_same_v<T, rank::CheckpointDeletedEvent>) {
          out.kind = RankEventEffect::Kind::kForgetCheckpoint;
          out.checkpoint.job_id = ev.key().job_id();
          out.checkpoint.path = e.path;
        } else if constexpr (std::is_same_v<T, rank::CheckpointFailedEvent>) {
          out.kind = RankEventEffect::Kind::kJobEvent;
          out.event_type = kCheckpointFailedEvent;
          out.message = e.kind + " checkpoint at step " + std::to_string(e.step) + " failed (" +
                        std::to_string(e.consecutive) + " in a row" +
                        (e.storage_full ? std::string(", storage full") : std::string()) +
                        (e.freed > 0 ? ", " + std::to_string(e.freed) + " older checkpoint(s) deleted to make room"
                                     : std::string()) +
                        "): " + e.reason;
        } else if constexpr (std::is_same_v<T, rank::ErrorEvent>) {
          if (!current) return;
          out.kind = RankEventEffect::Kind::kRankError;
          out.rank = ev.key().rank();
          out.message = e.message;
        } else if constexpr (std::is_same_v<T, rank::NoValidCheckpointEvent>) {
          out.kind = RankEventEffect::Kind::kJobEvent;
          out.event_type = "no_valid_checkpoint";
          out.message = "no valid checkpoint in " + e.dir + ": starting from scratch, " + std::to_string(e.skipped) +
                        " checkpoint" + (e.skipped == 1 ? "" : "s") + " skipped (attempt " +
                        std::to_string(ev.key().attempt()) + ")";
        } else if constexpr (std::is_same_v<T, rank::EvalEvent>) {
          if (!current) return;
          out.kind = RankEventEffect::Kind::kEval;
          out.progress.set_eval_loss(e.loss);
          out.progress.set_eval_step(e.step);
          out.progress.set_eval_tokens(e.tokens);
          out.eval_set = e.set;
          out.eval_index = e.index;
        } else if constexpr (std::is_same_v<T, rank::FinishedEvent>) {
          // checkpoint.merge_lora: where the merged model is, so the user finds it among the job's events.
          if (e.merged_model.empty()) return;
          out.kind = RankEventEffect::Kind::kJobEvent;
          out.event_type = "merged_model";
          out.message = "LoRA adapters merged into the base model: " + e.merged_model + " (step " +
                        std::to_string(e.step) + ")";
        } else if constexpr (std::is_same_v<T, rank::ExportedEvent>) {
          // checkpoint.export_gguf: where the GGUF file is, with its type and size.
          out.kind = RankEventEffect::Kind::kJobEvent;
          out.event_type = "gguf_exported";
          char size[32];
          std::snprintf(size, sizeof size, "%.1f MB", static_cast<double>(e.bytes) / 1e6);
          out.message = "final model exported for llama.cpp: " + e.path + " (" + e.type + ", " + size + ", step " +
                        std::to_string(e.step) + ")";
        } else if constexpr (std::is_same_v<T, rank::MemorySnapshotRefusedEvent>) {
          out.kind = RankEventEffect::Kind::kJobEvent;
          out.event_type = "memory_snapshot_refused";
          out.message = (e.node.empty() ? std::string("a node") : e.node) + " could not hold rank " +
                        std::to_string(e.rank) + "'s memory snapshot of step " + std::to_string(e.step) +
                        " (attempt " + std::to_string(ev.key().attempt()) + "): " + e.reason +
                        "; older snapshots and disk checkpoints remain";
        }
        // resumed, plain finished, memory, memory_snapshot (the worker reports what it holds in its
        // heartbeats) and unknown types: in the rank's log; nothing to keep here.
      },
      *decoded);
  return out;
}

std::vector<std::string> EvalCurveNames(const v1::JobSpec& spec) {
  std::vector<std::string> names = eft::spec::EvalSetNames(spec);
  if (names.empty()) names.push_back("eval");
  return names;
}

bool IsJobEvalSet(const v1::JobSpec& spec, int index, const std::string& set) {
  const std::vector<std::string> named = eft::spec::EvalSetNames(spec);
  if (named.empty()) return index == 0;
  return index >= 0 && static_cast<size_t>(index) < named.size() && named[static_cast<size_t>(index)] == set;
}

}  // namespace eft::controller
