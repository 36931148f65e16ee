// TokenDataset: tokenized training examples in memory, from the pre-tokenized JSONL format
// ({"input_ids": [...], "labels": [...]} per line; labels optional, default = input_ids, -100 = not
// trained; labels are NOT shifted: label[t] is the token at t, as Hugging Face writes them).
// Blank lines are skipped and keys other than input_ids and labels (an "id", a "source") are ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

  int64_t size() const { return static_cast<int64_t>(examples_.size()); }
  const Example& operator[](int64_t i) const { return examples_[static_cast<size_t>(i)]; }
  const DatasetStats& stats() const { return stats_; }

 private:
  std::vector<Example> examples_;
  DatasetStats stats_;
};

}  // namespace eft::trainer
