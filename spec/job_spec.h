// Job specs: the one schema (proto/eft/v1/spec.proto) and the one place that reads, validates and
// fills in defaults. The controller normalizes every submit with it, eftctl parses files with it, and
// eft-train reads its spec (a --config file, or the EFT_JOB_SPEC the worker hands every rank) through
// the same functions, so a field, a default or an allowed value exists once.
//
// Errors are INVALID_ARGUMENT and name the field path and the fix, e.g.
//   "spec.resources.nodes.max (1) must be >= spec.resources.nodes.min (2)".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "eft/v1/spec.pb.h"

namespace eft::spec {

// Converts a JSON value (from YAML or JSON text) into a JobSpec by protobuf's JSON mapping
// (lowerCamelCase and the original snake_case names are both accepted). Unknown fields and
// wrongly typed values are errors naming the field path ("spec.training.lr: expected a number"),
// unknown ones with a suggestion ("did you mean lr?"). Strictly typed: "2" is not an integer and
// env values must be strings, except that 64-bit integers may be strings as proto JSON writes them.
// A null value leaves the field unset.
Result<v1::JobSpec> JobSpecFromJson(const nlohmann::json& value);

// Parses YAML or JSON text into a JobSpec (see JobSpecFromJson).
Result<v1::JobSpec> ParseJobSpec(const std::string& text);

// Checks every field and fills in the documented defaults (see spec.proto), except checkpoint.dir,
// whose default depends on the job id the controller assigns. Idempotent. Reports only the first
// error, in the order spec.proto declares the fields (nested messages depth-first, env names
// sorted), so the same bad spec always gets the same message. An unset field (a string: an empty
// one) gets its default; an explicit 0 is kept where 0 is allowed and refused where it is not (never
// silently replaced by a default).
Status NormalizeJobSpec(v1::JobSpec* spec);

// checkpoint.memory_every_steps as a number: -1 for "auto", 0 for off, N for every N steps;
// nullopt when it is neither "auto" nor a whole number of at most 9 digits.
std::optional<int64_t> MemorySnapshotInterval(const std::string& memory_every_steps);

// The spec as JSON with snake_case field names (as YAML files write them).
nlohmann::json JobSpecToJson(const v1::JobSpec& spec);

// The names of the job's eval sets in the order the trainer evaluates and indexes them (its eval
// events' `index`): data.eval's, or one "eval" for data.eval_fraction's held-out part; empty: none.
std::vector<std::string> EvalSetNames(const v1::JobSpec& spec);

// The HF module names training.lora.target_modules may list (besides all-linear), in layer order.
const std::vector<std::string>& LoraModuleNames();
// Defaults and checks of training.lora (part of NormalizeJobSpec).
Status NormalizeLora(v1::LoraSpec* lora);

}  // namespace eft::spec
