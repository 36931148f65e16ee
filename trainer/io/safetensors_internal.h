// What the safetensors reader (safetensors.cc) and the writers (safetensors_writer.cc) share: the
// format's dtypes. Not part of the io module's interface.
#pragma once

#include <cstdint>
#include <string>

#include <ATen/ATen.h>

namespace eft::trainer::safetensors_internal {

struct DtypeInfo {
  const char* name;  // as written in a header: "F32", "BF16", ...
  at::ScalarType type;
  uint64_t size;
  // Hugging Face's writer orders tensors by this rank, largest first, so that every tensor in the
  // data section is aligned to its element size when the section itself is 8-byte aligned.
  int rank;
};

// nullptr for a dtype the format lacks (complex, ...).
const DtypeInfo* DtypeByType(at::ScalarType type);
std::string ErrnoString(int err);

}  // namespace eft::trainer::safetensors_internal
