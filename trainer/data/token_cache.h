// A tokenized dataset cached on disk, so a restart (or every other rank) does not tokenize again.
//
// The file <dir>/<key>.tokens holds the documents as flat int32 arrays (ids, labels, offsets)
// behind a JSON header (the key, the build statistics), checked by a CRC-32C trailer; it is read
// with mmap. The key is a hash of everything the tokens depend on (data bytes, tokenizer files,
// chat template, options), so a change to any of them builds a new file.
//
// One builder per filesystem: the first process to create <key>.lock (O_EXCL) builds while the
// others wait for the file to appear, on a shared filesystem as on a node-local one. The builder
// refreshes the lock's mtime every few seconds; a lock untouched for `stale_after` (its builder
// died) is taken over. A damaged or truncated cache file is rebuilt.
#pragma once

#include <chrono>
#include <cstdio>
#include <vector>
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/data/token_dataset.h"

namespace eft::trainer {

// Hex digest of `parts` (each a file path read whole, or literal text): two independent CRC-32C
// streams over lengths and contents, 16 hex digits.
class CacheKey {
 public:
  Status AddFile(const std::string& path);  // NotFound if unreadable
  void AddText(const std::string& text);
  std::string Hex() const;

 private:
  void Add(const void* data, size_t n);
  uint32_t a_ = 0, b_ = 0x9E3779B9u;
};

struct TokenCacheOptions {
  std::chrono::seconds stale_after{60};
  std::chrono::milliseconds poll{200};
};

// Where a build puts its documents, one at a time (ids and labels of equal length).
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual void Add(TokenSpan<int32_t> ids, TokenSpan<int32_t> labels) = 0;
};

// A sink into memory (tests, and the fallback when the cache cannot be written).
class MemoryTokenSink final : public TokenSink {
 public:
  void Add(TokenSpan<int32_t> ids, TokenSpan<int32_t> labels) override;
  TokenDataset Finish() { return builder_.Finish(); }

 private:
  TokenDataset::Builder builder_;
};

// Streams documents into the cache file `path` without holding them: ids and labels go to two
// spill files beside it (<path>.ids.<pid>, <path>.labels.<pid>), only the offsets (8 bytes a
// document) stay in memory; Finish writes the cache file from them atomically (the spill files
// double the disk used meanwhile) and removes them, as does the destructor of an unfinished writer.
// A write error (a full disk) is kept in status() and later documents are dropped, so a caller
// can fall back to memory.
class TokenCacheWriter final : public TokenSink {
 public:
  TokenCacheWriter(std::string path, std::string key);
  ~TokenCacheWriter() override;
  TokenCacheWriter(const TokenCacheWriter&) = delete;
  TokenCacheWriter& operator=(const TokenCacheWriter&) = delete;

  void Add(TokenSpan<int32_t> ids, TokenSpan<int32_t> labels) override;
  const Status& status() const { return status_; }
  Status Finish(const nlohmann::json& info);

 private:
  void Fail(const std::string& what);
  void RemoveSpills();

  const std::string path_, key_, ids_path_, labels_path_;
  std::FILE* ids_ = nullptr;
  std::FILE* labels_ = nullptr;
  std::vector<int64_t> offsets_{0};
  Status status_;
};

// Writes `dataset` and `info` (any JSON, e.g. build stats) to `path` atomically.
Status WriteTokenCache(const std::string& path, const std::string& key, const TokenDataset& dataset,
                       const nlohmann::json& info);
// Reads a cache file; DataLoss when damaged or built for another key.
Result<TokenDataset> ReadTokenCache(const std::string& path, const std::string& key, nlohmann::json* info);

// The cached dataset for `key` under `dir`, building it with `build` (which also returns the info
// to store) when no valid file exists. `built_here` tells whether this process built it.
using BuildTokens = std::function<Result<TokenDataset>(nlohmann::json* info)>;
Result<TokenDataset> LoadOrBuildTokenCache(const std::string& dir, const std::string& key, const BuildTokens& build,
                                           nlohmann::json* info, bool* built_here = nullptr,
                                           const TokenCacheOptions& options = {});

// The same, with a build that streams its documents into `sink` (a TokenCacheWriter), so a dataset
// larger than memory tokenizes in bounded memory; the result is read back from the file (mmap).
// When the file cannot be written (a full disk), the build runs again into memory, with a warning:
// training goes on without a cache.
using StreamTokens = std::function<Status(TokenSink* sink, nlohmann::json* info)>;
Result<TokenDataset> LoadOrStreamTokenCache(const std::string& dir, const std::string& key, const StreamTokens& build,
                                            nlohmann::json* info, bool* built_here = nullptr,
                                            const TokenCacheOptions& options = {});

}  // namespace eft::trainer
