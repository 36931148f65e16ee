// `eft-train chat`: the conversation is re-rendered with the chat template every turn (so the
// template decides how earlier turns look, as in training), and the DecodeSession reuses the
// longest prefix of it that is still in the KV cache: usually everything up to the new message.
#include <unistd.h>

#include <istream>
#include <optional>
#include <ostream>

#include <nlohmann/json.hpp>

#include "common/rank_protocol.h"
#include "trainer/generate/generate_command.h"
#include "trainer/generate/generation_setup.h"
#include "trainer/generate/reply_view.h"
#include "trainer/generate/text_stream.h"

namespace eft::trainer {

int RunChat(const GenerateArgs& a, std::istream& in, std::ostream& out, std::ostream& err) {
  if (Status s = ValidateSamplingOptions(a.sampling); !s.ok()) return gen::Fail(s, err);
  auto loaded = gen::LoadForGeneration(a);
  if (!loaded.ok()) return gen::Fail(loaded.status(), err);
  const gen::LoadedModel& m = *loaded;
  if (!m.tokenizer) return gen::Fail(Status::FailedPrecondition(a.model + " has no tokenizer; chat needs one"), err);
  if (!m.chat_template)
    return gen::Fail(Status::FailedPrecondition(a.model + " has no chat template (tokenizer_config.json chat_template "
                                                          "or chat_template.jinja); chat needs one"),
                     err);
  const bool interactive = &in == &std::cin && ::isatty(STDIN_FILENO);
  GenerateOptions options{a.max_new_tokens, a.sampling, m.eos_ids};
  DecodeSession session(*m.model);
  auto fresh_conversation = [&] {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
    return messages;
  };
  nlohmann::ordered_json messages = fresh_conversation();
  std::string line;
  for (;;) {
    if (interactive) err << "> " << std::flush;
    if (!std::getline(in, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (line == "/reset") {
      messages = fresh_conversation();
      session.Reset();
      if (interactive) err << "(new conversation)\n";
      continue;
    }
    messages.push_back({{"role", "user"}, {"content", line}});
    auto text = m.chat_template->Render(messages, nullptr, /*add_generation_prompt=*/true);
    if (!text.ok()) return gen::Fail(text.status().WithContext("rendering the chat template"), err);
    const std::vector<int32_t> prompt = m.tokenizer->EncodeIds(*text, /*add_special_tokens=*/false);
    TextStream stream(*m.tokenizer, /*skip_special_tokens=*/true);
    std::optional<ReplyView> view;
    if (a.format == "text") view.emplace(gen::IsTerminal(out));
    auto shown = [&](const std::string& chunk) { return view ? view->Push(chunk) : chunk; };
    auto result =
        Generate(session, prompt, options, [&](int32_t id) { out << shown(stream.Push(id)) << std::flush; });
    out << shown(stream.Finish()) << (view ? view->Finish() : "") << "\n" << std::flush;
    if (!result.ok()) {
      if (rank::ExitCodeFor(result.status()) == 1) return gen::Fail(result.status(), err);
      // Bad input for this turn (the conversation no longer fits the context): say so, start over.
      err << "eft-train: " << result.status().message() << "; starting a new conversation\n";
      messages = fresh_conversation();
      session.Reset();
      continue;
    }
    if (a.stats) gen::PrintStats(*result, err);
    messages.push_back({{"role", "assistant"}, {"content", m.tokenizer->Decode(result->tokens, true)}});
    if (result->stop == StopReason::kContextFull) {
      err << "eft-train: the conversation filled the model's context (" << m.model->max_positions()
          << " positions); starting a new one\n";
      messages = fresh_conversation();
      session.Reset();
    }
  }
  return 0;
}

}  // namespace eft::trainer
