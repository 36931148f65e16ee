// Merging a LoRA adapter into its base model (docs/lora.md): every adapted weight becomes
// W + (lora_alpha / r) * B A, computed in fp32 and stored in the base model's dtype; every other
// tensor is copied unchanged. The result is a plain Hugging Face model directory (weights, the base's
// config.json and tokenizer files). Streams one tensor at a time: memory is one weight, not the model.
#pragma once

#include <string>

#include "common/status.h"

namespace eft::trainer {

// `adapter_dir`: a PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors) for
// `base_dir`'s architecture. InvalidArgument when an adapter tensor has no base weight or the wrong
// shape, or when the adapter's config is one eft cannot apply (see ReadAdapterConfig).
Status MergeLoraAdapter(const std::string& base_dir, const std::string& adapter_dir, const std::string& out_dir);

}  // namespace eft::trainer
