#include "trainer/data/token_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include "common/crc32c.h"
#include "common/json_int.h"
#include "common/logging.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;
constexpr char kMagic[8] = {'E', 'F', 'T', 'T', 'O', 'K', '0', '1'};

Status Errno(const std::string& what, const std::string& path) {
  return Status::IoError(what + " " + path + ": " + std::strerror(errno));
}

// Appends `n` bytes to `out` and to the running checksum.
struct Writer {
  std::ofstream& out;
  uint32_t crc = 0;
  void Put(const void* p, size_t n) {
    out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    crc = Crc32c(p, n, crc);
  }
};

// Writes the cache file `path` atomically: the magic, the header, the offsets, what `arrays` puts
// (every document's ids, then every document's labels), the CRC; fsynced, then renamed into place.
Status WriteCacheFile(const std::string& path, const std::string& key, const std::vector<int64_t>& offsets,
                      const nlohmann::json& info, const std::function<Status(Writer&)>& arrays) {
  const int64_t docs = static_cast<int64_t>(offsets.size()) - 1;
  const std::string header = nlohmann::json{{"format", 1}, {"key", key}, {"documents", docs},
                                            {"tokens", offsets.back()}, {"info", info}}.dump();
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Errno("creating", tmp);
    Writer w{out};
    w.Put(kMagic, sizeof(kMagic));
    const uint64_t header_size = header.size();
    w.Put(&header_size, sizeof(header_size));
    w.Put(header.data(), header.size());
    const char zeros[8] = {};
    w.Put(zeros, (8 - header.size() % 8) % 8);  // the arrays start 8-byte aligned
    w.Put(offsets.data(), offsets.size() * sizeof(int64_t));
    Status written = arrays(w);
    const uint32_t crc = w.crc;
    out.write(reinterpret_cast<const char*>(&crc), sizeof(crc));
    out.flush();
    if (written.ok() && !out) written = Status::IoError("writing " + tmp + " (disk full?)");
    if (!written.ok()) {
      out.close();
      std::error_code ec;
      fs::remove(tmp, ec);
      return written;
    }
  }
  int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("renaming", tmp);
  return Status::Ok();
}

}  // namespace

void CacheKey::Add(const void* data, size_t n) {
  a_ = Crc32c(data, n, a_);
  b_ = Crc32c(data, n, b_ ^ 0x5bd1e995u);
}

Status CacheKey::AddFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  AddText("file:" + fs::path(path).filename().string());
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) Add(buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return Status::IoError(path + ": read error");
  return Status::Ok();
}

void CacheKey::AddText(const std::string& text) {
  const uint64_t n = text.size();
  Add(&n, sizeof(n));  // lengths first, so ("ab","c") and ("a","bc") differ
  Add(text.data(), text.size());
}

std::string CacheKey::Hex() const {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", a_, b_);
  return buf;
}

Status WriteTokenCache(const std::string& path, const std::string& key, const TokenDataset& dataset,
                       const nlohmann::json& info) {
  const int64_t docs = dataset.size();
  std::vector<int64_t> offsets{0};
  for (int64_t i = 0; i < docs; ++i) offsets.push_back(offsets.back() + static_cast<int64_t>(dataset[i].input_ids.size()));
  return WriteCacheFile(path, key, offsets, info, [&](Writer& w) {
    for (const bool labels : {false, true}) {
      for (int64_t i = 0; i < docs; ++i) {
        const ExampleView ex = dataset[i];
        const TokenSpan<int32_t>& v = labels ? ex.labels : ex.input_ids;
        w.Put(v.data(), v.size() * sizeof(int32_t));
      }
    }
    return Status::Ok();
  });
}

Result<TokenDataset> ReadTokenCache(const std::string& path, const std::string& key, nlohmann::json* info) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? Status::NotFound(path + ": no such cache") : Errno("opening", path);
  struct stat st {};
  ::fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < sizeof(kMagic) + 8 + 4) {
    ::close(fd);
    return Status::DataLoss(path + ": truncated");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return Errno("mapping", path);
  // The dataset reads its tokens straight from the mapping, which lives as long as it does.
  std::shared_ptr<const void> mapping(map, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  const auto* bytes = static_cast<const uint8_t*>(map);
  auto fail = [&](const std::string& why) { return Status::DataLoss(path + ": " + why); };
  if (std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) return fail("not an eft token cache");
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes + size - 4, 4);
  if (Crc32c(bytes, size - 4) != stored_crc) return fail("checksum mismatch (damaged or truncated)");
  uint64_t header_size;
  std::memcpy(&header_size, bytes + 8, 8);
  if (header_size > size - 16 - 4) return fail("bad header size");  // the header lies between the prefix and the CRC
  nlohmann::json header = nlohmann::json::parse(bytes + 16, bytes + 16 + header_size, nullptr, false);
  if (header.is_discarded() || !header.is_object()) return fail("bad header");
  const auto format = TryJsonIntOr<int64_t>(header, "format", 0);
  const auto read_docs = TryJsonIntOr<int64_t>(header, "documents", -1);
  const auto read_tokens = TryJsonIntOr<int64_t>(header, "tokens", -1);
  if (format != 1 || !read_docs || !read_tokens) return fail("bad header");
  const int64_t docs = *read_docs, tokens = *read_tokens;
  if (header.value("key", "") != key) return fail("built for another key");
  size_t at = 16 + header_size;
  at += (8 - header_size % 8) % 8;
  const size_t need = at + static_cast<size_t>(docs + 1) * 8 + static_cast<size_t>(tokens) * 8 + 4;
  if (docs < 0 || tokens < 0 || need != size) return fail("sizes do not match the header");
  const auto* offsets = reinterpret_cast<const int64_t*>(bytes + at);
  const auto* ids = reinterpret_cast<const int32_t*>(bytes + at + static_cast<size_t>(docs + 1) * 8);
  const int32_t* labels = ids + tokens;
  std::vector<int64_t> offset_list(offsets, offsets + docs + 1);
  for (int64_t i = 0; i < docs; ++i) {
    if (offset_list[static_cast<size_t>(i)] < 0 || offset_list[static_cast<size_t>(i) + 1] < offset_list[static_cast<size_t>(i)] ||
        offset_list[static_cast<size_t>(i) + 1] > tokens)
      return fail("bad offsets");
  }
  if (offset_list.front() != 0 || offset_list.back() != tokens) return fail("bad offsets");
  if (info) *info = header.value("info", nlohmann::json());
  return TokenDataset::FromFlat(std::move(mapping), ids, labels, std::move(offset_list));
}

namespace {

// Makes the cache file at `path` (or, failing that, the dataset in memory) and returns the dataset.
using MakeTokens = std::function<Result<TokenDataset>(const std::string& path, nlohmann::json* info)>;

// The lock protocol of the header: one builder per filesystem, the others wait for its file.
Result<TokenDataset> LoadOrMake(const std::string& dir, const std::string& key, const MakeTokens& make,
                                nlohmann::json* info, bool* built_here, const TokenCacheOptions& options) {
  if (built_here) *built_here = false;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("creating " + dir + ": " + ec.message());
  const std::string path = dir + "/" + key + ".tokens", lock = dir + "/" + key + ".lock";
  bool announced = false;
  while (true) {
    auto cached = ReadTokenCache(path, key, info);
    if (cached.ok()) return cached;
    if (cached.status().code() != StatusCode::kNotFound) {
      EFT_LOG(WARNING) << "rebuilding the token cache: " << cached.status().message();
      fs::remove(path, ec);
    }
    int fd = ::open(lock.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      const std::string owner = std::to_string(::getpid()) + "\n";
      (void)!::write(fd, owner.data(), owner.size());
      ::close(fd);
      // Keep the lock fresh while building, so waiters can tell a slow build from a dead builder.
      std::atomic<bool> done{false};
      std::thread heartbeat([&] {
        while (!done) {
          for (int i = 0; i < 20 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(250));
          std::error_code e;
          fs::last_write_time(lock, fs::file_time_type::clock::now(), e);
        }
      });
      nlohmann::json built_info;
      Result<TokenDataset> built = make(path, &built_info);
      done = true;
      heartbeat.join();
      fs::remove(lock, ec);
      if (!built.ok()) return built.status();
      if (info) *info = built_info;
      if (built_here) *built_here = true;
      return built;
    }
    if (errno != EEXIST) return Errno("creating", lock);
    auto mtime = fs::last_write_time(lock, ec);
    if (!ec && fs::file_time_type::clock::now() - mtime > options.stale_after) {
      EFT_LOG(WARNING) << "taking over " << lock << ": its builder stopped refreshing it";
      fs::remove(lock, ec);
      continue;
    }
    if (!announced) {
      EFT_LOG(INFO) << "waiting for another process to build the token cache " << path;
      announced = true;
    }
    std::this_thread::sleep_for(options.poll);
  }
}

}  // namespace

Result<TokenDataset> LoadOrBuildTokenCache(const std::string& dir, const std::string& key, const BuildTokens& build,
                                           nlohmann::json* info, bool* built_here, const TokenCacheOptions& options) {
  return LoadOrMake(
      dir, key,
      [&](const std::string& path, nlohmann::json* built_info) -> Result<TokenDataset> {
        Result<TokenDataset> built = build(built_info);
        if (!built.ok()) return built;
        Status written = WriteTokenCache(path, key, *built, *built_info);
        if (!written.ok()) EFT_LOG(WARNING) << "token cache not written (training goes on): " << written;
        return built;
      },
      info, built_here, options);
}

Result<TokenDataset> LoadOrStreamTokenCache(const std::string& dir, const std::string& key, const StreamTokens& build,
                                            nlohmann::json* info, bool* built_here, const TokenCacheOptions& options) {
  return LoadOrMake(
      dir, key,
      [&](const std::string& path, nlohmann::json* built_info) -> Result<TokenDataset> {
        Status failed;
        {
          TokenCacheWriter writer(path, key);
          EFT_RETURN_IF_ERROR(build(&writer, built_info));
          failed = writer.status().ok() ? writer.Finish(*built_info) : writer.status();
        }
        if (failed.ok()) {
          auto written = ReadTokenCache(path, key, nullptr);
          if (written.ok()) return written;
          failed = written.status();
        }
        EFT_LOG(WARNING) << "token cache not written (" << failed.message()
                         << "): tokenizing again into memory; training goes on";
        MemoryTokenSink memory;
        EFT_RETURN_IF_ERROR(build(&memory, built_info));
        return memory.Finish();
      },
      info, built_here, options);
}

void MemoryTokenSink::Add(TokenSpan<int32_t> ids, TokenSpan<int32_t> labels) {
  builder_.Append(ids, labels);
  builder_.EndRow();
}

TokenCacheWriter::TokenCacheWriter(std::string path, std::string key)
    : path_(std::move(path)),
      key_(std::move(key)),
      ids_path_(path_ + ".ids." + std::to_string(::getpid())),
      labels_path_(path_ + ".labels." + std::to_string(::getpid())) {
  ids_ = std::fopen(ids_path_.c_str(), "w+be");
  labels_ = std::fopen(labels_path_.c_str(), "w+be");
  if (!ids_ || !labels_) Fail("creating " + (ids_ ? labels_path_ : ids_path_) + ": " + std::strerror(errno));
}

TokenCacheWriter::~TokenCacheWriter() { RemoveSpills(); }

void TokenCacheWriter::RemoveSpills() {
  if (ids_) std::fclose(ids_);
  if (labels_) std::fclose(labels_);
  ids_ = labels_ = nullptr;
  std::error_code ec;
  fs::remove(ids_path_, ec);
  fs::remove(labels_path_, ec);
}

void TokenCacheWriter::Fail(const std::string& what) {
  if (status_.ok()) status_ = Status::IoError(what);
}

void TokenCacheWriter::Add(TokenSpan<int32_t> ids, TokenSpan<int32_t> labels) {
  if (!status_.ok()) return;
  if (std::fwrite(ids.data(), sizeof(int32_t), ids.size(), ids_) != ids.size() ||
      std::fwrite(labels.data(), sizeof(int32_t), labels.size(), labels_) != labels.size()) {
    Fail("writing " + ids_path_ + ": " + std::strerror(errno));
    return;
  }
  offsets_.push_back(offsets_.back() + static_cast<int64_t>(ids.size()));
}

Status TokenCacheWriter::Finish(const nlohmann::json& info) {
  if (!status_.ok()) return status_;
  if (std::fflush(ids_) != 0 || std::fflush(labels_) != 0) {
    Fail("writing " + ids_path_ + " (disk full?): " + std::strerror(errno));
    return status_;
  }
  Status written = WriteCacheFile(path_, key_, offsets_, info, [&](Writer& w) -> Status {
    std::vector<char> buf(1 << 20);
    for (std::FILE* spill : {ids_, labels_}) {
      std::rewind(spill);
      size_t n;
      while ((n = std::fread(buf.data(), 1, buf.size(), spill)) > 0) w.Put(buf.data(), n);
      if (std::ferror(spill)) return Status::IoError("reading back " + (spill == ids_ ? ids_path_ : labels_path_));
    }
    return Status::Ok();
  });
  RemoveSpills();
  return written;
}

}  // namespace eft::trainer
