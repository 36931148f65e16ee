// YAML <-> JSON conversion, so that every config and job spec has one in-memory form
// (nlohmann::json) whether a user wrote YAML or JSON.
//
// Plain YAML scalars are typed the way YAML 1.2's core schema types them (null, true/false,
// integers incl. 0x hex and 0o octal, floats incl. .inf/.nan, else string); quoted scalars always
// stay strings, so `name: "123"` is a string. Integers beyond int64 become uint64, then double.
// Mapping keys must be unique scalars and are taken as their text (`1:` is the key "1"); a null,
// list or mapping as a key is an error. A text holds one document (a trailing "---" is allowed).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace eft {

// Parses YAML (or JSON, which is YAML) text. Errors carry the line and column.
Result<nlohmann::json> YamlToJson(const std::string& text);
// Reads and parses a YAML or JSON file; errors name the file.
Result<nlohmann::json> LoadYamlOrJsonFile(const std::string& path);
// Emits block-style YAML for a JSON value (for `-o yaml` output).
std::string JsonToYaml(const nlohmann::json& value);

}  // namespace eft
