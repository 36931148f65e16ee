// Template source -> statements (ast.h). Errors name the line and column ("line 3, column 12:
// unknown tag 'include'"), so eft-train can report an unsupported template precisely.
#pragma once

#include <string>

#include "common/status.h"
#include "trainer/chat_template/ast.h"

namespace eft::trainer::jinja {

Result<Body> Parse(const std::string& source);

}  // namespace eft::trainer::jinja
