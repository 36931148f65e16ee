#include "trainer/tokenizer/tokenize_command.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "common/utf8.h"
#include "trainer/tokenizer/tokenizer.h"

namespace eft::trainer {

int RunTokenizeCommand(const TokenizeArgs& args, std::istream& stdin_stream, std::ostream& out, std::ostream& err) {
  auto tokenizer = LoadTokenizer(args.tokenizer_dir);
  if (!tokenizer.ok()) {
    err << "eft-train tokenize: " << tokenizer.status().message() << "\n";
    return 2;
  }
  std::ifstream file;
  std::istream* in = &stdin_stream;
  if (!args.file.empty() && args.file != "-") {
    file.open(args.file, std::ios::binary);
    if (!file) {
      err << "eft-train tokenize: cannot read " << args.file << "\n";
      return 2;
    }
    in = &file;
  }
  std::string line;
  size_t line_no = 0;
  while (std::getline(*in, line)) {
    ++line_no;
    if (args.decode) {
      std::istringstream fields(line);
      std::vector<int32_t> ids;
      std::string field;
      while (fields >> field) {
        char* end = nullptr;
        long id = std::strtol(field.c_str(), &end, 10);
        if (*end != '\0' || id < 0 || id >= (*tokenizer)->vocab_size()) {
          err << "eft-train tokenize: line " << line_no << ": " << field << " is not a token id\n";
          return 2;
        }
        ids.push_back(static_cast<int32_t>(id));
      }
      out << (*tokenizer)->Decode(ids, false) << "\n";
      continue;
    }
    // The tokenizer's regexes run with PCRE2_NO_UTF_CHECK (the data pipeline validates its text):
    // raw input lines must be checked here.
    if (!IsValidUtf8(line)) {
      err << "eft-train tokenize: " << (args.file.empty() || args.file == "-" ? "stdin" : args.file) << ":"
          << line_no << ": not valid UTF-8 text\n";
      return 2;
    }
    auto ids = (*tokenizer)->EncodeIds(line, args.add_special_tokens);
    for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
    out << "\n";
  }
  if (in->bad()) {
    err << "eft-train tokenize: error reading input\n";
    return 1;
  }
  out.flush();
  return out ? 0 : 1;
}

}  // namespace eft::trainer
