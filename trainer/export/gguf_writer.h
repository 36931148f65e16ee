// GgufWriter: the GGUF v3 container llama.cpp loads (ggml's docs/gguf.md), written by eft itself.
//
// File layout (all little-endian): "GGUF", version 3 (u32), tensor count (u64), metadata count (u64);
// the metadata: key (u64 length + UTF-8 bytes), value type (u32), value (strings as the key; arrays:
// element type u32, count u64, elements); the tensor infos: name, dimension count (u32), dimensions
// (u64 each, innermost first: ggml's ne[0] is a row's length, so a [rows, cols] row-major tensor is
// written as [cols, rows]), ggml type (u32), offset (u64) into the data section; padding to the
// alignment; the data section, each tensor starting at a multiple of the alignment.
//
// The metadata is added first, then the tensors are declared (name, type, shape, byte size), then
// Write streams each tensor's bytes from a callback, one at a time, so memory holds one tensor, not
// the model. The file is written atomically: a temporary file beside `path`, fsynced, renamed over
// `path`, the directory fsynced; a failed write leaves `path` as it was and no temporary file.
// No LibTorch here: the container is plain bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace eft::trainer {

// ggml's tensor types that eft writes (ggml.h: enum ggml_type).
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8, kBF16 = 30 };

// Bytes a row of `n` elements takes; n must be a multiple of the type's block size (32 for q8_0).
uint64_t GgmlRowBytes(GgmlType type, int64_t n);
const char* GgmlTypeName(GgmlType type);  // "f32", "f16", "q8_0", "bf16"

class GgufWriter {
 public:
  static constexpr uint32_t kVersion = 3;
  static constexpr uint32_t kAlignment = 32;  // GGUF's default; also written as general.alignment

  // Metadata, written in the order added. Keys must be unique (checked by Write).
  void AddUint32(std::string key, uint32_t value);
  void AddInt32(std::string key, int32_t value);
  void AddUint64(std::string key, uint64_t value);
  void AddFloat32(std::string key, float value);
  void AddBool(std::string key, bool value);
  void AddString(std::string key, std::string value);
  void AddStringArray(std::string key, const std::vector<std::string>& values);
  void AddInt32Array(std::string key, const std::vector<int32_t>& values);
  void AddFloat32Array(std::string key, const std::vector<float>& values);

  // `shape` row-major as LibTorch has it ([out, in] for a linear weight); written innermost first.
  // InvalidArgument for an empty or duplicate name, a non-positive dimension, or a row length that is
  // not a whole number of the type's blocks.
  Status DeclareTensor(std::string name, GgmlType type, std::vector<int64_t> shape);
  size_t tensor_count() const { return tensors_.size(); }

  // Produces the bytes of declared tensor `index` (its exact size: GgmlRowBytes * rows), called once
  // per tensor in declaration order.
  using TensorBytes = std::function<Result<std::string>(size_t index)>;
  // Writes the file. Errors: InvalidArgument (a duplicate key, or the callback's bytes of the wrong
  // size), IoError naming `path` and the system's reason (a missing or unwritable directory, a full
  // disk), or the callback's own error. Returns the file's size in bytes.
  Result<uint64_t> Write(const std::string& path, const TensorBytes& tensor_bytes) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;
    uint64_t bytes = 0;
    uint64_t offset = 0;  // into the data section, aligned
  };
  std::string Header() const;  // everything before the data section, padded

  std::vector<std::string> keys_;
  std::string kv_bytes_;  // the encoded metadata, in order
  std::vector<Tensor> tensors_;
  uint64_t data_bytes_ = 0;
};

}  // namespace eft::trainer
