#include "trainer/export/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "common/file_util.h"

namespace eft::trainer {
namespace {

// GGUF's metadata value types (gguf.h: enum gguf_type).
enum class ValueType : uint32_t {
  kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7, kString = 8, kArray = 9, kUint64 = 10,
};

template <typename T>
void Put(std::string& out, T value) {
  // x86 and aarch64 are little-endian, as GGUF is; eft builds only there.
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}
void PutString(std::string& out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  out.append(s);
}
void PutKey(std::string& out, const std::string& key, ValueType type) {
  PutString(out, key);
  Put<uint32_t>(out, static_cast<uint32_t>(type));
}

// An array of fixed-size numbers: element type, count, the values little-endian.
template <typename T>
void PutNumberArray(std::string& out, ValueType type, const std::vector<T>& values) {
  Put<uint32_t>(out, static_cast<uint32_t>(type));
  Put<uint64_t>(out, values.size());
  for (T v : values) Put(out, v);
}

uint64_t AlignUp(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

Status WriteAll(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("cannot write " + path + ": " + std::strerror(errno));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

}  // namespace

uint64_t GgmlRowBytes(GgmlType type, int64_t n) {
  switch (type) {
    case GgmlType::kF32: return 4 * static_cast<uint64_t>(n);
    case GgmlType::kF16:
    case GgmlType::kBF16: return 2 * static_cast<uint64_t>(n);
    case GgmlType::kQ8_0: return static_cast<uint64_t>(n) / 32 * 34;  // fp16 scale + 32 int8 per block
  }
  return 0;
}

const char* GgmlTypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return "f32";
    case GgmlType::kF16: return "f16";
    case GgmlType::kBF16: return "bf16";
    case GgmlType::kQ8_0: return "q8_0";
  }
  return "?";
}

void GgufWriter::AddUint32(std::string key, uint32_t value) {
  PutKey(kv_bytes_, key, ValueType::kUint32);
  Put(kv_bytes_, value);
  keys_.push_back(std::move(key));
}
void GgufWriter::AddInt32(std::string key, int32_t value) {
  PutKey(kv_bytes_, key, ValueType::kInt32);
  Put(kv_bytes_, value);
  keys_.push_back(std::move(key));
}
void GgufWriter::AddUint64(std::string key, uint64_t value) {
  PutKey(kv_bytes_, key, ValueType::kUint64);
  Put(kv_bytes_, value);
  keys_.push_back(std::move(key));
}
void GgufWriter::AddFloat32(std::string key, float value) {
  PutKey(kv_bytes_, key, ValueType::kFloat32);
  Put(kv_bytes_, value);
  keys_.push_back(std::move(key));
}
void GgufWriter::AddBool(std::string key, bool value) {
  PutKey(kv_bytes_, key, ValueType::kBool);
  Put<uint8_t>(kv_bytes_, value ? 1 : 0);
  keys_.push_back(std::move(key));
}
void GgufWriter::AddString(std::string key, std::string value) {
  PutKey(kv_bytes_, key, ValueType::kString);
  PutString(kv_bytes_, value);
  keys_.push_back(std::move(key));
}
void GgufWriter::AddStringArray(std::string key, const std::vector<std::string>& values) {
  PutKey(kv_bytes_, key, ValueType::kArray);
  Put<uint32_t>(kv_bytes_, static_cast<uint32_t>(ValueType::kString));
  Put<uint64_t>(kv_bytes_, values.size());
  for (const auto& v : values) PutString(kv_bytes_, v);
  keys_.push_back(std::move(key));
}
void GgufWriter::AddInt32Array(std::string key, const std::vector<int32_t>& values) {
  PutKey(kv_bytes_, key, ValueType::kArray);
  PutNumberArray(kv_bytes_, ValueType::kInt32, values);
  keys_.push_back(std::move(key));
}
void GgufWriter::AddFloat32Array(std::string key, const std::vector<float>& values) {
  PutKey(kv_bytes_, key, ValueType::kArray);
  PutNumberArray(kv_bytes_, ValueType::kFloat32, values);
  keys_.push_back(std::move(key));
}

Status GgufWriter::DeclareTensor(std::string name, GgmlType type, std::vector<int64_t> shape) {
  if (name.empty()) return Status::InvalidArgument("GGUF tensor with an empty name");
  for (const auto& t : tensors_) {
    if (t.name == name) return Status::InvalidArgument("GGUF tensor " + name + " declared twice");
  }
  if (shape.empty()) return Status::InvalidArgument("GGUF tensor " + name + " has no dimensions");
  uint64_t rows = 1;
  for (int64_t d : shape) {
    if (d <= 0) return Status::InvalidArgument("GGUF tensor " + name + " has a non-positive dimension");
  }
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= static_cast<uint64_t>(shape[i]);
  if (type == GgmlType::kQ8_0 && shape.back() % 32 != 0) {
    return Status::InvalidArgument("GGUF tensor " + name + ": q8_0 needs rows of a multiple of 32 elements, got " +
                                   std::to_string(shape.back()));
  }
  Tensor t{std::move(name), type, std::move(shape), 0, 0};
  t.bytes = rows * GgmlRowBytes(type, t.shape.back());
  t.offset = data_bytes_;
  data_bytes_ = AlignUp(data_bytes_ + t.bytes, kAlignment);
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

std::string GgufWriter::Header() const {
  std::string h;
  h.append("GGUF");
  Put<uint32_t>(h, kVersion);
  Put<uint64_t>(h, tensors_.size());
  Put<uint64_t>(h, keys_.size());
  h.append(kv_bytes_);
  for (const auto& t : tensors_) {
    PutString(h, t.name);
    Put<uint32_t>(h, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) Put<uint64_t>(h, static_cast<uint64_t>(*it));
    Put<uint32_t>(h, static_cast<uint32_t>(t.type));
    Put<uint64_t>(h, t.offset);
  }
  h.resize(AlignUp(h.size(), kAlignment), '\0');
  return h;
}

Result<uint64_t> GgufWriter::Write(const std::string& path, const TensorBytes& tensor_bytes) const {
  std::set<std::string> seen;
  for (const auto& k : keys_) {
    if (!seen.insert(k).second) return Status::InvalidArgument("GGUF metadata key " + k + " added twice");
  }
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("cannot write " + path + ": " + std::strerror(errno));
  // On any error: close and remove the temporary file, so a failed export leaves nothing behind.
  auto fail = [&](Status s) -> Result<uint64_t> {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  const std::string header = Header();
  if (Status s = WriteAll(fd, header.data(), header.size(), path); !s.ok()) return fail(s);
  uint64_t written = 0;  // of the data section
  const std::string padding(kAlignment, '\0');
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    auto bytes = tensor_bytes(i);
    if (!bytes.ok()) return fail(bytes.status());
    if (bytes->size() != t.bytes) {
      return fail(Status::InvalidArgument("GGUF tensor " + t.name + ": " + std::to_string(bytes->size()) +
                                          " bytes given, " + std::to_string(t.bytes) + " declared"));
    }
    if (Status s = WriteAll(fd, bytes->data(), bytes->size(), path); !s.ok()) return fail(s);
    written += t.bytes;
    const uint64_t pad = AlignUp(written, kAlignment) - written;
    if (Status s = WriteAll(fd, padding.data(), pad, path); !s.ok()) return fail(s);
    written += pad;
  }
  if (::fsync(fd) != 0) return fail(Status::IoError("fsync of " + tmp + ": " + std::strerror(errno)));
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return Status::IoError("cannot write " + path + ": " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::IoError("cannot rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
  if (Status s = FsyncDir(dir); !s.ok()) return s;
  return static_cast<uint64_t>(header.size()) + written;
}

}  // namespace eft::trainer
