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

// Where a full save's time went on one rank (wall-clock seconds).
struct FullSaveTimes {
  double gather = 0;   // blocked in gathers (on the writer: the part not hidden behind writing)
  double convert = 0;  // writer: HF weights converted to the model's dtype
  double write = 0;    // writer: checksummed and written, including the waits for the disk
  double total = 0;
};

// Collective: every rank gathers to the writer (rank 0: `writer` is true there only), a unit at a
// time, and the writer streams the HF model directory and, `with_optimizer`,
// optimizer.safetensors into `dir`. The next unit's gathers run while the writer writes one, so it
// holds at most two units; the other ranks hold none. A write error stops the writing, not the
// gathers: every rank still returns promptly, and only the writer reports the error.
// Returns the files written, sealed (size and CRC-32C, relative to `dir`), on the writer; an empty
// list elsewhere. Sealing the weights costs no read: their checksums are taken as they are written.
Result<std::vector<ManifestFile>> WriteFullState(ShardedLlama& model, const std::vector<UnitState>& units,
                                                 const std::string& dir, const std::string& tokenizer_dir,
                                                 bool writer, bool with_optimizer = true,
                                                 FullSaveTimes* times = nullptr);
// Fills every unit's shard and moments from a full checkpoint directory (each rank reads only the
// parameters that overlap its slices).
Status LoadFullState(const std::string& dir, const std::vector<UnitState>& units);

}  // namespace eft::trainer
