#include "trainer/runtime/debug_hooks.h"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "common/logging.h"

namespace eft::trainer {

void StallIfAsked(const char* phase) {
  const char* phases = std::getenv("EFT_DEBUG_STALL");
  if (phases == nullptr) return;
  std::stringstream list(phases);
  for (std::string p; std::getline(list, p, ',');) {
    if (p != phase) continue;
    const char* seconds = std::getenv("EFT_DEBUG_STALL_SECONDS");
    const double s = seconds ? std::atof(seconds) : 30.0;
    static std::mutex mu;
    static std::set<std::string> logged;
    if (std::lock_guard<std::mutex> lock(mu); logged.insert(p).second) {
      EFT_LOG(INFO) << "EFT_DEBUG_STALL: holding in phase " << phase << " for " << s << " s";
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
    return;
  }
}

}  // namespace eft::trainer
