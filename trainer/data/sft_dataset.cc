#include "trainer/data/sft_dataset.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "trainer/data/data_files.h"
#include "trainer/data/jsonl_line.h"
#include "trainer/data/table_rows.h"

namespace eft::trainer {
namespace {

using ojson = nlohmann::ordered_json;
constexpr int64_t kIgnore = -100;

const char* LossOnName(LossOn l) {
  switch (l) {
    case LossOn::kAssistant: return "assistant";
    case LossOn::kCompletion: return "completion";
    case LossOn::kAll: return "all";
  }
  return "?";
}

bool IsBlank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

int64_t Trained(const Example& ex) {
  int64_t n = 0;
  for (size_t t = 1; t < ex.labels.size(); ++t) n += ex.labels[t] != kIgnore;
  return n;
}

// One record (a JSONL line's object or a table's row) to an example; errors without the position.
Result<Example> RecordToExample(const ojson& j, DataFormat* format, const TextEncoder& encoder,
                                const RenderChat& render, const SftDataOptions& options) {
  if (*format == DataFormat::kAuto) {
    EFT_ASSIGN_OR_RETURN(*format, DetectFormat(j));
  }
  EFT_ASSIGN_OR_RETURN(SftRecord record, ToSftRecord(j, *format, options.vocab_size));
  EFT_ASSIGN_OR_RETURN(Example ex, TokenizeSftRecord(record, encoder, render, options.labels));
  if (options.vocab_size > 0) {
    for (int64_t id : ex.input_ids) {
      if (id < 0 || id >= options.vocab_size) {
        return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the model's vocabulary (" +
                                       std::to_string(options.vocab_size) + ")");
      }
    }
  }
  return ex;
}

Result<Example> LineToExample(const std::string& line, DataFormat* format, const TextEncoder& encoder,
                              const RenderChat& render, const SftDataOptions& options) {
  EFT_RETURN_IF_ERROR(CheckJsonlLine(line));
  ojson j;
  try {
    j = ojson::parse(line);
  } catch (const ojson::exception&) {  // parse_error, or out_of_range for a number like 1e999
    return Status::InvalidArgument("not valid JSON");
  }
  return RecordToExample(j, format, encoder, render, options);
}

// The examples of every file, and their statistics.
class Collector {
 public:
  Collector(const SftDataOptions& options, SftBuildStats* stats, TokenSink* sink)
      : options_(options), st_(*stats), sink_(sink) {}

  // A bad record: an error, or with skip_bad_lines counted (`records` of them) and left out.
  Status Bad(const Status& why, const std::string& where, int64_t records = 1) {
    const std::string message = where.empty() ? why.message() : where + ": " + why.message();
    if (!options_.skip_bad_lines) return Status(why.code(), message);
    if (st_.skipped_bad == 0) st_.first_bad = message;
    st_.skipped_bad += records;
    return Status::Ok();
  }

  Status Take(Result<Example> ex, const std::string& where) {
    ++st_.lines;
    if (!ex.ok()) return Bad(ex.status(), where);
    if (static_cast<int64_t>(ex->input_ids.size()) > options_.max_seq_len) {
      if (!options_.truncate) {
        ++st_.dropped_long;
        return Status::Ok();
      }
      ex->input_ids.resize(static_cast<size_t>(options_.max_seq_len));
      ex->labels.resize(static_cast<size_t>(options_.max_seq_len));
      ++st_.truncated;
    }
    const int64_t trained = Trained(*ex);
    if (trained == 0) {
      ++st_.no_trained;
      return Status::Ok();
    }
    st_.tokens += static_cast<int64_t>(ex->input_ids.size());
    st_.trained_tokens += trained;
    ++st_.examples;
    ids_.assign(ex->input_ids.begin(), ex->input_ids.end());  // token ids and -100 fit in int32
    labels_.assign(ex->labels.begin(), ex->labels.end());
    sink_->Add({ids_.data(), ids_.size()}, {labels_.data(), labels_.size()});
    return Status::Ok();
  }

 private:
  const SftDataOptions& options_;
  SftBuildStats& st_;
  TokenSink* const sink_;
  std::vector<int32_t> ids_, labels_;
};

struct Progress {
  const BuildProgress& report;
  int64_t done = 0, total = 0;
};

Status ReadJsonl(const std::string& path, DataFormat* format, const TextEncoder& encoder, const RenderChat& render,
                 const SftDataOptions& options, Collector* out, Progress* progress) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  std::string line;
  int64_t line_no = 0;
  bool too_long = false;
  while (ReadBoundedLine(in, &line, &too_long)) {
    ++line_no;
    progress->done += static_cast<int64_t>(line.size()) + 1;
    if (progress->report && line_no % 1024 == 0) progress->report(progress->done, progress->total);
    if (!too_long && IsBlank(line)) continue;
    Result<Example> ex =
        too_long ? Result<Example>(LineTooLong()) : LineToExample(line, format, encoder, render, options);
    EFT_RETURN_IF_ERROR(out->Take(std::move(ex), path + ":" + std::to_string(line_no)));
  }
  if (in.bad()) return Status::IoError(path + ": read error after line " + std::to_string(line_no));
  return Status::Ok();
}

// A Parquet or Arrow file, row by row; a part that cannot be decoded is one bad record per row it
// held (the whole file when it cannot be opened at all).
Status ReadTable(const std::string& path, DataFileKind kind, DataFormat* format, const TextEncoder& encoder,
                 const RenderChat& render, const SftDataOptions& options, Collector* out, Progress* progress) {
  const int64_t size = static_cast<int64_t>(std::filesystem::file_size(path));
  const int64_t start = progress->done;
  auto opened = TableRows::Open(path, kind);
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kFailedPrecondition) return opened.status();  // built without Arrow
    progress->done = start + size;
    return out->Bad(opened.status(), "");  // its message starts with the path
  }
  TableRows& rows = **opened;
  ojson row;
  while (true) {
    Result<bool> next = rows.Next(&row);
    if (!next.ok()) {
      const int64_t left = rows.SkipPart();
      EFT_RETURN_IF_ERROR(out->Bad(next.status(), path, left > 0 ? left : 1));
      continue;
    }
    if (!*next) break;
    EFT_RETURN_IF_ERROR(out->Take(RecordToExample(row, format, encoder, render, options), path + ": " + rows.Where()));
    if (progress->report && rows.rows_read() % 1024 == 0 && rows.total_rows() > 0) {
      progress->done = start + size * rows.rows_read() / rows.total_rows();
      progress->report(progress->done, progress->total);
    }
  }
  progress->done = start + size;
  return Status::Ok();
}

}  // namespace

nlohmann::json SftDataOptions::ToJson() const {
  return {{"format", DataFormatName(format)},    {"loss_on", LossOnName(labels.loss_on)},
          {"train_on_eos", labels.train_on_eos}, {"max_seq_len", max_seq_len},
          {"truncation", truncate ? "truncate" : "drop"}, {"on_bad_line", skip_bad_lines ? "skip" : "error"},
          {"vocab_size", vocab_size}};
}

nlohmann::json SftBuildStats::ToJson() const {
  return {{"lines", lines},         {"examples", examples},       {"skipped_bad_lines", skipped_bad},
          {"first_bad_line", first_bad}, {"no_trained_tokens", no_trained}, {"truncated", truncated},
          {"dropped_too_long", dropped_long}, {"tokens", tokens},      {"trained_tokens", trained_tokens},
          {"formats", formats}, {"kinds", kinds}};
}

Result<TokenDataset> BuildSftDataset(const std::vector<std::string>& files, const TextEncoder& encoder,
                                     const RenderChat& render, const SftDataOptions& options, SftBuildStats* stats,
                                     const BuildProgress& progress) {
  MemoryTokenSink memory;
  EFT_RETURN_IF_ERROR(StreamSftDataset(files, encoder, render, options, stats, &memory, progress));
  return memory.Finish();
}

Status StreamSftDataset(const std::vector<std::string>& files, const TextEncoder& encoder, const RenderChat& render,
                        const SftDataOptions& options, SftBuildStats* stats, TokenSink* sink,
                        const BuildProgress& progress) {
  SftBuildStats local;
  SftBuildStats& st = stats ? *stats : local;
  st = SftBuildStats{};
  Progress at{progress};
  for (const auto& f : files) {
    std::error_code ec;
    auto size = std::filesystem::file_size(f, ec);
    if (ec) return Status::NotFound(f + ": cannot open: " + ec.message());
    at.total += static_cast<int64_t>(size);
  }
  Collector out(options, &st, sink);
  for (const auto& path : files) {
    EFT_ASSIGN_OR_RETURN(DataFileKind kind, DetectDataFileKind(path));
    DataFormat format = options.format;
    if (kind == DataFileKind::kJsonl) {
      EFT_RETURN_IF_ERROR(ReadJsonl(path, &format, encoder, render, options, &out, &at));
    } else {
      EFT_RETURN_IF_ERROR(ReadTable(path, kind, &format, encoder, render, options, &out, &at));
    }
    st.formats[path] = DataFormatName(format);
    st.kinds[path] = DataFileKindName(kind);
  }
  if (progress) progress(at.total, at.total);
  return Status::Ok();
}

}  // namespace eft::trainer
