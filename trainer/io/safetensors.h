// safetensors: Hugging Face's tensor file format, read with mmap and written atomically.
//
// File layout: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {..}},
// then the data, offsets relative to the end of the header. Every offset, shape and dtype is checked
// against the file before any byte is read, so a malformed file is an error naming the problem,
// never a crash or an out-of-bounds read.
//
// A model directory holds either `model.safetensors` or shards `model-0000i-of-0000n.safetensors`
// listed by `model.safetensors.index.json` ({"metadata": {"total_size": ..}, "weight_map": {name: file}}).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "common/status.h"

namespace eft::trainer {

struct WrittenFile;  // safetensors_writer.h

// kVolatile: for files whose loss on a crash is acceptable (memory snapshots, written into tmpfs
// and taken over at once): no paced writeback, no fsync of the file or its directory, so writing
// one never waits on a disk. The rename into place is still atomic.
enum class Durability { kDurable, kVolatile };

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as written in the file: "F32", "BF16", "F16", "I64", ...
  at::ScalarType scalar_type;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

// One .safetensors file, memory-mapped read-only.
class SafetensorsFile {
 public:
  // Errors: NotFound (no such file), DataLoss (malformed: the message names the file and what is
  // wrong), Internal (I/O). Checks what Hugging Face's reader checks, notably that the tensors
  // tile the data section with no gap, overlap or trailing byte.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in data-offset order
  const SafetensorsEntry* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A tensor viewing the mapped bytes (no copy); valid while this object lives. Read-only use:
  // the pages are mapped PROT_READ, so writing through it (in-place ops, copy_ into it) is a
  // SIGSEGV. `entry` must come from this file. Aligned for files written by HF or by us; another
  // writer's unpadded header can leave it misaligned (fine on x86; use Load to be safe).
  at::Tensor View(const SafetensorsEntry& entry) const;
  // A new tensor with the data converted to `dtype` (a copy that outlives the file). BOOL bytes
  // other than 0 and 1 read as true.
  Result<at::Tensor> Load(const std::string& name, at::ScalarType dtype) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (contiguous copies are made as needed; dtype as given) to `path` atomically:
// a temporary file in the same directory, fsynced, then renamed, then the directory fsynced (without
// the fsyncs for Durability::kVolatile).
// Layout as Hugging Face's writer: widest dtype first then by name, header padded to 8 bytes.
// InvalidArgument for a dtype the format lacks (complex, ...), a duplicate name or "__metadata__".
// `written`, when given, receives the file's size and CRC-32C. (safetensors_writer.h streams.)
Status WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata = {}, WrittenFile* written = nullptr,
                        Durability durability = Durability::kDurable);

// A model directory: one file or an index of shards.
class SafetensorsDir {
 public:
  // Opens each shard once. NotFound when `dir` has neither file; DataLoss when the index and the
  // shards disagree (a missing shard, a listed tensor absent from its shard, an unlisted tensor).
  static Result<std::unique_ptr<SafetensorsDir>> Open(const std::string& dir);
  std::vector<std::string> names() const;  // sorted
  const SafetensorsEntry* Find(const std::string& name) const;
  Result<at::Tensor> Load(const std::string& name, at::ScalarType dtype) const;

 private:
  std::string dir_;  // for error messages
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> file_of_;  // tensor name -> index into files_
};

// Writes `tensors` into `dir` as shards of at most `max_shard_bytes` (a tensor is never split;
// one shard: plain model.safetensors, no index), plus the index when sharded. Shards are filled
// greedily, and each file laid out, in the given order (SafetensorsDirWriter). Adds {"format": "pt"} to the metadata unless given (transformers
// refuses files without it). Files of an earlier write that would shadow or confuse this one (a
// stale index, model.safetensors, model-*-of-*.safetensors not written now) are removed.
Status WriteSafetensorsDir(const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata = {});

}  // namespace eft::trainer
