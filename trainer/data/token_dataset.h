// TokenDataset: tokenized training examples, from the pre-tokenized JSONL format
// ({"input_ids": [...], "labels": [...]} per line; labels optional, default = input_ids, -100 = not
// trained; labels are NOT shifted: label[t] is the token at t, as Hugging Face writes them).
// Blank lines are skipped and keys other than input_ids and labels (an "id", a "source") are ignored.
//
// Storage is flat int32 (ids, labels) with offsets: 8 bytes per token, owned or over a token cache
// file's memory mapping (FromFlat), so multi-GB datasets are neither parsed nor copied on load.
// Examples are read through views (ExampleView).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>
#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace eft::trainer {

struct Example {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;  // same length; -100 = not trained
  // A packed row (see packing.h): the lengths of its documents, in order, summing to the size.
  // Empty: the example is one document.
  std::vector<int64_t> document_lengths;
};

// A read-only run of tokens (ids, labels or document lengths) inside a TokenDataset.
template <typename T>
class TokenSpan {
 public:
  TokenSpan() = default;
  TokenSpan(const T* data, size_t size) : data_(data), size_(size) {}
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  const T* data() const { return data_; }
  std::vector<int64_t> ToVector() const { return std::vector<int64_t>(begin(), end()); }

  template <typename U>
  friend bool operator==(const TokenSpan& a, const std::vector<U>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](T x, U y) { return x == y; });
  }
  template <typename U>
  friend bool operator==(const TokenSpan& a, const TokenSpan<U>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](T x, U y) { return x == y; });
  }
  friend std::ostream& operator<<(std::ostream& os, const TokenSpan& s) {
    os << "{";
    for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
    return os << "}";
  }

 private:
  const T* data_ = nullptr;
  size_t size_ = 0;
};

// One example as stored: ids and labels (same length) and, for a packed row, its documents' lengths.
struct ExampleView {
  TokenSpan<int32_t> input_ids;
  TokenSpan<int32_t> labels;
  TokenSpan<int64_t> document_lengths;  // empty: one document
};

struct DatasetOptions {
  int64_t max_seq_len = 4096;  // >= 1
  bool truncate = true;  // longer examples: cut to max_seq_len (true) or dropped (false)
  int64_t vocab_size = 0;  // > 0: token ids must be < vocab_size
};

struct DatasetStats {
  int64_t examples = 0;   // kept (including truncated ones)
  int64_t truncated = 0;  // longer than max_seq_len and cut
  int64_t dropped = 0;    // longer than max_seq_len and left out (truncate = false)
  int64_t tokens = 0;     // input tokens kept
  // Targets the loss will see: labels[1..] != -100 (label[0] has no preceding token to predict it).
  int64_t trained_tokens = 0;
};

// One pre-tokenized object ({"input_ids": [...], "labels": [...]?}) as an Example; errors start
// with `where` and name the field ("input_ids[3] = -5: token ids must be >= 0").
Status ParsePretokenizedObject(const nlohmann::json& j, const std::string& where, int64_t vocab_size, Example* ex);

class TokenDataset {
 public:
  // Streams the file line by line. The first bad line fails the load; errors name file:line and
  // what is wrong ("data.jsonl:17: input_ids[3] = -5: token ids must be >= 0").
  static Result<TokenDataset> LoadPretokenized(const std::string& path, const DatasetOptions& options);
  // Takes examples as they are (no checks, no truncation); stats are computed from them.
  static TokenDataset FromExamples(std::vector<Example> examples);
  // Examples over memory `owner` keeps alive (a token cache mapping): every example's ids back to
  // back, likewise labels; example i is [offsets[i], offsets[i + 1]).
  static TokenDataset FromFlat(std::shared_ptr<const void> owner, const int32_t* ids, const int32_t* labels,
                               std::vector<int64_t> offsets);

  // Builds a dataset row by row into flat storage (packing appends documents to a row, then ends it).
  class Builder {
   public:
    void Append(TokenSpan<int32_t> ids, TokenSpan<int32_t> labels);
    // Ends the current row; `document_lengths` empty for a one-document row.
    void EndRow(const std::vector<int64_t>& document_lengths = {});
    TokenDataset Finish();

   private:
    std::vector<int32_t> ids_, labels_;
    std::vector<int64_t> offsets_{0}, doc_lengths_, doc_offsets_{0};
  };

  int64_t size() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  ExampleView operator[](int64_t i) const;
  const DatasetStats& stats() const { return stats_; }
  // Tokens in all examples.
  int64_t tokens() const { return offsets_.back(); }

 private:
  const int32_t* ids() const { return owner_ ? ext_ids_ : ids_.data(); }
  const int32_t* labels() const { return owner_ ? ext_labels_ : labels_.data(); }
  void CountTokens();  // stats_.tokens, trained_tokens and examples from the data

  std::shared_ptr<const void> owner_;  // set: ids and labels live in someone else's memory
  const int32_t* ext_ids_ = nullptr;
  const int32_t* ext_labels_ = nullptr;
  std::vector<int32_t> ids_, labels_;
  std::vector<int64_t> offsets_{0};
  std::vector<int64_t> doc_lengths_, doc_offsets_;  // doc_offsets_ empty: no packed rows
  DatasetStats stats_;
};

}  // namespace eft::trainer
