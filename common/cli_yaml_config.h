// A CLI11 config-file reader for YAML: `--config worker.yaml` whose keys are the program's long
// option names (`work_dir` or `work-dir` for --work-dir). Flags given on the command line win over
// the file, as CLI11 does for any config file. A key that names no option is an error (CLI11's
// allow_config_extras(false)), so a typo cannot silently fall back to a default.
#pragma once

#include <istream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/yaml_json.h"

namespace eft {

class YamlCliConfig : public CLI::Config {
 public:
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return ""; }

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::stringstream text;
    text << input.rdbuf();
    auto doc = YamlToJson(text.str());
    if (!doc.ok()) throw CLI::ConversionError("config file", doc.status().message());
    std::vector<CLI::ConfigItem> items;
    if (doc->is_null()) return items;
    if (!doc->is_object()) throw CLI::ConversionError("config file", "the top level must be a mapping of option: value");
    for (auto it = doc->begin(); it != doc->end(); ++it) {
      CLI::ConfigItem item;
      item.name = it.key();
      for (char& c : item.name)
        if (c == '_') c = '-';
      auto scalar = [&](const nlohmann::json& v) -> std::string {
        if (v.is_string()) return v.get<std::string>();
        if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
        if (v.is_number()) return v.dump();
        throw CLI::ConversionError(it.key(), "expected a scalar or a list of scalars");
      };
      if (it.value().is_null()) continue;  // a commented-out default: nothing to set
      if (it.value().is_array()) {
        for (const auto& v : it.value()) item.inputs.push_back(scalar(v));
      } else {
        item.inputs.push_back(scalar(it.value()));
      }
      items.push_back(std::move(item));
    }
    return items;
  }
};

// Adds --config FILE (YAML) to `app`.
inline CLI::Option* AddYamlConfigOption(CLI::App& app, const std::string& help) {
  app.config_formatter(std::make_shared<YamlCliConfig>());
  app.allow_config_extras(false);
  return app.set_config("--config", "", help);
}

}  // namespace eft
