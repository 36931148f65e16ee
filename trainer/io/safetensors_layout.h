// Where every byte of a safetensors file (or of a Hugging Face model directory's shards) goes, known
// from the declared tensors alone. The streaming writers (safetensors_writer.h) and the parallel
// full save (trainer/checkpoint/parallel_full_write.h), where every rank writes its own slices
// straight into the files, share it, so both produce the same bytes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/io/safetensors_writer.h"

namespace eft::trainer {

struct SafetensorsLayout {
  std::string header;                 // the 8-byte length, the JSON header, padding: the file's first bytes
  std::vector<uint64_t> offsets;      // of each declared tensor's data in the file, in declaration order
  std::vector<uint64_t> bytes;        // of each tensor's data
  uint64_t file_bytes = 0;
};

// InvalidArgument as SafetensorsWriter::Create (bad dtype, duplicate or reserved name, negative
// dimension, a header that cannot be encoded); `what` names the file in errors.
Result<SafetensorsLayout> LayOutSafetensors(const std::string& what, const std::vector<TensorDecl>& tensors,
                                            const std::map<std::string, std::string>& metadata);

// A model directory's shards as SafetensorsDirWriter splits it: greedy in declaration order, at most
// `max_shard_bytes` each (an oversized tensor alone), named model.safetensors when there is one and
// model-0000i-of-0000n.safetensors otherwise.
Result<std::vector<ModelShard>> PlanModelShards(const std::string& dir, std::vector<TensorDecl> tensors,
                                                uint64_t max_shard_bytes);
// model.safetensors.index.json's text for more than one shard.
std::string ModelIndexJson(const std::vector<ModelShard>& shards);
// The index and single-file names.
extern const char* const kModelIndexName;
extern const char* const kModelSingleName;
// Removes what an earlier write into `dir` left that would shadow or confuse these shards (a stale
// index or model.safetensors, shards not among them), as save_pretrained does.
Status RemoveStaleModelFiles(const std::string& dir, const std::vector<ModelShard>& shards);

}  // namespace eft::trainer
