// Runs parsed templates. One Interpreter per render; the globals are the render's variables
// (messages, tools, add_generation_prompt, special tokens...) plus Jinja's and Hugging Face's
// global functions (range, dict, namespace, raise_exception, strftime_now).
#pragma once

#include <string>

#include "common/status.h"
#include "trainer/chat_template/ast.h"

namespace eft::trainer::jinja {

// Errors: raise_exception(msg) gives FailedPrecondition with exactly msg; anything else
// InvalidArgument starting "line L: ".
Result<std::string> Render(const Body& body, const Dict& variables);

// The filter and test names `body` uses that do not exist, as "line L, column C: ..." errors.
Status CheckNames(const Body& body);

}  // namespace eft::trainer::jinja
