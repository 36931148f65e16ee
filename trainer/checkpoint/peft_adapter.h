// PEFT LoRA adapter directories (docs/lora.md): adapter_config.json and adapter_model.safetensors,
// as PEFT's save_pretrained writes them, so `PeftModel.from_pretrained(base, dir)` loads eft's
// adapters and eft loads PEFT's (training.lora.init_from).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace eft::trainer {

constexpr const char* kAdapterConfigFile = "adapter_config.json";
constexpr const char* kAdapterWeightsFile = "adapter_model.safetensors";

struct AdapterConfig {
  int64_t r = 0;
  double alpha = 0;
  double dropout = 0;
  std::vector<std::string> target_modules;  // HF module names, sorted as LoraModuleNames() orders them
  std::string base_model;                   // base_model_name_or_path
};

// The adapter_config.json document (peft_type LORA, task_type CAUSAL_LM, bias none, ...).
nlohmann::json AdapterConfigJson(const AdapterConfig& config);
Status WriteAdapterConfig(const std::string& dir, const AdapterConfig& config);
// InvalidArgument (naming the file and field) for a config eft cannot apply: not LORA, no r or
// lora_alpha, bias other than none, modules outside the decoder's linear layers, DoRA, rsLoRA.
Result<AdapterConfig> ReadAdapterConfig(const std::string& dir);

}  // namespace eft::trainer
