// A safetensors file's header (trainer/io/safetensors_header.h, what SafetensorsFile::Open checks
// before any tensor byte is read) and a sharded model's model.safetensors.index.json: both come
// with models downloaded from anywhere. The tensors the reader then views with from_blob must lie
// inside the data section, each exactly as long as its shape and dtype say, and none overlapping.
//
// Input: 8 bytes little-endian D, then the file's beginning (header length, header, any data). The
// file handed to the parser is that beginning followed by D more data bytes that are never read, so
// a seed is a real model's header without its hundreds of megabytes. The whole input also goes to
// the index parser as its text.
#include <cstring>
#include <limits>
#include <set>

#include "fuzz/fuzz_target.h"
#include "trainer/io/safetensors_header.h"

namespace {

void CheckHeader(const eft::trainer::SafetensorsHeader& h, uint64_t file_size) {
  FUZZ_CHECK(h.data_offset >= 8 && h.data_offset <= file_size, "data section starts outside the file");
  FUZZ_CHECK(h.data_offset + h.data_size == file_size, "data section does not end with the file");
  std::set<std::string> names;
  uint64_t covered = 0;
  for (const auto& e : h.entries) {
    FUZZ_CHECK(names.insert(e.name).second, "tensor '" + e.name + "' accepted twice");
    FUZZ_CHECK(e.name != "__metadata__", "__metadata__ taken for a tensor");
    FUZZ_CHECK(e.begin <= e.end && e.end <= h.data_size, "tensor '" + e.name + "' outside the data section");
    FUZZ_CHECK(e.begin == covered, "tensor '" + e.name + "' overlaps the previous one or leaves a gap");
    covered = e.end;
    FUZZ_CHECK(e.dtype_size == 1 || e.dtype_size == 2 || e.dtype_size == 4 || e.dtype_size == 8, e.dtype);
    uint64_t bytes = e.dtype_size;
    int64_t strides = 1;  // LibTorch computes strides from the shape in int64
    for (int64_t d : e.shape) {
      FUZZ_CHECK(d >= 0, "tensor '" + e.name + "' has a negative dimension");
      FUZZ_CHECK(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes), "size overflows: " + e.name);
      FUZZ_CHECK(!__builtin_mul_overflow(strides, d > 0 ? d : 1, &strides), "strides overflow: " + e.name);
    }
    FUZZ_CHECK(bytes == e.end - e.begin, "tensor '" + e.name + "': shape times dtype size is not its range");
  }
  FUZZ_CHECK(covered == h.data_size, "bytes of the data section belong to no tensor");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto index = eft::trainer::ParseSafetensorsIndex("index.json", text); index.ok()) {
    for (const auto& [tensor, file] : *index) {
      FUZZ_CHECK(!file.empty() && file != "." && file != ".." && file.find('/') == std::string::npos,
                 "weight_map['" + tensor + "'] leaves the directory: " + file);
    }
  } else {
    FUZZ_CHECK(!index.status().message().empty(), "a refusal without a message");
  }

  if (size < 8) return 0;
  uint64_t unread = 0;
  std::memcpy(&unread, data, 8);
  const std::string_view head = text.substr(8);
  if (unread > std::numeric_limits<uint64_t>::max() - head.size()) return 0;
  const uint64_t file_size = head.size() + unread;
  auto header = eft::trainer::ParseSafetensorsHeader("model.safetensors", head, file_size);
  if (!header.ok()) {
    FUZZ_CHECK(!header.status().message().empty(), "a refusal without a message");
    return 0;
  }
  CheckHeader(*header, file_size);
  return 0;
}
