// How spec/ validation words its errors (docs/architecture.md, "The job spec: one schema"): every
// message names the field, the value as the user wrote it and the rule. Shared by job_spec.cc and
// lora_spec.cc; not for use outside spec/.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace eft::spec::internal {

// A user's string, JSON-quoted, long ones shortened.
std::string Quote(const std::string& s);
// A double as YAML spells it: shortest round-trip text, .nan, .inf, -.inf.
std::string FormatDouble(double d);
Status Invalid(const std::string& message);  // InvalidArgument
// "spec.x (7) must be >= 8" when v is outside [lo, hi].
Status CheckRange(const std::string& field, int64_t v, int64_t lo, int64_t hi);

}  // namespace eft::spec::internal
