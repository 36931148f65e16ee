// Splits a template into text and the tokens of its {{ expressions }} and {% statements %},
// applying Jinja's whitespace rules as Hugging Face configures them: trim_blocks (the newline
// after a block tag is dropped), lstrip_blocks (spaces before a block tag on its own line are
// dropped), "-" and "+" markers, comments, {% raw %}, and no trailing newline at the end.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace eft::trainer::jinja {

enum class TokenKind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  TokenKind kind;
  std::string text;  // text, name, decoded string literal, number or operator
  int line = 0, column = 0;
};

Result<std::vector<Token>> Tokenize(const std::string& source);

}  // namespace eft::trainer::jinja
