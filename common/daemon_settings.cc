#include "common/daemon_settings.h"

#include <algorithm>
#include <utility>

#include <CLI/CLI.hpp>

#include "common/yaml_json.h"

namespace eft {

using nlohmann::json;

struct DaemonSettings::Setting {
  Names names;
  FileReader from_file;
  std::function<void()> from_flag;  // copies the parsed flag value onto the target
  CLI::Option* option = nullptr;
  bool set_by_file = false;
  // What CLI11 parses the flag into, until Apply copies it onto the target: only a flag given on
  // the command line may override the file.
  std::string string_value;
  int int_value = 0;
  bool bool_value = false;
  double seconds_value = 0;
};

namespace {

// "work-dir" and "work_dir" name the same setting.
std::string NormalizeKey(std::string key) {
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

std::chrono::milliseconds SecondsToMillis(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000 + 0.5));
}

}  // namespace

DaemonSettings::DaemonSettings(CLI::App* app, const std::string& config_help) : app_(app) {
  if (app_) app_->add_option("--config", config_path_, config_help)->check(CLI::ExistingFile);
}

DaemonSettings::~DaemonSettings() = default;

DaemonSettings::Setting* DaemonSettings::Add(Names names, FileReader from_file) {
  settings_.push_back(std::make_unique<Setting>());
  Setting* s = settings_.back().get();
  s->names = std::move(names);
  s->names.key = NormalizeKey(s->names.key);
  s->from_file = std::move(from_file);
  return s;
}

CLI::Option* DaemonSettings::AddString(Names names, std::string* target) {
  Setting* s = Add(std::move(names), [target](const json& v, const std::string& key) {
    if (!v.is_string()) return Status::InvalidArgument(key + ": expected a string");
    *target = v.get<std::string>();
    return Status::Ok();
  });
  if (app_ && !s->names.flag.empty()) {
    s->option = app_->add_option(s->names.flag, s->string_value, s->names.help);
    s->from_flag = [s, target] { *target = s->string_value; };
  }
  return s->option;
}

CLI::Option* DaemonSettings::AddChoice(Names names, std::vector<std::string> choices, std::string* target) {
  Setting* s = Add(std::move(names), [target, choices](const json& v, const std::string& key) {
    if (!v.is_string() || std::find(choices.begin(), choices.end(), v.get<std::string>()) == choices.end()) {
      std::string list;
      for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
      return Status::InvalidArgument(key + ": expected one of " + list);
    }
    *target = v.get<std::string>();
    return Status::Ok();
  });
  if (app_ && !s->names.flag.empty()) {
    s->option = app_->add_option(s->names.flag, s->string_value, s->names.help)->check(CLI::IsMember(choices));
    s->from_flag = [s, target] { *target = s->string_value; };
  }
  return s->option;
}

CLI::Option* DaemonSettings::AddInt(Names names, int* target) {
  Setting* s = Add(std::move(names), [target](const json& v, const std::string& key) {
    if (!v.is_number_integer()) return Status::InvalidArgument(key + ": expected an integer");
    *target = v.get<int>();
    return Status::Ok();
  });
  if (app_ && !s->names.flag.empty()) {
    s->option = app_->add_option(s->names.flag, s->int_value, s->names.help);
    s->from_flag = [s, target] { *target = s->int_value; };
  }
  return s->option;
}

CLI::Option* DaemonSettings::AddBool(Names names, bool* target) {
  Setting* s = Add(std::move(names), [target](const json& v, const std::string& key) {
    if (!v.is_boolean()) return Status::InvalidArgument(key + ": expected true or false");
    *target = v.get<bool>();
    return Status::Ok();
  });
  if (app_ && !s->names.flag.empty()) {
    s->option = app_->add_flag(s->names.flag, s->bool_value, s->names.help);
    s->from_flag = [s, target] { *target = s->bool_value; };
  }
  return s->option;
}

CLI::Option* DaemonSettings::AddSeconds(Names names, std::chrono::milliseconds* target) {
  // Durations are written in seconds (floats allowed), as every other duration users type.
  Setting* s = Add(std::move(names), [target](const json& v, const std::string& key) {
    if (!v.is_number()) return Status::InvalidArgument(key + ": expected a number of seconds");
    double secs = v.get<double>();
    if (!(secs > 0)) return Status::InvalidArgument(key + ": must be > 0 seconds");
    *target = SecondsToMillis(secs);
    return Status::Ok();
  });
  if (app_ && !s->names.flag.empty()) {
    s->option = app_->add_option(s->names.flag, s->seconds_value, s->names.help)->check(CLI::PositiveNumber);
    s->from_flag = [s, target] { *target = SecondsToMillis(s->seconds_value); };
  }
  return s->option;
}

DaemonSettings::Setting* DaemonSettings::FindByKey(const std::string& key) {
  for (auto& s : settings_) {
    if (!s->names.key.empty() && s->names.key == key) return s.get();
  }
  return nullptr;
}

Status DaemonSettings::ApplyFile(const std::string& path) {
  EFT_ASSIGN_OR_RETURN(json doc, LoadYamlOrJsonFile(path));
  if (doc.is_null()) return Status::Ok();
  if (!doc.is_object()) return Status::InvalidArgument(path + ": expected a mapping of settings");
  for (const auto& [key, value] : doc.items()) {
    Setting* s = FindByKey(NormalizeKey(key));
    if (s == nullptr) {
      std::vector<std::string> keys;
      for (const auto& known : settings_) {
        if (!known->names.key.empty()) keys.push_back(known->names.key);
      }
      std::sort(keys.begin(), keys.end());
      std::string known;
      for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k;
      return Status::InvalidArgument(path + ": unknown setting '" + key + "' (known: " + known + ")");
    }
    if (value.is_null()) continue;  // `key:` alone: the default stays
    EFT_RETURN_IF_ERROR(s->from_file(value, key).WithContext(path));
    s->set_by_file = true;
  }
  return Status::Ok();
}

Status DaemonSettings::Apply() {
  if (!config_path_.empty()) EFT_RETURN_IF_ERROR(ApplyFile(config_path_));
  for (auto& s : settings_) {
    if (s->option != nullptr && s->option->count() > 0) s->from_flag();
  }
  for (auto& s : settings_) {
    if (!s->names.required || s->set_by_file || (s->option != nullptr && s->option->count() > 0)) continue;
    std::string name = s->option != nullptr ? s->option->get_name() : s->names.key;
    return Status::InvalidArgument(name + " is required" +
                                   (s->names.key.empty() ? "" : " (or `" + s->names.key + ":` in --config)"));
  }
  return Status::Ok();
}

}  // namespace eft
