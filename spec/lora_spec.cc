// training.lora (docs/lora.md): defaults and validation, called by NormalizeJobSpec.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "spec/job_spec.h"
#include "spec/spec_messages.h"

namespace eft::spec {

using internal::CheckRange;
using internal::FormatDouble;
using internal::Invalid;
using internal::Quote;

Status NormalizeLora(v1::LoraSpec* lora) {
  if (!lora->has_r()) lora->set_r(16);
  EFT_RETURN_IF_ERROR(CheckRange("spec.training.lora.r", lora->r(), 1, 65536));
  if (!lora->has_alpha()) lora->set_alpha(32);
  if (!std::isfinite(lora->alpha()) || !(lora->alpha() > 0)) {
    return Invalid("spec.training.lora.alpha (" + FormatDouble(lora->alpha()) + ") must be a finite number > 0");
  }
  if (!std::isfinite(lora->dropout()) || !(lora->dropout() >= 0) || !(lora->dropout() < 1)) {
    return Invalid("spec.training.lora.dropout (" + FormatDouble(lora->dropout()) + ") must be >= 0 and < 1");
  }
  if (lora->target_modules_size() == 0) lora->add_target_modules("all-linear");
  const auto& known = LoraModuleNames();
  std::set<std::string> seen;
  for (const std::string& m : lora->target_modules()) {
    const std::string field = "spec.training.lora.target_modules";
    if (m == "all-linear") {
      if (lora->target_modules_size() > 1) return Invalid(field + ": all-linear already names every module; use it alone");
      continue;
    }
    if (std::find(known.begin(), known.end(), m) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      return Invalid(field + ": unknown module " + Quote(m) + "; use all-linear or names from " + list);
    }
    if (!seen.insert(m).second) return Invalid(field + ": " + Quote(m) + " is given twice");
  }
  return Status::Ok();
}

const std::vector<std::string>& LoraModuleNames() {
  static const auto* kNames =
      new std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return *kNames;
}

}  // namespace eft::spec
