#include "trainer/generate/generate_command.h"

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainer/generate/generation_setup.h"
#include "trainer/generate/reply_view.h"
#include "trainer/generate/text_stream.h"

namespace eft::trainer {
namespace {

using gen::Fail;
using gen::LoadedModel;
using OrderedJson = nlohmann::ordered_json;

Result<std::vector<int32_t>> ParsePromptIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < 0 || v > INT32_MAX)
      return Status::InvalidArgument("--prompt-ids: '" + word + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return Status::InvalidArgument("--prompt-ids: no ids");
  return ids;
}

// The prompt's token ids: --prompt-ids as given; --messages rendered with the chat template and
// its generation prompt; --prompt likewise as one user message when the model has a template, else
// as raw text (with the tokenizer's BOS/EOS as its post-processor adds them, as HF's tokenizer does).
Result<std::vector<int32_t>> PromptTokens(const GenerateArgs& a, const LoadedModel& m) {
  if (!a.prompt_ids.empty()) return ParsePromptIds(a.prompt_ids);
  if (!m.tokenizer) return Status::FailedPrecondition(a.model + " has no tokenizer (tokenizer.json or tokenizer.model): "
                                                                "pass token ids with --prompt-ids");
  OrderedJson messages, tools;
  if (!a.messages_file.empty()) {
    if (!m.chat_template)
      return Status::FailedPrecondition(a.model + " has no chat template, so --messages cannot be rendered: "
                                                  "use --prompt for raw text");
    std::ifstream in(a.messages_file);
    if (!in) return Status::NotFound("--messages: cannot read " + a.messages_file);
    OrderedJson doc = OrderedJson::parse(in, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return Status::InvalidArgument("--messages: " + a.messages_file + " is not valid JSON");
    if (doc.is_object() && doc.contains("messages")) {
      messages = doc["messages"];
      if (doc.contains("tools")) tools = doc["tools"];
    } else {
      messages = doc;
    }
    if (!messages.is_array() || messages.empty())
      return Status::InvalidArgument("--messages: " + a.messages_file +
                                     " must hold a non-empty list of messages or {\"messages\": [...]}");
  } else if (m.chat_template) {
    messages = OrderedJson::array({{{"role", "user"}, {"content", a.prompt}}});
  } else {
    return m.tokenizer->EncodeIds(a.prompt, /*add_special_tokens=*/true);
  }
  auto text = m.chat_template->Render(messages, tools, /*add_generation_prompt=*/true);
  if (!text.ok()) return text.status().WithContext("rendering the chat template");
  // The template writes the special tokens itself (apply_chat_template tokenizes the same way).
  return m.tokenizer->EncodeIds(*text, /*add_special_tokens=*/false);
}

Status CheckPromptChoice(const GenerateArgs& a) {
  const int given = !a.prompt.empty() + !a.messages_file.empty() + !a.prompt_ids.empty();
  if (given != 1) return Status::InvalidArgument("give exactly one of --prompt, --messages and --prompt-ids");
  if (a.format != "text" && a.format != "raw" && a.format != "ids")
    return Status::InvalidArgument("--format must be text, raw or ids");
  return ValidateSamplingOptions(a.sampling);
}

}  // namespace

int RunGenerate(const GenerateArgs& a, std::ostream& out, std::ostream& err) {
  if (Status s = CheckPromptChoice(a); !s.ok()) return Fail(s, err);
  auto loaded = gen::LoadForGeneration(a);
  if (!loaded.ok()) return Fail(loaded.status(), err);
  const LoadedModel& m = *loaded;
  if (a.format != "ids" && !m.tokenizer)
    return Fail(Status::FailedPrecondition(a.model + " has no tokenizer to print text with: use --format ids"), err);
  auto prompt = PromptTokens(a, m);
  if (!prompt.ok()) return Fail(prompt.status(), err);

  GenerateOptions options{a.max_new_tokens, a.sampling, m.eos_ids};
  DecodeSession session(*m.model);
  std::optional<TextStream> text;
  if (a.format != "ids") text.emplace(*m.tokenizer, /*skip_special_tokens=*/true);
  std::optional<ReplyView> view;
  if (a.format == "text") view.emplace(gen::IsTerminal(out));
  auto shown = [&](const std::string& chunk) { return view ? view->Push(chunk) : chunk; };
  bool first = true;
  auto on_token = [&](int32_t id) {
    if (text) {
      out << shown(text->Push(id));
    } else {
      out << (first ? "" : " ") << id;
      first = false;
    }
    out.flush();
  };
  auto result = Generate(session, *prompt, options, on_token);
  if (!result.ok()) return Fail(result.status(), err);
  if (text) out << shown(text->Finish());
  if (view) out << view->Finish();
  out << "\n" << std::flush;
  if (result->stop == StopReason::kContextFull)
    err << "eft-train: stopped at the model's context length (" << m.model->max_positions() << " positions)\n";
  if (a.stats) gen::PrintStats(*result, err);
  return 0;
}

namespace {

void AddDecodingOptions(CLI::App* cmd, GenerateArgs& a) {
  cmd->add_option("--model", a.model, "Hugging Face model directory (config.json, safetensors, tokenizer)")->required();
  cmd->add_option("--adapter", a.adapter, "a PEFT LoRA adapter directory for the model, applied before generating");
  cmd->add_option("--max-new-tokens", a.max_new_tokens, "stop after this many new tokens (default 256)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", a.sampling.temperature, "0 (default): greedy; > 0: sample from softmax(logits / T)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", a.sampling.top_k, "sample only from the K most likely tokens (0, default: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", a.sampling.top_p,
                  "sample only from the most likely tokens whose probability reaches P (default 1: all)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", a.sampling.seed, "random seed for sampling (default 0)");
  cmd->add_option("--dtype", a.dtype, "compute dtype: fp32 (default) or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--threads", a.threads, "intra-op threads (default: $OMP_NUM_THREADS, else every core)");
  cmd->add_flag("--stats", a.stats, "print token counts and timings as one JSON line on stderr");
}

}  // namespace

GenerateCommands::GenerateCommands(CLI::App& app) {
  generate_ = app.add_subcommand("generate", "generate text from a model directory (KV cache, one process)");
  GenerateArgs& g = generate_args_;
  AddDecodingOptions(generate_, g);
  generate_->add_option("--prompt", g.prompt,
                        "the prompt: rendered as one user message with the model's chat template (and its "
                        "generation prompt) when the model has one, else tokenized as raw text");
  generate_->add_option("--messages", g.messages_file,
                        "JSON conversation (a list of messages, or {\"messages\": [...], \"tools\": [...]}) "
                        "rendered with the chat template; needs one");
  generate_->add_option("--prompt-ids", g.prompt_ids, "the prompt as token ids: \"1 2 3\" (no template, no tokenizer)");
  generate_->add_option("--format", g.format,
                        "text (default, streamed): the reply as a chat UI shows it (an empty <think> block dropped, "
                        "a non-empty one shown as 'thinking: ...'); raw: the exact text; ids: the new ids on one line")
      ->check(CLI::IsMember({"text", "raw", "ids"}));

  chat_ = app.add_subcommand("chat", "interactive chat on stdin (one message per line; /reset; EOF ends)");
  AddDecodingOptions(chat_, chat_args_);
  chat_->add_option("--system", chat_args_.system, "a system message at the start of each conversation");
  chat_->add_option("--format", chat_args_.format,
                    "text (default): replies as a chat UI shows them (see generate --format); raw: the exact text")
      ->check(CLI::IsMember({"text", "raw"}));
}

int GenerateCommands::Run(std::istream& in, std::ostream& out, std::ostream& err) const {
  try {
    if (generate_->parsed()) return RunGenerate(generate_args_, out, err);
    return RunChat(chat_args_, in, out, err);
  } catch (const std::exception& e) {  // a LibTorch error (e.g. out of memory) is a failure, not bad input
    err << "eft-train: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace eft::trainer
