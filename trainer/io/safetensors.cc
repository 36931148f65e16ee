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

namespace eft::trainer {

// The format is little-endian on disk; we copy bytes straight into tensors.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // Hugging Face's own limit
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

struct DtypeInfo {
  const char* name;
  at::ScalarType type;
  uint64_t size;
  // Hugging Face's writer orders tensors by this rank, largest first, so that every tensor in the
  // data section is aligned to its element size when the section itself is 8-byte aligned.
  int rank;
};

constexpr DtypeInfo kDtypes[] = {
    {"BOOL", at::kBool, 1, 0},   {"U8", at::kByte, 1, 1},     {"I8", at::kChar, 1, 2},
    {"I16", at::kShort, 2, 3},   {"F16", at::kHalf, 2, 4},    {"BF16", at::kBFloat16, 2, 5},
    {"I32", at::kInt, 4, 6},     {"F32", at::kFloat, 4, 7},   {"F64", at::kDouble, 8, 8},
    {"I64", at::kLong, 8, 9},
};

// Dtypes the format defines but LibTorch 1.13 cannot hold: named as unsupported, not unknown.
constexpr const char* kUnsupportedDtypes[] = {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0",
                                              "F4", "F6_E2M3", "F6_E3M2", "C64"};

const DtypeInfo* DtypeByName(std::string_view name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const DtypeInfo* DtypeByType(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (type == d.type) return &d;
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

std::string ErrnoString(int err) { return std::strerror(err); }

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

// Writes all of [p, p+n) to fd, retrying short writes (a single write() stops near 2 GiB).
Status WriteAll(int fd, const void* p, size_t n, const std::string& what) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("writing " + what + ": " + ErrnoString(errno));
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// A rename is only durable once the directory entry is on disk.
Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("opening directory " + dir + ": " + ErrnoString(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::IoError("fsync " + dir + ": " + ErrnoString(err));
  return Status::Ok();
}

std::string DirOf(const std::string& path) {
  std::string d = fs::path(path).parent_path().string();
  return d.empty() ? "." : d;
}

// Creates `path` atomically: `body` fills a temporary file beside it, which is fsynced and renamed
// over `path`, so readers see the old file or the complete new one, never a torn one.
Status WriteAtomically(const std::string& path, const std::function<Status(int fd, const std::string& tmp)>& body) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("creating " + tmp + ": " + ErrnoString(errno));
  Status s = body(fd, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Status::IoError("fsync " + tmp + ": " + ErrnoString(errno));
  if (::close(fd) != 0 && s.ok()) s = Status::IoError("closing " + tmp + ": " + ErrnoString(errno));
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Status::IoError("renaming " + tmp + " to " + path + ": " + ErrnoString(errno));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncDir(DirOf(path));
}

// Removes `path` if present; a missing file is not an error.
Status RemoveIfExists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::IoError("removing stale " + path + ": " + ErrnoString(errno));
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

Status WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  struct Item {
    const std::string* name;
    const at::Tensor* tensor;
    const DtypeInfo* info;
    uint64_t nbytes;
  };
  std::vector<Item> items;
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) return Status::InvalidArgument(path + ": tensor '" + name + "' is undefined");
    if (name == "__metadata__") return Status::InvalidArgument(path + ": '__metadata__' cannot name a tensor");
    if (!names.insert(name).second) return Status::InvalidArgument(path + ": tensor '" + name + "' given twice");
    if (t.layout() != at::kStrided) return Status::InvalidArgument(path + ": tensor '" + name + "' is not dense");
    const DtypeInfo* info = DtypeByType(t.scalar_type());
    if (info == nullptr) {
      return Status::InvalidArgument(path + ": tensor '" + name + "' has dtype " +
                                     std::string(c10::toString(t.scalar_type())) + ", which safetensors cannot hold");
    }
    items.push_back({&name, &t, info, static_cast<uint64_t>(t.numel()) * info->size});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.info->rank != b.info->rank ? a.info->rank > b.info->rank : *a.name < *b.name;
  });

  // Header keys in data order with __metadata__ first, as Hugging Face writes them.
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Item& it : items) {
    h[*it.name] = {{"dtype", it.info->name}, {"shape", it.tensor->sizes().vec()},
                   {"data_offsets", {offset, offset + it.nbytes}}};
    offset += it.nbytes;
  }
  std::string header;
  try {
    header = h.dump();
  } catch (const nlohmann::json::exception& e) {  // names or metadata that are not valid UTF-8
    return Status::InvalidArgument(path + ": header cannot be encoded: " + e.what());
  }
  // Pad so the data section starts 8-byte aligned: View() then hands out aligned tensors.
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t header_len = header.size();

  return WriteAtomically(path, [&](int fd, const std::string& tmp) -> Status {
    EFT_RETURN_IF_ERROR(WriteAll(fd, &header_len, 8, tmp));
    EFT_RETURN_IF_ERROR(WriteAll(fd, header.data(), header.size(), tmp));
    at::NoGradGuard no_grad;
    for (const Item& it : items) {
      if (it.nbytes == 0) continue;
      // One tensor at a time, so a model on an accelerator never needs a second full copy in RAM.
      at::Tensor c = it.tensor->to(at::kCPU).contiguous();
      EFT_RETURN_IF_ERROR(WriteAll(fd, c.data_ptr(), it.nbytes, tmp));
    }
    return Status::Ok();
  });
}

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

Status WriteSafetensorsDir(const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("creating " + dir + ": " + ec.message());

  // Greedy in the caller's order (layers stay together); an oversized tensor gets a shard of its own.
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  std::set<std::string> names;
  uint64_t shard_bytes = 0;
  uint64_t total_bytes = 0;
  for (const auto& [name, t] : tensors) {
    if (!names.insert(name).second) return Status::InvalidArgument(dir + ": tensor '" + name + "' given twice");
    const uint64_t n = t.defined() ? static_cast<uint64_t>(t.numel()) * t.element_size() : 0;
    if (!shards.back().empty() && shard_bytes + n > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace_back(name, t);
    shard_bytes += n;
    total_bytes += n;
  }
  // transformers refuses a checkpoint whose metadata lacks "format".
  std::map<std::string, std::string> meta = metadata;
  meta.emplace("format", "pt");

  const fs::path root(dir);
  std::set<std::string> written;
  if (shards.size() == 1) {
    EFT_RETURN_IF_ERROR(WriteSafetensors((root / kSingleName).string(), shards[0], meta));
    written.insert(kSingleName);
    // A leftover index would win over the new file in our reader.
    EFT_RETURN_IF_ERROR(RemoveIfExists((root / kIndexName).string()));
  } else {
    json weight_map = json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      char file[64];
      std::snprintf(file, sizeof(file), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      EFT_RETURN_IF_ERROR(WriteSafetensors((root / file).string(), shards[i], meta));
      written.insert(file);
      for (const auto& [name, t] : shards[i]) weight_map[name] = file;
    }
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    EFT_RETURN_IF_ERROR(WriteAtomically((root / kIndexName).string(), [&](int fd, const std::string& tmp) {
      return WriteAll(fd, text.data(), text.size(), tmp);
    }));
    // transformers looks for model.safetensors before the index: a leftover one would shadow the shards.
    EFT_RETURN_IF_ERROR(RemoveIfExists((root / kSingleName).string()));
  }
  // Shards of an earlier, differently-split write are dead weight (and confusing); Hugging Face's
  // save_pretrained removes them too.
  for (const auto& ent : fs::directory_iterator(root, ec)) {
    const std::string n = ent.path().filename().string();
    if (n.rfind("model-", 0) == 0 && n.find("-of-") != std::string::npos && n.size() > 12 &&
        n.compare(n.size() - 12, 12, ".safetensors") == 0 && !written.count(n)) {
      EFT_RETURN_IF_ERROR(RemoveIfExists(ent.path().string()));
    }
  }
  return SyncDir(dir);
}

}  // namespace eft::trainer
