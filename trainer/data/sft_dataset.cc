#include "trainer/data/sft_dataset.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "trainer/data/jsonl_line.h"

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

// One line to an example; errors without the file:line prefix.
Result<Example> LineToExample(const std::string& line, DataFormat* format, const TextEncoder& encoder,
                              const RenderChat& render, const SftDataOptions& options) {
  EFT_RETURN_IF_ERROR(CheckJsonlLine(line));
  ojson j;
  try {
    j = ojson::parse(line);
  } catch (const ojson::exception&) {  // parse_error, or out_of_range for a number like 1e999
    return Status::InvalidArgument("not valid JSON");
  }
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
          {"formats", formats}};
}

Result<TokenDataset> BuildSftDataset(const std::vector<std::string>& files, const TextEncoder& encoder,
                                     const RenderChat& render, const SftDataOptions& options, SftBuildStats* stats,
                                     const BuildProgress& progress) {
  SftBuildStats local;
  SftBuildStats& st = stats ? *stats : local;
  st = SftBuildStats{};
  int64_t total_bytes = 0, done_bytes = 0;
  for (const auto& f : files) {
    std::error_code ec;
    auto size = std::filesystem::file_size(f, ec);
    if (ec) return Status::NotFound(f + ": cannot open: " + ec.message());
    total_bytes += static_cast<int64_t>(size);
  }
  std::vector<Example> examples;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
    DataFormat format = options.format;
    std::string line;
    int64_t line_no = 0;
    bool too_long = false;
    while (ReadBoundedLine(in, &line, &too_long)) {
      ++line_no;
      done_bytes += static_cast<int64_t>(line.size()) + 1;
      if (progress && line_no % 1024 == 0) progress(done_bytes, total_bytes);
      if (!too_long && IsBlank(line)) continue;
      ++st.lines;
      Result<Example> ex = too_long ? Result<Example>(LineTooLong()) : LineToExample(line, &format, encoder, render, options);
      if (!ex.ok()) {
        const std::string where = path + ":" + std::to_string(line_no) + ": " + ex.status().message();
        if (!options.skip_bad_lines) return Status(ex.status().code(), where);
        if (st.skipped_bad++ == 0) st.first_bad = where;
        continue;
      }
      if (static_cast<int64_t>(ex->input_ids.size()) > options.max_seq_len) {
        if (!options.truncate) {
          ++st.dropped_long;
          continue;
        }
        ex->input_ids.resize(static_cast<size_t>(options.max_seq_len));
        ex->labels.resize(static_cast<size_t>(options.max_seq_len));
        ++st.truncated;
      }
      const int64_t trained = Trained(*ex);
      if (trained == 0) {
        ++st.no_trained;
        continue;
      }
      st.tokens += static_cast<int64_t>(ex->input_ids.size());
      st.trained_tokens += trained;
      examples.push_back(std::move(*ex));
    }
    if (in.bad()) return Status::IoError(path + ": read error after line " + std::to_string(line_no));
    st.formats[path] = DataFormatName(format);
  }
  if (progress) progress(total_bytes, total_bytes);
  st.examples = static_cast<int64_t>(examples.size());
  return TokenDataset::FromExamples(std::move(examples));
}

}  // namespace eft::trainer
