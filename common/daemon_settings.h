// DaemonSettings: how eft-controller and eft-worker take their settings, the one way for both.
//
// Each setting has a default (whatever its target holds before Apply), may have a key in the
// optional --config YAML file and may have a command-line flag. A flag given on the command line
// wins over the file, the file over the default. The file is one mapping of key: value:
//  - a key that names no setting is an error naming it and listing the known keys, so a typo
//    never silently falls back to a default;
//  - a value of the wrong type is an error naming the key ("heartbeat_timeout_s: expected a
//    number of seconds"); every file error is prefixed with the file's path;
//  - `key:` without a value (null) leaves the default, like a commented-out line;
//  - keys may be written with '_' or '-' (work_dir or work-dir).
// Flags are CLI11 options (help and checks as usual); their values meet the same rules (seconds
// > 0, one of the choices) through CLI11 checks, so a bad flag fails the parse with exit code 2.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace eft {

class DaemonSettings {
 public:
  // Where a setting comes from: `key` in the file ("" = flag only) and `flag` on the command line
  // ("--name", "" = file only; CLI11 name syntax such as "-o,--output" works), with the flag's help.
  struct Names {
    std::string key;
    std::string flag;
    std::string help;
    bool required = false;  // the flag or the file must give it: "--flag is required"
  };

  // `app` gets --config FILE (an existing file) described by `config_help`; flags go on `app`.
  // Without an app (nullptr) only ApplyFile works: for reading a file on its own (tests, tools).
  DaemonSettings(CLI::App* app, const std::string& config_help);
  ~DaemonSettings();
  DaemonSettings(const DaemonSettings&) = delete;
  DaemonSettings& operator=(const DaemonSettings&) = delete;

  // The returned flag option (nullptr without a flag or an app) takes further CLI11 checks.
  CLI::Option* AddString(Names names, std::string* target);
  // A string that must be one of `choices`.
  CLI::Option* AddChoice(Names names, std::vector<std::string> choices, std::string* target);
  CLI::Option* AddInt(Names names, int* target);
  // A switch: `--flag` sets it; the file says true or false.
  CLI::Option* AddBool(Names names, bool* target);
  // Seconds (fractions allowed), > 0, kept as milliseconds (rounded).
  CLI::Option* AddSeconds(Names names, std::chrono::milliseconds* target);

  // After the app parsed the command line: the --config file's values (if one was given), then the
  // flags that were given, then the `required` check.
  Status Apply();
  // Only the values of the file at `path`, onto the targets.
  Status ApplyFile(const std::string& path);

  // The --config path given ("" when none).
  const std::string& config_path() const { return config_path_; }

 private:
  struct Setting;
  using FileReader = std::function<Status(const nlohmann::json& value, const std::string& key)>;
  Setting* Add(Names names, FileReader from_file);
  Setting* FindByKey(const std::string& key);

  CLI::App* app_;
  std::string config_path_;
  std::vector<std::unique_ptr<Setting>> settings_;
};

}  // namespace eft
