// eft-controller's --config YAML file (controller/config.h, read by common/daemon_settings.h): every
// key, type and range check, then the derived defaults and the listening rules of docs/auth.md.
#include "common/daemon_settings.h"
#include "controller/config.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  static eft::fuzz::MemFile file;
  const std::string& path = file.Write(std::string_view(reinterpret_cast<const char*>(data), size));
  eft::controller::ControllerConfig config;
  const eft::Status loaded = eft::controller::LoadControllerConfig(path, &config);
  if (!loaded.ok()) {
    FUZZ_CHECK(!loaded.message().empty(), "a refusal without a message");
    return 0;
  }
  if (!eft::controller::FinalizeControllerConfig(&config).ok()) return 0;
  (void)eft::controller::CheckListenSecurity(config, "127.0.0.1:8080");
  (void)eft::controller::CheckListenSecurity(config, "");
  return 0;
}
