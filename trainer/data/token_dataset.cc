#include "trainer/data/token_dataset.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "trainer/data/jsonl_line.h"

namespace eft::trainer {
namespace {

constexpr int64_t kIgnore = -100;

// Reads element `i` of a token array as an int64, or says why it cannot: JSON numbers arrive as
// signed, unsigned or float, and only integral values in int64 range are token ids.
Status ReadId(const nlohmann::json& v, const std::string& where, const std::string& field, size_t i,
              int64_t* out) {
  const std::string at = where + field + "[" + std::to_string(i) + "]";
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    *out = v.get<int64_t>();
    return Status::Ok();
  }
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::InvalidArgument(at + " = " + std::to_string(u) + ": token id is too large");
    }
    *out = static_cast<int64_t>(u);
    return Status::Ok();
  }
  return Status::InvalidArgument(at + " = " + v.dump() + ": token ids must be integers");
}

Status CheckRange(int64_t id, int64_t vocab_size, const std::string& where, const std::string& field, size_t i,
                  const char* what) {
  const std::string at = where + field + "[" + std::to_string(i) + "] = " + std::to_string(id);
  if (id < 0) return Status::InvalidArgument(at + ": " + what + " must be >= 0");
  if (vocab_size > 0 && id >= vocab_size) {
    return Status::InvalidArgument(at + ": " + what + " must be < the model's vocab_size (" +
                                   std::to_string(vocab_size) + "); was the data tokenized for another model?");
  }
  return Status::Ok();
}

// Parses one non-blank line into `ex`; `where` is "path:line: ".
Status ParseLine(const std::string& line, const std::string& where, int64_t vocab_size, Example* ex) {
  if (Status s = CheckJsonlLine(line); !s.ok()) return s.WithContext(where.substr(0, where.size() - 2));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's own "line 1, column N" prefix counts within the line; the byte offset says the same.
    std::string detail = e.what();
    if (size_t c = detail.find(", column "); c != std::string::npos) {
      if (size_t colon = detail.find(": ", c); colon != std::string::npos) detail = detail.substr(colon + 2);
    }
    return Status::InvalidArgument(where + "not valid JSON at byte " + std::to_string(e.byte) + " (" + detail +
                                   "); each line must be one object like {\"input_ids\": [...]}");
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number like 1e999 escaped before
    return Status::InvalidArgument(where + "not valid JSON (" + e.what() + ")");
  }
  return ParsePretokenizedObject(j, where, vocab_size, ex);
}

}  // namespace

Status ParsePretokenizedObject(const nlohmann::json& j, const std::string& where, int64_t vocab_size, Example* ex) {
  if (!j.is_object()) {
    return Status::InvalidArgument(where + "expected a JSON object like {\"input_ids\": [...]}, got " +
                                   std::string(j.type_name()));
  }
  auto ids = j.find("input_ids");
  if (ids == j.end()) return Status::InvalidArgument(where + "input_ids: missing (a non-empty array of token ids)");
  if (!ids->is_array()) {
    return Status::InvalidArgument(where + "input_ids: must be an array of token ids, got " +
                                   std::string(ids->type_name()));
  }
  if (ids->empty()) return Status::InvalidArgument(where + "input_ids: is empty; every example needs tokens");
  ex->input_ids.resize(ids->size());
  for (size_t i = 0; i < ids->size(); ++i) {
    EFT_RETURN_IF_ERROR(ReadId((*ids)[i], where, "input_ids", i, &ex->input_ids[i]));
    EFT_RETURN_IF_ERROR(CheckRange(ex->input_ids[i], vocab_size, where, "input_ids", i, "token ids"));
  }
  auto labels = j.find("labels");
  if (labels == j.end()) {
    ex->labels = ex->input_ids;
    return Status::Ok();
  }
  if (!labels->is_array()) {
    return Status::InvalidArgument(where + "labels: must be an array of token ids or -100, got " +
                                   std::string(labels->type_name()));
  }
  if (labels->size() != ids->size()) {
    return Status::InvalidArgument(where + "labels: has " + std::to_string(labels->size()) +
                                   " entries but input_ids has " + std::to_string(ids->size()) +
                                   "; they must be the same length (labels are not shifted)");
  }
  ex->labels.resize(labels->size());
  for (size_t i = 0; i < labels->size(); ++i) {
    EFT_RETURN_IF_ERROR(ReadId((*labels)[i], where, "labels", i, &ex->labels[i]));
    if (ex->labels[i] == kIgnore) continue;
    EFT_RETURN_IF_ERROR(CheckRange(ex->labels[i], vocab_size, where, "labels", i, "labels (other than -100)"));
  }
  return Status::Ok();
}

namespace {

bool IsBlank(const std::string& s) {
  return s.find_first_not_of(" \t\r\n") == std::string::npos;
}

}  // namespace

void TokenDataset::Builder::Append(TokenSpan<int32_t> ids, TokenSpan<int32_t> labels) {
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  labels_.insert(labels_.end(), labels.begin(), labels.end());
}

void TokenDataset::Builder::EndRow(const std::vector<int64_t>& document_lengths) {
  offsets_.push_back(static_cast<int64_t>(ids_.size()));
  doc_lengths_.insert(doc_lengths_.end(), document_lengths.begin(), document_lengths.end());
  doc_offsets_.push_back(static_cast<int64_t>(doc_lengths_.size()));
}

TokenDataset TokenDataset::Builder::Finish() {
  TokenDataset ds;
  ds.ids_ = std::move(ids_);
  ds.labels_ = std::move(labels_);
  ds.offsets_ = std::move(offsets_);
  if (!doc_lengths_.empty()) {
    ds.doc_lengths_ = std::move(doc_lengths_);
    ds.doc_offsets_ = std::move(doc_offsets_);
  }
  ds.CountTokens();
  *this = Builder();
  return ds;
}

ExampleView TokenDataset::operator[](int64_t i) const {
  const auto b = static_cast<size_t>(offsets_[static_cast<size_t>(i)]);
  const auto n = static_cast<size_t>(offsets_[static_cast<size_t>(i) + 1]) - b;
  ExampleView v{{ids() + b, n}, {labels() + b, n}, {}};
  if (!doc_offsets_.empty()) {
    const auto db = static_cast<size_t>(doc_offsets_[static_cast<size_t>(i)]);
    const auto dn = static_cast<size_t>(doc_offsets_[static_cast<size_t>(i) + 1]) - db;
    v.document_lengths = {doc_lengths_.data() + db, dn};
  }
  return v;
}

// Label 0 never becomes a target once labels are shifted (nothing predicts the first token).
void TokenDataset::CountTokens() {
  stats_.examples = size();
  stats_.tokens = tokens();
  stats_.trained_tokens = 0;
  const int32_t* l = labels();
  for (int64_t i = 0; i < size(); ++i) {
    for (int64_t t = offsets_[static_cast<size_t>(i)] + 1; t < offsets_[static_cast<size_t>(i) + 1]; ++t)
      stats_.trained_tokens += l[t] != kIgnore;
  }
}

Result<TokenDataset> TokenDataset::LoadPretokenized(const std::string& path, const DatasetOptions& options) {
  if (options.max_seq_len < 1) {
    return Status::InvalidArgument("max_seq_len: " + std::to_string(options.max_seq_len) + " must be >= 1");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  Builder builder;
  int64_t truncated = 0, dropped = 0;
  std::string line;
  int64_t line_no = 0;
  std::vector<int32_t> ids, labels;
  bool too_long = false;
  // One line at a time: training files can be many GB, and only the parsed ids need to stay.
  while (ReadBoundedLine(in, &line, &too_long)) {
    ++line_no;
    if (too_long) return LineTooLong().WithContext(path + ":" + std::to_string(line_no));
    if (IsBlank(line)) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    Example ex;
    EFT_RETURN_IF_ERROR(ParseLine(line, where, options.vocab_size, &ex));
    if (static_cast<int64_t>(ex.input_ids.size()) > options.max_seq_len) {
      if (!options.truncate) {
        ++dropped;
        continue;
      }
      ex.input_ids.resize(static_cast<size_t>(options.max_seq_len));
      ex.labels.resize(static_cast<size_t>(options.max_seq_len));
      ++truncated;
    }
    for (int64_t id : ex.input_ids) {
      if (id > std::numeric_limits<int32_t>::max())
        return Status::InvalidArgument(where + "token id " + std::to_string(id) + " does not fit in 32 bits");
    }
    ids.assign(ex.input_ids.begin(), ex.input_ids.end());
    labels.assign(ex.labels.begin(), ex.labels.end());
    builder.Append({ids.data(), ids.size()}, {labels.data(), labels.size()});
    builder.EndRow();
  }
  if (in.bad()) return Status::IoError(path + ": read error after line " + std::to_string(line_no));
  TokenDataset ds = builder.Finish();
  ds.stats_.truncated = truncated;
  ds.stats_.dropped = dropped;
  return ds;
}

TokenDataset TokenDataset::FromExamples(std::vector<Example> examples) {
  Builder builder;
  std::vector<int32_t> ids, labels;
  for (Example& ex : examples) {
    ids.assign(ex.input_ids.begin(), ex.input_ids.end());  // token ids and -100 fit in int32
    labels.assign(ex.labels.begin(), ex.labels.end());
    builder.Append({ids.data(), ids.size()}, {labels.data(), labels.size()});
    builder.EndRow(ex.document_lengths);
    ex = Example();  // free as we go: only one copy of the tokens at a time
  }
  return builder.Finish();
}

TokenDataset TokenDataset::FromFlat(std::shared_ptr<const void> owner, const int32_t* ids, const int32_t* labels,
                                    std::vector<int64_t> offsets) {
  TokenDataset ds;
  ds.owner_ = std::move(owner);
  ds.ext_ids_ = ids;
  ds.ext_labels_ = labels;
  ds.offsets_ = std::move(offsets);
  ds.CountTokens();
  return ds;
}

}  // namespace eft::trainer
