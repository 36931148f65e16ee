// `eft-train tokenize --tokenizer DIR [--file F] [--add-special-tokens] [--decode]`: one line of
// space-separated ids per input line (or, with --decode, one line of text per line of ids).
#pragma once

#include <iosfwd>
#include <string>

namespace eft::trainer {

struct TokenizeArgs {
  std::string tokenizer_dir;
  std::string file;  // empty or "-": standard input
  bool add_special_tokens = false;
  bool decode = false;
};

// Exit code: 0, 2 (bad tokenizer or input), 1 (I/O).
int RunTokenizeCommand(const TokenizeArgs& args, std::istream& stdin_stream, std::ostream& out, std::ostream& err);

}  // namespace eft::trainer
