// What a data path (data.train, an eval set's path) names, as the files to read in order, and how
// each file is read (docs/data.md, "Files and formats"):
//
//   a file                         itself
//   a glob (*, ?, [...])           the matching files, in name order
//   a datasets.save_to_disk dir    its state.json's _data_files, in that order (Arrow streams)
//   any other directory            its *.parquet files, in name order (a hub dataset's data/ folder)
//
// A file's kind is told by its first bytes, not its name: Parquet ("PAR1"), an Arrow IPC file
// ("ARROW1"), an Arrow IPC stream (a 0xFFFFFFFF continuation marker: what save_to_disk writes), or
// else JSONL.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace eft::trainer {

enum class DataFileKind { kJsonl, kParquet, kArrowFile, kArrowStream };

const char* DataFileKindName(DataFileKind kind);  // "jsonl", "parquet", "arrow", "arrow-stream"

// NotFound naming `path` when nothing matches; InvalidArgument for a directory with nothing eft
// reads (listing what it holds) or a DatasetDict's top directory (naming its splits).
Result<std::vector<std::string>> ResolveDataFiles(const std::string& path);

// From the first bytes; NotFound/IoError when unreadable. An empty file is JSONL (no examples).
Result<DataFileKind> DetectDataFileKind(const std::string& path);

}  // namespace eft::trainer
