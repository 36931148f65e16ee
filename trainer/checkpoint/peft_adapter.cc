#include "trainer/checkpoint/peft_adapter.h"

#include <algorithm>
#include <fstream>

#include "common/file_util.h"
#include "spec/job_spec.h"

namespace eft::trainer {

using nlohmann::json;

json AdapterConfigJson(const AdapterConfig& c) {
  // Every field PEFT 0.x writes for a plain LoRA adapter, so its loader needs no defaults of ours.
  return {{"peft_type", "LORA"},          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", c.base_model},
          {"r", c.r},                     {"lora_alpha", c.alpha},
          {"lora_dropout", c.dropout},    {"target_modules", c.target_modules},
          {"bias", "none"},               {"fan_in_fan_out", false},
          {"inference_mode", true},       {"init_lora_weights", true},
          {"modules_to_save", nullptr},   {"layers_to_transform", nullptr},
          {"layers_pattern", nullptr},    {"rank_pattern", json::object()},
          {"alpha_pattern", json::object()}, {"use_rslora", false},
          {"use_dora", false},            {"revision", nullptr}};
}

Status WriteAdapterConfig(const std::string& dir, const AdapterConfig& config) {
  return WriteStringToFile(dir + "/" + kAdapterConfigFile, AdapterConfigJson(config).dump(2) + "\n");
}

Result<AdapterConfig> ReadAdapterConfig(const std::string& dir) {
  const std::string path = dir + "/" + kAdapterConfigFile;
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": no such file (a PEFT LoRA adapter directory has one)");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument(path + ": not a JSON object");
  auto bad = [&](const std::string& why) { return Status::InvalidArgument(path + ": " + why); };
  if (j.value("peft_type", "") != "LORA") return bad("peft_type must be \"LORA\"");
  AdapterConfig c;
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() < 1) return bad("r must be an integer >= 1");
  c.r = j["r"].get<int64_t>();
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number() || !(j["lora_alpha"].get<double>() > 0)) {
    return bad("lora_alpha must be a number > 0");
  }
  c.alpha = j["lora_alpha"].get<double>();
  if (j.contains("lora_dropout") && j["lora_dropout"].is_number()) c.dropout = j["lora_dropout"].get<double>();
  if (j.contains("bias") && j["bias"] != "none") return bad("bias " + j["bias"].dump() + " is not supported (only none)");
  for (const char* flag : {"use_dora", "use_rslora", "fan_in_fan_out"}) {
    if (j.contains(flag) && j[flag] == true) return bad(std::string(flag) + " is not supported");
  }
  if (j.contains("rank_pattern") && j["rank_pattern"].is_object() && !j["rank_pattern"].empty()) {
    return bad("rank_pattern (per-module ranks) is not supported");
  }
  if (j.contains("alpha_pattern") && j["alpha_pattern"].is_object() && !j["alpha_pattern"].empty()) {
    return bad("alpha_pattern (per-module alphas) is not supported");
  }
  const auto& known = spec::LoraModuleNames();
  json modules = j.value("target_modules", json());
  if (modules == "all-linear") modules = known;
  if (!modules.is_array() || modules.empty()) return bad("target_modules must be a list of module names");
  for (const json& m : modules) {
    if (!m.is_string() || std::find(known.begin(), known.end(), m.get<std::string>()) == known.end()) {
      return bad("target_modules: " + m.dump() + " is not one of the decoder's linear layers");
    }
  }
  for (const std::string& k : known) {  // layer order, as LoraTargetModules orders them
    if (std::find(modules.begin(), modules.end(), json(k)) != modules.end()) c.target_modules.push_back(k);
  }
  c.base_model = j.value("base_model_name_or_path", "");
  return c;
}

}  // namespace eft::trainer
