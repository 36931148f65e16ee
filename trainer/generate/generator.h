// Generation on an InferenceModel: a DecodeSession keeps one sequence's KV cache and token ids;
// Generate prefills a prompt (reusing whatever prefix the session already holds) and then decodes
// one position per new token until an eos token, max_new_tokens, or the model's context is full.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "common/status.h"
#include "trainer/generate/inference_model.h"
#include "trainer/generate/kv_cache.h"
#include "trainer/generate/sampler.h"
#include "trainer/tokenizer/tokenizer.h"

namespace eft::trainer {

class DecodeSession {
 public:
  explicit DecodeSession(const InferenceModel& model);  // `model` must outlive the session

  // Makes the session hold exactly `context` (non-empty), running only the positions after the
  // longest prefix it already holds (at least the last one, whose logits are needed). Returns the
  // fp32 logits [vocab] for the token after `context`.
  Result<at::Tensor> SetContext(const std::vector<int32_t>& context);
  // Appends one token (one position of work); returns the logits for the next one.
  Result<at::Tensor> Append(int32_t token);
  void Reset();

  const std::vector<int32_t>& tokens() const { return tokens_; }
  // How many positions of the last SetContext came from the cache.
  int64_t last_reused() const { return last_reused_; }
  const InferenceModel& model() const { return model_; }

 private:
  const InferenceModel& model_;
  KvCache cache_;
  std::vector<int32_t> tokens_;
  int64_t last_reused_ = 0;
};

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  SamplingOptions sampling;
  std::vector<int32_t> eos_ids;  // generation stops when one is produced (it is not returned)
};

enum class StopReason { kEos, kMaxNewTokens, kContextFull };
const char* StopReasonName(StopReason reason);  // "eos", "max_new_tokens", "context_full"

struct GenerateResult {
  std::vector<int32_t> tokens;  // the new tokens, without the eos that ended them
  StopReason stop = StopReason::kMaxNewTokens;
  int64_t prompt_tokens = 0, reused_tokens = 0;
  double prefill_seconds = 0;
  std::vector<double> token_seconds;  // per new token after the first: its forward + sampling
};

// Generates from `prompt` in `session`, calling `on_token` with each new token as soon as it is
// chosen. InvalidArgument for an empty prompt, a prompt at or past the model's context, invalid
// sampling options or max_new_tokens < 0 (0 returns at once with no token).
Result<GenerateResult> Generate(DecodeSession& session, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options,
                                const std::function<void(int32_t)>& on_token = nullptr);

// The tokens that end a reply: generation_config.json's eos_token_id (an int or a list), else
// config.json's, else the tokenizer's eos token (tokenizer_config.json), else none. InvalidArgument
// for a malformed file.
Result<std::vector<int32_t>> EosTokenIds(const std::string& model_dir, const Tokenizer* tokenizer);

}  // namespace eft::trainer
