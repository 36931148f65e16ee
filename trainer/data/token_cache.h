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

}  // namespace eft::trainer
