#include "trainer/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string_view>

#include "trainer/io/safetensors_header.h"
#include "trainer/io/safetensors_internal.h"

namespace eft::trainer {

// The format is little-endian on disk; we copy bytes straight into tensors.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace fs = std::filesystem;

namespace safetensors_internal {

constexpr DtypeInfo kDtypes[] = {
    {"BOOL", at::kBool, 1, 0},   {"U8", at::kByte, 1, 1},     {"I8", at::kChar, 1, 2},
    {"I16", at::kShort, 2, 3},   {"F16", at::kHalf, 2, 4},    {"BF16", at::kBFloat16, 2, 5},
    {"I32", at::kInt, 4, 6},     {"F32", at::kFloat, 4, 7},   {"F64", at::kDouble, 8, 8},
    {"I64", at::kLong, 8, 9},
};

const DtypeInfo* DtypeByType(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (type == d.type) return &d;
  }
  return nullptr;
}

std::string ErrnoString(int err) { return std::strerror(err); }

}  // namespace safetensors_internal

using namespace safetensors_internal;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

const DtypeInfo* DtypeByName(std::string_view name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Reading

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string msg = "opening " + path + ": " + ErrnoString(err);
    return err == ENOENT ? Status::NotFound(msg) : Status::IoError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::IoError("fstat " + path + ": " + ErrnoString(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + ": not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    return Status::DataLoss(path + ": file is " + std::to_string(file_size) +
                            " bytes, too short for the 8-byte header length");
  }
  // The mapping outlives the descriptor; the kernel keeps the file referenced.
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  if (map == MAP_FAILED) return Status::IoError("mmap " + path + ": " + ErrnoString(map_err));
  f->map_ = map;
  f->map_size_ = file_size;
  EFT_ASSIGN_OR_RETURN(SafetensorsHeader header,
                       ParseSafetensorsHeader(path, std::string_view(static_cast<const char*>(map), file_size), file_size));
  f->data_ = static_cast<const uint8_t*>(map) + header.data_offset;
  f->metadata_ = std::move(header.metadata);
  f->entries_.reserve(header.entries.size());
  for (SafetensorsHeaderEntry& h : header.entries) {
    // The header parser's dtype table (torch-free) and this one must agree on names and sizes.
    const DtypeInfo* info = DtypeByName(h.dtype);
    if (info == nullptr || info->size != h.dtype_size) {
      return Status::Internal(path + ": tensor '" + h.name + "': dtype " + h.dtype + " has no LibTorch type of " +
                              std::to_string(h.dtype_size) + " bytes");
    }
    f->entries_.push_back({std::move(h.name), std::move(h.dtype), info->type, std::move(h.shape), h.begin, h.end});
  }
  for (size_t i = 0; i < f->entries_.size(); ++i) f->by_name_[f->entries_[i].name] = i;
  return f;
}

const SafetensorsEntry* SafetensorsFile::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

at::Tensor SafetensorsFile::View(const SafetensorsEntry& entry) const {
  // from_blob never frees: the mapping belongs to this object. The pages are PROT_READ, so a write
  // through the tensor faults instead of silently diverging from the file. The pointer is aligned
  // to the element size for files laid out like Hugging Face's (8-byte-aligned data section).
  void* p = const_cast<uint8_t*>(data_ + entry.begin);
  return at::from_blob(p, entry.shape, at::TensorOptions().dtype(entry.scalar_type));
}

Result<at::Tensor> SafetensorsFile::Load(const std::string& name, at::ScalarType dtype) const {
  const SafetensorsEntry* e = Find(name);
  if (e == nullptr) return Status::NotFound(path_ + ": no tensor '" + name + "'");
  // memcpy into fresh storage rather than converting from the mapping: the file may come from a
  // writer that did not align the data, and BOOL bytes other than 0/1 must not reach a kBool tensor.
  const bool is_bool = e->scalar_type == at::kBool;
  at::Tensor t = at::empty(e->shape, at::TensorOptions().dtype(is_bool ? at::kByte : e->scalar_type));
  if (e->end > e->begin) std::memcpy(t.data_ptr(), data_ + e->begin, e->end - e->begin);
  if (is_bool) t = t.ne(0);
  return t.to(dtype);
}

// ---------------------------------------------------------------------------------------------------
// Writing

// ---------------------------------------------------------------------------------------------------
// Directories

Result<std::unique_ptr<SafetensorsDir>> SafetensorsDir::Open(const std::string& dir) {
  auto d = std::make_unique<SafetensorsDir>();
  d->dir_ = dir;
  const std::string index_path = (fs::path(dir) / kIndexName).string();
  const std::string single_path = (fs::path(dir) / kSingleName).string();
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec)) {
      return Status::NotFound("no " + std::string(kSingleName) + " or " + kIndexName + " in " + dir);
    }
    EFT_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(single_path));
    for (const auto& e : f->entries()) d->file_of_[e.name] = 0;
    d->files_.push_back(std::move(f));
    return d;
  }

  std::ifstream in(index_path, std::ios::binary);
  if (!in) return Status::IoError("opening " + index_path + ": " + ErrnoString(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EFT_ASSIGN_OR_RETURN(const auto weight_map, ParseSafetensorsIndex(index_path, text));
  std::map<std::string, size_t> file_index;                // shard file name -> files_ index
  for (const auto& [name, file] : weight_map) {
    if (file_index.count(file)) continue;
    const std::string shard_path = (fs::path(dir) / file).string();
    auto f = SafetensorsFile::Open(shard_path);
    if (!f.ok()) return f.status().WithContext(index_path + " lists " + file);
    file_index[file] = d->files_.size();
    d->files_.push_back(std::move(f).value());
  }
  for (const auto& [name, file] : weight_map) {
    const SafetensorsFile& f = *d->files_[file_index[file]];
    if (f.Find(name) == nullptr) {
      return Status::DataLoss(index_path + " maps tensor '" + name + "' to " + file + ", which does not hold it");
    }
    d->file_of_[name] = file_index[file];
  }
  for (const auto& [file, i] : file_index) {
    for (const auto& e : d->files_[i]->entries()) {
      auto w = weight_map.find(e.name);
      if (w == weight_map.end()) {
        return Status::DataLoss(d->files_[i]->path() + " holds tensor '" + e.name + "', which " + index_path +
                                " does not list");
      }
      if (w->second != file) {
        return Status::DataLoss(d->files_[i]->path() + " holds tensor '" + e.name + "', which " + index_path +
                                " maps to " + w->second);
      }
    }
  }
  return d;
}

std::vector<std::string> SafetensorsDir::names() const {
  std::vector<std::string> out;
  out.reserve(file_of_.size());
  for (const auto& [name, i] : file_of_) out.push_back(name);
  return out;
}

const SafetensorsEntry* SafetensorsDir::Find(const std::string& name) const {
  auto it = file_of_.find(name);
  return it == file_of_.end() ? nullptr : files_[it->second]->Find(name);
}

Result<at::Tensor> SafetensorsDir::Load(const std::string& name, at::ScalarType dtype) const {
  auto it = file_of_.find(name);
  if (it == file_of_.end()) return Status::NotFound(dir_ + ": no tensor '" + name + "'");
  return files_[it->second]->Load(name, dtype);
}

}  // namespace eft::trainer
