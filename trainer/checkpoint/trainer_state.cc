#include "trainer/checkpoint/trainer_state.h"

#include <cmath>
#include <cstdio>

#include "trainer/checkpoint/manifest.h"
#include "common/json_int.h"

namespace eft::trainer {

using nlohmann::json;

json TrainerState::ToJson() const {
  json j = {{"format", 1},           {"step", step},         {"optimizer_step", optimizer_step}, {"epoch", epoch},           {"samples_consumed", samples_consumed},
          {"total_steps", total_steps}, {"world_size", world_size}, {"loss_tail", loss_tail}, {"compat", compat},
          {"seed", seed}, {"config_hash", config_hash()}};
  if (std::isfinite(eval_loss)) j["eval_loss"] = eval_loss;
  return j;
}

Result<TrainerState> TrainerState::FromJson(const json& j) {
  TrainerState s;
  try {
    if (!j.contains("format") || JsonInt<int>(j.at("format")) != 1) return Status::DataLoss("trainer_state.json: unknown format");
    s.step = JsonInt<int64_t>(j.at("step"));
    s.optimizer_step = JsonInt<int64_t>(j.at("optimizer_step"));
    s.epoch = JsonInt<int64_t>(j.at("epoch"));
    s.samples_consumed = JsonInt<int64_t>(j.at("samples_consumed"));
    s.total_steps = JsonInt<int64_t>(j.at("total_steps"));
    s.world_size = JsonInt<int>(j.at("world_size"));
    s.loss_tail = j.at("loss_tail").get<std::vector<double>>();
    s.compat = j.at("compat");
    s.seed = j.contains("seed") ? JsonInt<uint64_t>(j.at("seed")) : 0;
    if (j.contains("eval_loss")) s.eval_loss = j.at("eval_loss").get<double>();
  } catch (const std::exception& e) {
    return Status::DataLoss(std::string("trainer_state.json: ") + e.what());
  }
  return s;
}

std::string TrainerState::config_hash() const {
  const std::string text = compat.dump();
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", Crc32c(text.data(), text.size()));
  return buf;
}

Status CheckCompatible(const json& saved, const json& current) {
  std::string diffs;
  for (const auto& [key, now] : current.items()) {
    auto it = saved.find(key);
    if (it == saved.end()) {
      diffs += (diffs.empty() ? "" : "; ") + key + ": not in the checkpoint";
    } else if (*it != now) {
      // The model config is long: say which of its fields differ.
      if (it->is_object() && now.is_object()) {
        for (const auto& [k, v] : now.items()) {
          if (!it->contains(k) || (*it)[k] != v) {
            diffs += (diffs.empty() ? "" : "; ") + key + "." + k + ": checkpoint " +
                     (it->contains(k) ? (*it)[k].dump() : std::string("absent")) + ", now " + v.dump();
          }
        }
      } else {
        diffs += (diffs.empty() ? "" : "; ") + key + ": checkpoint " + it->dump() + ", now " + now.dump();
      }
    }
  }
  // A LoRA checkpoint holds no base weights: a full fine-tuning run cannot resume from it.
  if (saved.contains("training.lora") && !current.contains("training.lora")) {
    diffs += (diffs.empty() ? "" : "; ") + std::string("training.lora: checkpoint ") + saved["training.lora"].dump() +
             ", now absent (full fine-tuning)";
  }
  if (diffs.empty()) return Status::Ok();
  return Status::FailedPrecondition("the checkpoint comes from an incompatible run (" + diffs +
                                    "); world size, nodes, micro_batch_size and precision may change, these may not");
}

}  // namespace eft::trainer
