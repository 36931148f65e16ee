#include "trainer/data/sft_labels.h"

#include <algorithm>

namespace eft::trainer {
namespace {

using ojson = nlohmann::ordered_json;
constexpr int64_t kIgnore = -100;

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Messages [0, n) of a conversation.
ojson Prefix(const ojson& messages, size_t n) {
  ojson out = ojson::array();
  for (size_t i = 0; i < n; ++i) out.push_back(messages[i]);
  return out;
}

bool IsAssistant(const ojson& m) { return m.value("role", "") == "assistant"; }

// The messages whose replies are trained.
std::vector<size_t> TrainedMessages(const SftRecord& r, LossOn loss_on) {
  std::vector<size_t> out;
  const size_t n = r.messages.size();
  for (size_t i = r.first_completion_message; i < n; ++i) {
    if (IsAssistant(r.messages[i])) out.push_back(i);
  }
  // A plain conversation trained on its completion: its last reply only.
  if (loss_on == LossOn::kCompletion && r.first_completion_message == 0 && !out.empty()) out = {out.back()};
  return out;
}

}  // namespace

Result<LossOn> ParseLossOn(std::string_view name) {
  if (name == "assistant") return LossOn::kAssistant;
  if (name == "completion") return LossOn::kCompletion;
  if (name == "all") return LossOn::kAll;
  return Status::InvalidArgument("data.loss_on: '" + std::string(name) + "' is not one of assistant, completion, all");
}

Result<std::vector<std::pair<size_t, size_t>>> TrainedSpans(const SftRecord& record, const std::string& rendered,
                                                            const RenderChat& render, const TextEncoder& encoder,
                                                            const LabelOptions& options) {
  std::vector<std::pair<size_t, size_t>> spans;
  if (options.loss_on == LossOn::kAll) {
    spans.emplace_back(0, rendered.size());
    return spans;
  }
  size_t cursor = 0;
  for (size_t i : TrainedMessages(record, options.loss_on)) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    EFT_ASSIGN_OR_RETURN(std::string before, render(Prefix(record.messages, i), record.tools, true));
    EFT_ASSIGN_OR_RETURN(std::string through, render(Prefix(record.messages, i + 1), record.tools, false));
    if (through.compare(0, before.size(), before) != 0) {
      return Status::InvalidArgument(where + ": the chat template does not render the conversation up to this "
                                     "reply as a prefix of the conversation through it, so the reply cannot be "
                                     "told apart (use data.loss_on: all)");
    }
    std::string reply = through.substr(before.size());
    while (!reply.empty() && IsSpace(reply.back())) reply.pop_back();
    if (reply.empty()) continue;  // an empty reply: nothing to train
    size_t at = std::string::npos;
    if (before.size() >= cursor && before.size() <= rendered.size() &&
        rendered.compare(before.size(), reply.size(), reply) == 0) {
      at = before.size();
    } else {
      at = rendered.find(reply, cursor);
    }
    if (at == std::string::npos) {
      // The template renders this reply differently once more messages follow (Qwen3 drops the
      // reasoning of earlier turns): find its content, then the reply's own ending after it.
      const ojson& content = record.messages[i]["content"];
      if (content.is_string() && !content.get<std::string>().empty()) {
        const std::string text = content.get<std::string>();
        const size_t in_reply = reply.rfind(text);
        const size_t found = rendered.find(text, cursor);
        if (in_reply != std::string::npos && found != std::string::npos) {
          const std::string ending = reply.substr(in_reply + text.size());
          if (rendered.compare(found + text.size(), ending.size(), ending) == 0) {
            at = found;
            reply = text + ending;
          }
        }
      }
    }
    if (at == std::string::npos && before.size() >= cursor && rendered.compare(0, before.size(), before) == 0) {
      // The reply itself renders differently (Qwen3 adds an empty reasoning block only to a final
      // reply), but the conversation up to it is unchanged: the reply runs from there to the
      // end-of-turn token the template closes it with.
      for (const std::string& special : encoder.special_tokens()) {
        if (special.empty() || reply.size() < special.size() ||
            reply.compare(reply.size() - special.size(), special.size(), special) != 0)
          continue;
        size_t close = rendered.find(special, before.size());
        if (close != std::string::npos) {
          at = before.size();
          reply = rendered.substr(at, close + special.size() - at);
        }
        break;
      }
    }
    if (at == std::string::npos) {
      return Status::InvalidArgument(where + ": the chat template renders this reply differently once later "
                                     "messages follow, so its tokens cannot be located (use data.loss_on: all)");
    }
    size_t end = at + reply.size();
    if (!options.train_on_eos) {
      for (const std::string& special : encoder.special_tokens()) {
        if (!special.empty() && end - at >= special.size() &&
            rendered.compare(end - special.size(), special.size(), special) == 0) {
          end -= special.size();
          while (end > at && IsSpace(rendered[end - 1])) --end;
          break;
        }
      }
    }
    if (end > at) spans.emplace_back(at, end);
    cursor = at + reply.size();
  }
  return spans;
}

Result<Example> TokenizeSftRecord(const SftRecord& record, const TextEncoder& encoder, const RenderChat& render,
                                  const LabelOptions& options) {
  Example ex;
  if (record.kind == SftRecord::Kind::kTokens) return record.tokens;
  if (!encoder.can_encode()) {
    return Status::FailedPrecondition("text needs the model's tokenizer, and the model directory has none "
                                      "(tokenizer.json or tokenizer.model); only pre-tokenized data can be used");
  }
  std::vector<std::pair<size_t, size_t>> offsets;
  if (record.kind == SftRecord::Kind::kText) {
    // Prompt (with the tokenizer's BOS), then the text, then EOS: tokenized apart so the boundary
    // between untrained and trained tokens is exact.
    const bool prompt_trained = options.loss_on == LossOn::kAll || record.all_trained;
    std::vector<int32_t> prompt_ids;
    if (!record.prompt.empty() || !record.all_trained) {
      prompt_ids = encoder.EncodeWithOffsets(record.prompt, true, &offsets);
    }
    std::vector<int32_t> text_ids = encoder.EncodeWithOffsets(record.text, record.all_trained, &offsets);
    for (int32_t id : prompt_ids) {
      ex.input_ids.push_back(id);
      ex.labels.push_back(prompt_trained ? id : kIgnore);
    }
    for (int32_t id : text_ids) {
      ex.input_ids.push_back(id);
      ex.labels.push_back(id);
    }
    if (auto eos = encoder.eos_id(); eos && (ex.input_ids.empty() || ex.input_ids.back() != *eos)) {
      ex.input_ids.push_back(*eos);
      ex.labels.push_back(options.train_on_eos ? *eos : kIgnore);
    }
    return ex;
  }
  if (!render)
    return Status::FailedPrecondition("conversations need a chat template, and the model directory has none "
                                      "(tokenizer_config.json chat_template or chat_template.jinja); set "
                                      "data.chat_template to a Jinja file");
  EFT_ASSIGN_OR_RETURN(std::string rendered, render(record.messages, record.tools, false));
  EFT_ASSIGN_OR_RETURN(auto spans, TrainedSpans(record, rendered, render, encoder, options));
  std::vector<int32_t> ids = encoder.EncodeWithOffsets(rendered, false, &offsets);
  ex.input_ids.assign(ids.begin(), ids.end());
  ex.labels.assign(ids.size(), kIgnore);
  size_t s = 0;  // spans and tokens both ascend
  for (size_t t = 0; t < ids.size(); ++t) {
    const auto [b, e] = offsets[t];
    while (s < spans.size() && spans[s].second <= b) ++s;
    if (s < spans.size() && spans[s].first < e && b < spans[s].second) ex.labels[t] = ids[t];
  }
  return ex;
}

}  // namespace eft::trainer
