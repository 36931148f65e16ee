// Full checkpoints: a Hugging Face model directory that transformers loads as it is, plus
// optimizer.safetensors with the fp32 AdamW moments (and the fp32 master weights when the model's
// dtype is not fp32), so training resumes from it exactly, at any world size.
#pragma once

#include <optional>
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

// The files of Hugging Face model directory `dir` other than its weights and config.json: the
// tokenizer's, the chat templates (chat_template.jinja, chat_template.json, additional_chat_templates/),
// generation_config.json and the licence. Relative paths of those present, sorted.
std::vector<std::string> HfModelFiles(const std::string& dir);

// Where an output directory's files besides weights and config.json come from: every HfModelFiles of
// `model_dirs` in order (a later directory's file replacing an earlier one's), then `chat_template`,
// the Jinja file training rendered conversations with (data.chat_template), as chat_template.jinja,
// which transformers and eft read before tokenizer_config.json's. All may be empty.
struct HfFileSources {
  std::vector<std::string> model_dirs;
  std::string chat_template;
};

// Writes an HF model directory: weights converted to `dtype` (sharded above 5 GB, with an index),
// config.json from `config`, and the files of `sources`. Returns the files written, relative to `dir`.
Result<std::vector<std::string>> WriteHfModel(const std::string& dir,
                                              const std::vector<std::pair<std::string, at::Tensor>>& params,
                                              const ModelConfig& config, at::ScalarType dtype,
                                              const HfFileSources& sources);

// The dtype HF saves a model of this config in ("bfloat16" -> kBFloat16, ...).
at::ScalarType HfDtype(const ModelConfig& config);

// config.json and the files of `sources`; their names, relative to `dir`, config.json first.
Result<std::vector<std::string>> WriteHfSidecarFiles(const std::string& dir, const ModelConfig& config,
                                                     const HfFileSources& sources);

// How a full save reaches the files (checkpoint.full_write, docs/checkpoints.md, "Write path").
enum class FullWriteMode {
  kParallel,  // every rank writes its own slices into the final files (parallel_full_write.h)
  kRank0,     // every unit is gathered to rank 0, which alone writes (storage that cannot take
              // writes into one file from several processes or nodes, e.g. FUSE object-store mounts)
};
// Tests: the size above which a model directory is split into shards (default 5 GB, as
// save_pretrained), so small models exercise the sharded layout and its index.
void SetMaxModelShardBytesForTesting(uint64_t bytes);

// "parallel" / "rank0"; nullopt for anything else.
std::optional<FullWriteMode> FullWriteModeFromName(const std::string& name);

// Where a full save's time went on one rank (wall-clock seconds).
struct FullSaveTimes {
  double gather = 0;   // blocked in gathers (rank0: on the writer, the part not hidden behind writing;
                       // parallel: the boundary pieces' exchange)
  double convert = 0;  // the weights converted to the model's dtype (parallel: and the fp32 state
                       // copied into write buffers)
  double write = 0;    // checksummed and written, including the waits for the disk and the fsync
  double wait = 0;     // parallel: waiting for the other ranks (creation, failure checks, CRCs)
  double total = 0;
  int64_t bytes = 0;   // of weights and optimizer state this rank wrote
};

// Collective. kParallel (not for LoRA, whose adapter directory is tiny and always goes the rank0
// way): every rank writes its own slices into `dir`, which every rank must see; see
// parallel_full_write.h. A failure fails the call on every rank. kRank0:
// every rank gathers to the writer (rank 0: `writer` is true there only), a unit at a
// time, and the writer streams the HF model directory and, `with_optimizer`,
// optimizer.safetensors into `dir`. The next unit's gathers run while the writer writes one, so it
// holds at most two units; the other ranks hold none. A write error stops the writing, not the
// gathers: every rank still returns promptly, and only the writer reports the error.
// Returns the files written, sealed (size and CRC-32C, relative to `dir`), on the writer; an empty
// list elsewhere. Sealing the weights costs no read: their checksums are taken as they are written.
Result<std::vector<ManifestFile>> WriteFullState(ShardedLlama& model, const std::vector<UnitState>& units,
                                                 const std::string& dir, const HfFileSources& sources,
                                                 bool writer, bool with_optimizer = true,
                                                 FullSaveTimes* times = nullptr,
                                                 FullWriteMode mode = FullWriteMode::kRank0);
// Fills every unit's shard and moments from a full checkpoint directory (each rank reads only the
// parameters that overlap its slices).
Status LoadFullState(const std::string& dir, const std::vector<UnitState>& units);

}  // namespace eft::trainer
