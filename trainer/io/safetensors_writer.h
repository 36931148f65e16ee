// Streaming safetensors writers. The tensors are declared up front (name, dtype, shape), which fixes
// the header and every offset; then their data is appended in declaration order, one tensor at a
// time, so a writer never needs more than the tensor in hand: a full checkpoint of a large model is
// gathered and written a unit at a time instead of being assembled whole in memory first.
//
// Files are written durably and atomically: a temporary file in the same directory, fsynced,
// renamed, then the directory fsynced. A writer destroyed before Finish() removes its temporary
// file. Finish() returns each file's size and CRC-32C, computed from the bytes as they were
// written, so a checkpoint manifest needs no second read of the file.
//
// Writeback is paced: every kChunkBytes the kernel is told to start writing the chunk out
// (sync_file_range), and the chunk before it is waited for and dropped from the page cache. Dirty
// memory stays at about two chunks however large the file, and the disk works from the first chunk
// on instead of all at the final fsync (docs/checkpoints.md, "Write path").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "common/status.h"
#include "trainer/io/safetensors.h"  // Durability

namespace eft::trainer {

struct TensorDecl {
  std::string name;
  at::ScalarType dtype;  // as stored; appended tensors are converted to it
  std::vector<int64_t> shape;
};

struct WrittenFile {
  std::string path;
  int64_t bytes = 0;
  uint32_t crc32c = 0;  // of the whole file, as common/crc32c.h computes it
};

class SafetensorsWriter {
 public:
  static constexpr uint64_t kChunkBytes = 64ull << 20;

  // InvalidArgument for a dtype the format lacks, a duplicate name, "__metadata__" as a name, or a
  // header that cannot be encoded; IoError when the temporary file cannot be created.
  // `chunk_bytes`: the writeback pacing unit (a multiple of the page size; tests make it small).
  static Result<std::unique_ptr<SafetensorsWriter>> Create(const std::string& path, std::vector<TensorDecl> tensors,
                                                           const std::map<std::string, std::string>& metadata = {},
                                                           uint64_t chunk_bytes = kChunkBytes,
                                                           Durability durability = Durability::kDurable);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The data of the next declared tensor, on any device and in any dtype (converted). InvalidArgument
  // when its number of elements differs from the declaration or every tensor was appended already.
  Status Append(const at::Tensor& tensor);
  bool complete() const { return next_ == tensors_.size(); }
  // FailedPrecondition unless complete(); then fsync, rename, directory fsync.
  Result<WrittenFile> Finish();

 private:
  SafetensorsWriter() = default;
  Status Write(const void* data, uint64_t n);

  std::string path_, tmp_;
  int fd_ = -1;
  std::vector<TensorDecl> tensors_;
  uint64_t chunk_bytes_ = kChunkBytes;
  size_t next_ = 0;
  uint64_t offset_ = 0;       // bytes written so far
  uint64_t synced_to_ = 0;    // writeback started for [0, synced_to_)
  uint64_t dropped_to_ = 0;   // written out and dropped from the page cache: [0, dropped_to_)
  uint32_t crc_ = 0;
  bool failed_ = false;
  Durability durability_ = Durability::kDurable;
};

// A model directory as Hugging Face writes it: `model.safetensors`, or shards of at most
// `max_shard_bytes` (filled greedily in declaration order, a tensor never split) named
// `model-0000i-of-0000n.safetensors` plus `model.safetensors.index.json`. {"format": "pt"} is added
// to the metadata unless given (transformers refuses files without it). Finish() removes files of an
// earlier write that would shadow or confuse this one (a stale index, model.safetensors, shards not
// written now), as save_pretrained does.
// One file of a model directory (safetensors_layout.h plans them).
struct ModelShard {
  std::string name;
  std::vector<TensorDecl> tensors;
};

class SafetensorsDirWriter {
 public:
  static Result<std::unique_ptr<SafetensorsDirWriter>> Create(const std::string& dir, std::vector<TensorDecl> tensors,
                                                              uint64_t max_shard_bytes,
                                                              std::map<std::string, std::string> metadata = {});
  Status Append(const at::Tensor& tensor);
  // The written files, in the directory's order (shards, then the index when there is one).
  Result<std::vector<WrittenFile>> Finish();

 private:
  SafetensorsDirWriter() = default;
  Status OpenShard(size_t i);

  std::string dir_;
  std::map<std::string, std::string> metadata_;
  std::vector<ModelShard> shards_;
  size_t shard_ = 0;
  std::unique_ptr<SafetensorsWriter> writer_;
  std::vector<WrittenFile> written_;
};

}  // namespace eft::trainer
