#include "trainer/generate/generator.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace eft::trainer {

DecodeSession::DecodeSession(const InferenceModel& model) : model_(model), cache_(model.NewCache()) {}

Result<at::Tensor> DecodeSession::SetContext(const std::vector<int32_t>& context) {
  if (context.empty()) return Status::InvalidArgument("the prompt has no tokens");
  size_t common = 0;
  while (common < tokens_.size() && common < context.size() && tokens_[common] == context[common]) ++common;
  // The last position always runs again: its logits are the answer, and the cache keeps keys and
  // values, not logits.
  common = std::min(common, context.size() - 1);
  cache_.Truncate(static_cast<int64_t>(common));
  tokens_.resize(common);
  last_reused_ = static_cast<int64_t>(common);
  const std::vector<int32_t> fresh(context.begin() + static_cast<long>(common), context.end());
  EFT_ASSIGN_OR_RETURN(at::Tensor logits, model_.Forward(fresh, &cache_, InferenceModel::LogitsFor::kLastPosition));
  tokens_ = context;
  return logits[0];
}

Result<at::Tensor> DecodeSession::Append(int32_t token) {
  EFT_ASSIGN_OR_RETURN(at::Tensor logits, model_.Forward({token}, &cache_, InferenceModel::LogitsFor::kLastPosition));
  tokens_.push_back(token);
  return logits[0];
}

void DecodeSession::Reset() {
  cache_.Truncate(0);
  tokens_.clear();
  last_reused_ = 0;
}

const char* StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kEos: return "eos";
    case StopReason::kMaxNewTokens: return "max_new_tokens";
    case StopReason::kContextFull: return "context_full";
  }
  return "?";
}

Result<GenerateResult> Generate(DecodeSession& session, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  EFT_RETURN_IF_ERROR(ValidateSamplingOptions(options.sampling));
  if (options.max_new_tokens < 0) return Status::InvalidArgument("--max-new-tokens must be >= 0");
  const int64_t context = session.model().max_positions();
  if (static_cast<int64_t>(prompt.size()) >= context)
    return Status::InvalidArgument("the prompt has " + std::to_string(prompt.size()) +
                                   " tokens; the model's context (max_position_embeddings) is " +
                                   std::to_string(context) + ", leaving no room to generate");
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };

  GenerateResult result;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  if (options.max_new_tokens == 0) return result;
  auto start = Clock::now();
  EFT_ASSIGN_OR_RETURN(at::Tensor logits, session.SetContext(prompt));
  Sampler sampler(options.sampling);
  int32_t token = sampler.Next(logits);
  result.prefill_seconds = seconds_since(start);
  result.reused_tokens = session.last_reused();
  for (;;) {
    if (std::find(options.eos_ids.begin(), options.eos_ids.end(), token) != options.eos_ids.end()) {
      result.stop = StopReason::kEos;
      break;
    }
    result.tokens.push_back(token);
    if (on_token) on_token(token);
    if (static_cast<int64_t>(result.tokens.size()) >= options.max_new_tokens) {
      result.stop = StopReason::kMaxNewTokens;
      break;
    }
    if (static_cast<int64_t>(session.tokens().size()) >= context) {
      result.stop = StopReason::kContextFull;
      break;
    }
    start = Clock::now();
    EFT_ASSIGN_OR_RETURN(logits, session.Append(token));
    token = sampler.Next(logits);
    result.token_seconds.push_back(seconds_since(start));
  }
  return result;
}

namespace {

// An eos_token_id field: an int, a list of ints, or null/absent (empty).
Result<std::vector<int32_t>> ReadEosField(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::vector<int32_t>{};
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument(path + " is not a JSON object");
  const auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return std::vector<int32_t>{};
  std::vector<int32_t> ids;
  const nlohmann::json list = it->is_array() ? *it : nlohmann::json::array({*it});
  for (const auto& v : list) {
    if (!v.is_number_integer()) return Status::InvalidArgument(path + ": eos_token_id must be an int or a list of ints");
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

}  // namespace

Result<std::vector<int32_t>> EosTokenIds(const std::string& model_dir, const Tokenizer* tokenizer) {
  for (const char* file : {"generation_config.json", "config.json"}) {
    EFT_ASSIGN_OR_RETURN(auto ids, ReadEosField((std::filesystem::path(model_dir) / file).string()));
    if (!ids.empty()) return ids;
  }
  if (tokenizer != nullptr && tokenizer->eos_id()) return std::vector<int32_t>{*tokenizer->eos_id()};
  return std::vector<int32_t>{};
}

}  // namespace eft::trainer
