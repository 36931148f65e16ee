// TableRows: the rows of a Parquet file or an Arrow IPC file/stream (what datasets.save_to_disk
// writes), one at a time, as JSON objects keyed by column name, so every data.format reads a column
// as it reads a JSONL key (sft_format.h): strings, numbers, booleans and nulls as themselves, lists as
// arrays, structs as objects in their field order (a null field stays a null key, as datasets gives
// it), maps with string keys as objects, dictionary-encoded values decoded; any other type (binary,
// timestamps, decimals) as Arrow's text of the value.
//
// Memory stays bounded whatever the file's size: one record batch of at most kBatchRows rows (of
// one Parquet row group) is decoded at a time. Where() names the position for errors: "row group
// 2, row 1534" (Parquet) or "record batch 3, row 1534" (Arrow), rows counted from 0 over the whole
// file, as datasets indexes them. Built without Arrow (cmake/EftArrow.cmake), Open says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/data/data_files.h"

namespace eft::trainer {

class TableRows {
 public:
  static constexpr int64_t kBatchRows = 1024;

  // `kind`: kParquet, kArrowFile or kArrowStream. DataLoss naming the file when it is not readable as
  // one (a truncated shard, a damaged footer).
  static Result<std::unique_ptr<TableRows>> Open(const std::string& path, DataFileKind kind);
  virtual ~TableRows() = default;

  // The next row into *row: true, or false at the end. A part that cannot be decoded is DataLoss
  // "row group 2: <why>"; SkipPart() then goes on after it.
  Result<bool> Next(nlohmann::ordered_json* row);
  // After Next failed: gives up the rest of the part it failed in (a row group; for an Arrow stream
  // the rest of the file) and returns how many rows that leaves out, as far as the file tells (-1:
  // unknown).
  virtual int64_t SkipPart() = 0;
  virtual std::string Where() const = 0;
  // The part being read: "row group 2" or "record batch 3".
  virtual std::string Part() const = 0;
  // The rows the file says it holds (-1 for a stream, which does not say).
  virtual int64_t total_rows() const = 0;
  virtual int64_t rows_read() const = 0;

 protected:
  virtual Result<bool> NextRow(nlohmann::ordered_json* row) = 0;
};

// Whether this eft-train was built with Arrow and Parquet.
bool HaveArrow();

}  // namespace eft::trainer
