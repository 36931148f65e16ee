// tokenizer.json's "model" of type BPE: a vocabulary, merges by rank, and the options models
// ship (ignore_merges, byte_fallback, unk_token, fuse_unk). A word becomes tokens by repeatedly
// merging its adjacent pair of lowest rank, leftmost first, exactly as Hugging Face does.
//
// Byte-level vocabularies (GPT-2 alphabet) are converted to raw bytes at load, so words are the
// input's own bytes. Words up to 64 bytes are cached; the cache is safe for concurrent use.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace eft::trainer::tok {

class BpeModel {
 public:
  // `byte_level`: the pre-tokenizer maps bytes to the GPT-2 alphabet (vocabulary spelled in it).
  static Result<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model, bool byte_level);

  // Appends the tokens of `word`, each with the length in bytes of `word` it covers (a
  // byte-fallback or unknown token may cover zero bytes after the first of its character).
  void Tokenize(std::string_view word, std::vector<int32_t>* ids, std::vector<uint32_t>* lengths) const
      EXCLUDES(cache_mu_);

  // The id of a token in tokenizer.json's spelling.
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token in tokenizer.json's spelling; empty for an id not in the vocabulary.
  const std::string& IdToToken(int32_t id) const;
  int32_t vocab_size() const { return static_cast<int32_t>(spelled_.size()); }
  // Entries in the vocabulary (ids may have gaps).
  int32_t entry_count() const { return static_cast<int32_t>(spelled_lookup_.size()); }
  bool byte_level() const { return byte_level_; }

 private:
  struct Merge {
    int32_t rank = -1;
    int32_t id = -1;
  };
  // Open addressing over (left id, right id): millions of lookups per second of tokenizing.
  class MergeTable {
   public:
    void Reserve(size_t n);
    void Insert(int32_t left, int32_t right, Merge merge);
    Merge Find(int32_t left, int32_t right) const;

   private:
    static uint64_t Key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }
    std::vector<uint64_t> keys_;
    std::vector<Merge> values_;
    uint64_t mask_ = 0;
  };
  struct CachedWord {
    std::vector<int32_t> ids;
    std::vector<uint32_t> lengths;
  };

  BpeModel() = default;
  void ApplyMerges(std::vector<int32_t>* ids, std::vector<uint32_t>* lengths) const;
  void InitialSymbols(std::string_view word, std::vector<int32_t>* ids, std::vector<uint32_t>* lengths) const;

  // Set by FromJson before the model is shared, read-only after: no lock.
  bool byte_level_ = false;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  std::optional<int32_t> unk_id_;
  std::vector<std::string> spelled_;                  // id -> tokenizer.json spelling
  std::unordered_map<std::string, int32_t> lookup_;   // raw bytes (byte-level) or spelling -> id
  std::unordered_map<std::string, int32_t> spelled_lookup_;
  int32_t byte_ids_[256];                             // byte-level: the id of each single byte
  int32_t fallback_ids_[256];                         // byte_fallback: the id of <0xXX>
  MergeTable merges_;

  mutable Mutex cache_mu_;
  mutable std::unordered_map<std::string, CachedWord> cache_ GUARDED_BY(cache_mu_);
};

}  // namespace eft::trainer::tok
