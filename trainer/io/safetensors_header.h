// The safetensors format's metadata, parsed without LibTorch: a file's header (tensor names, dtypes,
// shapes, data offsets, __metadata__) checked against the file's size, and a sharded directory's
// model.safetensors.index.json. safetensors.h's reader maps the file and builds tensors from these;
// kept apart so that the parsing of what comes from outside can be fuzzed under sanitizers, where
// LibTorch is not built (docs/fuzzing.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace eft::trainer {

struct SafetensorsHeaderEntry {
  std::string name;
  std::string dtype;  // one of the dtypes LibTorch can hold: "BOOL", "U8", ..., "F64", "I64"
  uint64_t dtype_size = 0;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;  // where the data section starts in the file: 8 + the header's length
  uint64_t data_size = 0;
  std::vector<SafetensorsHeaderEntry> entries;  // in data-offset order, tiling the data section
  std::map<std::string, std::string> metadata;
};

// `head`: the file's first bytes, at least its 8-byte length and header whenever the file holds
// them (the whole mapping, for the reader); `file_size`: the whole file's. `path` names the file in
// errors. DataLoss naming the problem, as Hugging Face's reader checks: a header that is not a JSON
// object, a duplicate name, an unknown dtype, offsets outside the data section, a shape whose size
// differs from its range, tensors that overlap or leave bytes of the data section undescribed.
Result<SafetensorsHeader> ParseSafetensorsHeader(const std::string& path, std::string_view head, uint64_t file_size);

// model.safetensors.index.json's text: its weight_map, tensor name -> shard file name. DataLoss for
// what is not JSON, lacks a weight_map object, maps to a non-string, or names a file outside the
// index's own directory.
Result<std::map<std::string, std::string>> ParseSafetensorsIndex(const std::string& index_path, std::string_view text);

}  // namespace eft::trainer
