#include "trainer/runtime/debug_hooks.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "common/logging.h"

namespace eft::trainer {

DebugHooks::DebugHooks(std::set<std::string> stall_phases, double stall_seconds, int64_t kill_at_step,
                       Actions actions)
    : stall_phases_(std::move(stall_phases)),
      stall_seconds_(stall_seconds),
      kill_at_step_(kill_at_step),
      actions_(std::move(actions)) {}

DebugHooks DebugHooks::FromEnvironment(const std::map<std::string, std::string>* env, Actions actions) {
  auto get = [env](const char* name) -> const char* {
    if (env == nullptr) return std::getenv(name);
    auto it = env->find(name);
    return it == env->end() ? nullptr : it->second.c_str();
  };
  std::set<std::string> phases;
  if (const char* list = get("EFT_DEBUG_STALL")) {
    std::stringstream in(list);
    for (std::string p; std::getline(in, p, ',');) phases.insert(p);
  }
  const char* seconds = get("EFT_DEBUG_STALL_SECONDS");
  const char* kill_at = get("EFT_DEBUG_KILL_AT_STEP");
  return DebugHooks(std::move(phases), seconds ? std::atof(seconds) : 30.0, kill_at ? std::atoll(kill_at) : 0,
                    std::move(actions));
}

const DebugHooks* DebugHooks::None() {
  static const DebugHooks none;
  return &none;
}

void DebugHooks::StallIfAsked(const char* phase) const {
  if (stall_phases_.count(phase) == 0) return;
  {
    MutexLock lock(&mu_);
    if (logged_.insert(phase).second) {
      EFT_LOG(INFO) << "EFT_DEBUG_STALL: holding in phase " << phase << " for " << stall_seconds_ << " s";
    }
  }
  if (actions_.sleep) {
    actions_.sleep(stall_seconds_);
  } else {
    std::this_thread::sleep_for(std::chrono::duration<double>(stall_seconds_));
  }
}

void DebugHooks::Kill() const {
  if (actions_.kill) {
    actions_.kill();
  } else {
    std::raise(SIGKILL);
  }
}

}  // namespace eft::trainer
