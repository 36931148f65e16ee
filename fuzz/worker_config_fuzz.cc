// eft-worker's settings (worker/worker_config.h, AddWorkerSettings, read by common/daemon_settings.h):
// the --config worker.yaml file, and the same bytes as a command line (one argument a line), the
// two ways main.cc takes them. FinalizeWorkerConfig is left out: it resolves host names and runs
// nvidia-smi, which a fuzzer must not wait on.
#include <CLI/CLI.hpp>

#include <vector>

#include "common/daemon_settings.h"
#include "fuzz/fuzz_target.h"
#include "worker/worker_config.h"

namespace {

void CheckAccepted(const eft::worker::WorkerSettings& s, const std::string& input) {
  static const char* const kLevels[] = {"", "debug", "info", "warning", "warn", "error"};
  bool known = false;
  for (const char* level : kLevels) known = known || s.log_level == level;
  FUZZ_CHECK(known, "log_level '" + s.log_level + "' taken: " + input);
}

void ApplyFile(const std::string& input) {
  static eft::fuzz::MemFile file;
  const std::string& path = file.Write(input);
  eft::worker::WorkerSettings settings;
  eft::DaemonSettings daemon(nullptr, "");
  eft::worker::AddWorkerSettings(&daemon, &settings);
  const eft::Status loaded = daemon.ApplyFile(path);
  if (!loaded.ok()) {
    FUZZ_CHECK(!loaded.message().empty(), "a refusal without a message");
    return;
  }
  CheckAccepted(settings, input);
}

void ApplyFlags(const std::string& input) {
  std::vector<std::string> args = {"eft-worker"};
  for (size_t begin = 0; begin <= input.size() && args.size() < 64;) {
    size_t end = input.find('\n', begin);
    if (end == std::string::npos) end = input.size();
    std::string arg = input.substr(begin, end - begin);
    // --config would read whatever file the input names (/dev/zero never ends): only the file above.
    if (arg.find("config") == std::string::npos) args.push_back(std::move(arg));
    begin = end + 1;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  CLI::App app{"eft-worker"};
  eft::worker::WorkerSettings settings;
  eft::DaemonSettings daemon(&app, "worker.yaml");
  eft::worker::AddWorkerSettings(&daemon, &settings);
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return;  // what main.cc reports with exit code 2 (or 0 for --help)
  }
  const eft::Status applied = daemon.Apply();
  if (!applied.ok()) {
    FUZZ_CHECK(!applied.message().empty(), "a refusal without a message");
    return;
  }
  CheckAccepted(settings, input);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string input = eft::fuzz::AsString(data, size);
  ApplyFile(input);
  ApplyFlags(input);
  return 0;
}
