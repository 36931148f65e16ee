// Full checkpoints: a Hugging Face model directory that transformers loads as it is, plus
// optimizer.safetensors with the fp32 AdamW moments (and the fp32 master weights when the model's
// dtype is not fp32), so training resumes from it exactly, at any world size.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "common/status.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/sharded_state.h"
#include "trainer/model/model_config.h"
#include "trainer/parallel/sharded_llama.h"

namespace eft::trainer {

// The files a Hugging Face directory carries besides weights and config.json.
const std::vector<std::string>& TokenizerFiles();

// Writes an HF model directory: weights converted to `dtype` (sharded above 5 GB, with an index),
// config.json from `config`, and the tokenizer files found in `tokenizer_dir` (may be empty).
// Returns the files written, relative to `dir`.
Result<std::vector<std::string>> WriteHfModel(const std::string& dir,
                                              const std::vector<std::pair<std::string, at::Tensor>>& params,
                                              const ModelConfig& config, at::ScalarType dtype,
                                              const std::string& tokenizer_dir);

// The dtype HF saves a model of this config in ("bfloat16" -> kBFloat16, ...).
at::ScalarType HfDtype(const ModelConfig& config);

// config.json and the tokenizer files found in `tokenizer_dir` (may be empty); their names.
Result<std::vector<std::string>> WriteHfSidecarFiles(const std::string& dir, const ModelConfig& config,
                                                     const std::string& tokenizer_dir);

// Collective: every rank gathers, a unit at a time; the rank with `writer` streams the HF model
// directory and, `with_optimizer`, optimizer.safetensors into `dir`, holding one unit at a time.
// Returns the files written, sealed (size and CRC-32C, relative to `dir`), on the writer; an empty
// list elsewhere. Sealing the weights costs no read: their checksums are taken as they are written.
Result<std::vector<ManifestFile>> WriteFullState(ShardedLlama& model, const std::vector<UnitState>& units,
                                                 const std::string& dir, const std::string& tokenizer_dir,
                                                 bool writer, bool with_optimizer = true);
// Fills every unit's shard and moments from a full checkpoint directory (each rank reads only the
// parameters that overlap its slices).
Status LoadFullState(const std::string& dir, const std::vector<UnitState>& units);

}  // namespace eft::trainer
