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
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "trainer/io/safetensors_internal.h"

namespace eft::trainer {

// The format is little-endian on disk; we copy bytes straight into tensors.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace fs = std::filesystem;
using json = nlohmann::json;

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

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // Hugging Face's own limit
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// Dtypes the format defines but LibTorch 1.13 cannot hold: named as unsupported, not unknown.
constexpr const char* kUnsupportedDtypes[] = {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0",
                                              "F4", "F6_E2M3", "F6_E3M2", "C64"};

const DtypeInfo* DtypeByName(std::string_view name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string RangeString(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// A JSON value for an error message. dump() recurses, so a hostile header nested a million deep
// would overflow the stack: only flat values are printed, and long ones are cut.
std::string Brief(const json& j) {
  if (j.is_structured()) {
    for (const auto& v : j) {
      if (v.is_structured()) return std::string("a nested ") + j.type_name();
    }
  }
  std::string s = j.dump();
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

// Parses `shape`: non-negative integers whose product (with 0 counted as 1, as strides are) fits in
// int64, so neither numel nor any stride LibTorch derives from it can overflow.
bool ParseShape(const json& j, std::vector<int64_t>* shape, uint64_t* numel, std::string* why) {
  if (!j.is_array()) {
    *why = "shape must be an array of non-negative integers, got " + Brief(j);
    return false;
  }
  uint64_t n = 1;
  int64_t stride_product = 1;
  for (const auto& d : j) {
    if (!d.is_number_unsigned()) {
      *why = "shape must be an array of non-negative integers, got " + Brief(j);
      return false;
    }
    uint64_t v = d.get<uint64_t>();
    int64_t clamped = 0;
    if (v > static_cast<uint64_t>(INT64_MAX) ||
        __builtin_mul_overflow(stride_product, std::max<int64_t>(static_cast<int64_t>(v), 1), &clamped)) {
      *why = "shape " + Brief(j) + " is too large";
      return false;
    }
    stride_product = clamped;
    n *= v;  // cannot overflow: bounded by stride_product
    shape->push_back(static_cast<int64_t>(v));
  }
  *numel = n;
  return true;
}

// Reads and validates one header entry; `data_size` bounds the offsets.
Status ParseEntry(const std::string& path, const std::string& name, const json& j, uint64_t data_size,
                  SafetensorsEntry* e) {
  auto fail = [&](const std::string& why) { return Status::DataLoss(path + ": tensor '" + name + "' " + why); };
  if (!j.is_object()) return fail("is not a JSON object: " + Brief(j));
  e->name = name;
  auto dt = j.find("dtype");
  if (dt == j.end() || !dt->is_string()) return fail("has no string \"dtype\"");
  e->dtype = dt->get<std::string>();
  const DtypeInfo* info = DtypeByName(e->dtype);
  if (info == nullptr) {
    for (const char* u : kUnsupportedDtypes) {
      if (e->dtype == u) return fail("has dtype '" + e->dtype + "', which LibTorch 1.13 cannot hold");
    }
    return fail("has unknown dtype '" + e->dtype + "'");
  }
  e->scalar_type = info->type;

  auto sh = j.find("shape");
  if (sh == j.end()) return fail("has no \"shape\"");
  uint64_t numel = 0;
  std::string why;
  if (!ParseShape(*sh, &e->shape, &numel, &why)) return fail(why);

  auto off = j.find("data_offsets");
  if (off == j.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return fail("data_offsets must be [begin, end] of non-negative integers, got " +
                (off == j.end() ? std::string("nothing") : Brief(*off)));
  }
  e->begin = (*off)[0].get<uint64_t>();
  e->end = (*off)[1].get<uint64_t>();
  if (e->begin > e->end) return fail("data_offsets " + RangeString(e->begin, e->end) + " have begin > end");
  if (e->end > data_size) {
    return fail("data_offsets " + RangeString(e->begin, e->end) + " exceed the data section (" +
                std::to_string(data_size) + " bytes)");
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, info->size, &nbytes)) {
    return fail("shape " + ShapeString(e->shape) + " is too large");
  }
  if (nbytes != e->end - e->begin) {
    return fail("has shape " + ShapeString(e->shape) + " and dtype " + e->dtype + " (" + std::to_string(nbytes) +
                " bytes) but data_offsets " + RangeString(e->begin, e->end) + " span " +
                std::to_string(e->end - e->begin) + " bytes");
  }
  return Status::Ok();
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
  const uint8_t* bytes = static_cast<const uint8_t*>(map);

  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > file_size - 8) {
    return Status::DataLoss(path + ": header length " + std::to_string(header_len) + " exceeds the file (" +
                            std::to_string(file_size) + " bytes)");
  }
  if (header_len > kMaxHeaderBytes) {
    return Status::DataLoss(path + ": header length " + std::to_string(header_len) + " exceeds the " +
                            std::to_string(kMaxHeaderBytes >> 20) + " MB limit");
  }
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  // nlohmann stops at a NUL as if the input ended there, which would let garbage after it through.
  if (std::memchr(header, '\0', header_len) != nullptr) {
    return Status::DataLoss(path + ": header contains a NUL byte (padding must be spaces)");
  }
  const uint64_t data_size = file_size - 8 - header_len;
  f->data_ = bytes + 8 + header_len;

  // nlohmann keeps the last of duplicate keys silently; a duplicated tensor name is corruption.
  std::string duplicate;
  std::set<std::string> top_keys;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && parsed.is_string()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!top_keys.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json h;
  try {
    h = json::parse(header, header + header_len, cb);
  } catch (const json::exception& e) {
    return Status::DataLoss(path + ": header is not valid JSON: " + e.what());
  }
  if (!h.is_object()) return Status::DataLoss(path + ": header is not a JSON object");
  if (!duplicate.empty()) return Status::DataLoss(path + ": header names '" + duplicate + "' twice");

  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_null()) continue;
      if (!it->is_object()) return Status::DataLoss(path + ": __metadata__ is not a JSON object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return Status::DataLoss(path + ": __metadata__ value for '" + m.key() + "' is not a string: " + Brief(*m));
        }
        f->metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    SafetensorsEntry e;
    EFT_RETURN_IF_ERROR(ParseEntry(path, it.key(), *it, data_size, &e));
    f->entries_.push_back(std::move(e));
  }

  // Tensors must tile the data section exactly, as Hugging Face's reader requires: no overlap
  // (one write would show through another tensor) and no gap (bytes that nothing describes).
  std::sort(f->entries_.begin(), f->entries_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < f->entries_.size(); ++i) {
    const SafetensorsEntry& e = f->entries_[i];
    if (e.begin < covered) {
      const SafetensorsEntry& p = f->entries_[i - 1];
      return Status::DataLoss(path + ": tensors '" + p.name + "' " + RangeString(p.begin, p.end) + " and '" + e.name +
                              "' " + RangeString(e.begin, e.end) + " overlap");
    }
    if (e.begin > covered) {
      return Status::DataLoss(path + ": data section bytes [" + std::to_string(covered) + ", " +
                              std::to_string(e.begin) + ") before tensor '" + e.name +
                              "' belong to no tensor (metadata incomplete buffer)");
    }
    covered = e.end;
  }
  if (covered != data_size) {
    return Status::DataLoss(path + ": data section is " + std::to_string(data_size) + " bytes but the tensors cover " +
                            std::to_string(covered) + " (metadata incomplete buffer)");
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

  json index;
  std::ifstream in(index_path, std::ios::binary);
  if (!in) return Status::IoError("opening " + index_path + ": " + ErrnoString(errno));
  try {
    index = json::parse(in);
  } catch (const json::exception& e) {
    return Status::DataLoss(index_path + ": not valid JSON: " + e.what());
  }
  auto wm = index.is_object() ? index.find("weight_map") : index.end();
  if (!index.is_object() || wm == index.end() || !wm->is_object()) {
    return Status::DataLoss(index_path + ": no \"weight_map\" object");
  }
  std::map<std::string, size_t> file_index;                // shard file name -> files_ index
  std::map<std::string, std::string> weight_map;           // tensor -> shard file name
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) return Status::DataLoss(index_path + ": weight_map['" + it.key() + "'] is not a string");
    const std::string file = it->get<std::string>();
    // Shards live beside the index; refusing other paths keeps a hostile index inside `dir`.
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return Status::DataLoss(index_path + ": weight_map['" + it.key() + "'] names '" + file +
                              "', not a file name in the same directory");
    }
    weight_map[it.key()] = file;
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
