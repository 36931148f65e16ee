// Builds the training set from data files: JSONL lines, or the rows of Parquet and Arrow files
// (table_rows.h; the kind told by each file's first bytes, data_files.h), each record read in its
// file's format (sft_format.h: a column is read as a JSON key is), rendered and tokenized with labels
// (sft_labels.h), then cut or dropped at max_seq_len.
//
// A bad record (not JSON, wrong fields, a template that raises on it) fails the build with where
// it is and what is wrong ("file:line: ...", "file: row group 2, row 1534: messages[2].role: ..."),
// or with skip_bad_lines is counted and skipped (the first one is kept for the summary); so is a
// part of a table file that cannot be decoded (each of its rows counted) or a file that cannot be
// opened as one. Examples left with no trained token are skipped and counted: they would only
// cost compute.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/data/sft_format.h"
#include "trainer/data/sft_labels.h"
#include "trainer/data/token_cache.h"
#include "trainer/data/token_dataset.h"

namespace eft::trainer {

struct SftDataOptions {
  DataFormat format = DataFormat::kAuto;
  LabelOptions labels;
  int64_t max_seq_len = 4096;
  bool truncate = true;         // longer examples: cut (true) or dropped (false)
  bool skip_bad_lines = false;  // bad lines: skipped and counted (true) or an error (false)
  int64_t vocab_size = 0;       // > 0: ids are checked against it
  nlohmann::json ToJson() const;  // every option, for cache keys and logs
};

struct SftBuildStats {
  int64_t lines = 0;          // records read: non-blank lines, table rows
  int64_t examples = 0;       // kept
  int64_t skipped_bad = 0;    // bad lines skipped
  std::string first_bad;      // "file:line: why" of the first one
  int64_t no_trained = 0;     // examples with nothing to train, skipped
  int64_t truncated = 0;
  int64_t dropped_long = 0;
  int64_t tokens = 0;
  int64_t trained_tokens = 0;
  std::map<std::string, std::string> formats;  // file -> format used
  std::map<std::string, std::string> kinds;    // file -> DataFileKindName (jsonl, parquet, ...)
  nlohmann::json ToJson() const;
};

// Called now and then with bytes read so far and the total, for progress output.
using BuildProgress = std::function<void(int64_t done, int64_t total)>;

Result<TokenDataset> BuildSftDataset(const std::vector<std::string>& files, const TextEncoder& encoder,
                                     const RenderChat& render, const SftDataOptions& options, SftBuildStats* stats,
                                     const BuildProgress& progress = {});

// The same, each kept example handed to `sink` as it is made (a TokenCacheWriter: the build then
// holds one record batch of input and no tokens).
Status StreamSftDataset(const std::vector<std::string>& files, const TextEncoder& encoder, const RenderChat& render,
                        const SftDataOptions& options, SftBuildStats* stats, TokenSink* sink,
                        const BuildProgress& progress = {});

}  // namespace eft::trainer
