// DebugHooks (trainer/runtime/debug_hooks.h): which phase stalls, for how long, and at which step the
// rank dies, read from an environment given as a map (no variable of this process is set) and seen
// through recorded actions instead of sleeps and SIGKILL.
#include "trainer/runtime/debug_hooks.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

namespace eft::trainer {
namespace {

// The actions of hooks under test: what they would have slept and how often they would have killed.
struct Recorded {
  std::vector<double> sleeps;
  int kills = 0;
  DebugHooks::Actions Actions() {
    return {[this](double seconds) { sleeps.push_back(seconds); }, [this] { ++kills; }};
  }
};

const char* const kPhases[] = {"tokenize", "load", "save", "sharded_write", "commit", "step"};

TEST(DebugHooks, StallsOnlyInTheNamedPhasesForTheGivenSeconds) {
  const std::map<std::string, std::string> env{{"EFT_DEBUG_STALL", "load,step"}, {"EFT_DEBUG_STALL_SECONDS", "2.5"}};
  Recorded r;
  const DebugHooks hooks = DebugHooks::FromEnvironment(&env, r.Actions());
  for (const char* phase : kPhases) hooks.StallIfAsked(phase);
  EXPECT_EQ(r.sleeps, (std::vector<double>{2.5, 2.5}));  // load, then step
  hooks.StallIfAsked("step");  // every time the phase comes round, not only the first
  EXPECT_EQ(r.sleeps.size(), 3u);
  EXPECT_EQ(r.kills, 0);
  for (int64_t step = 0; step < 100; ++step) EXPECT_FALSE(hooks.KillDue(step));
}

TEST(DebugHooks, AStallLastsThirtySecondsUnlessTold) {
  const std::map<std::string, std::string> env{{"EFT_DEBUG_STALL", "sharded_write"}};
  Recorded r;
  const DebugHooks hooks = DebugHooks::FromEnvironment(&env, r.Actions());
  // The sharded writer stalls on a thread of its own.
  std::thread writer([&] { hooks.StallIfAsked("sharded_write"); });
  writer.join();
  EXPECT_EQ(r.sleeps, std::vector<double>{30.0});
}

TEST(DebugHooks, KillsOnlyAtTheGivenStep) {
  const std::map<std::string, std::string> env{{"EFT_DEBUG_KILL_AT_STEP", "7"}};
  Recorded r;
  const DebugHooks hooks = DebugHooks::FromEnvironment(&env, r.Actions());
  for (int64_t step = 0; step < 20; ++step) EXPECT_EQ(hooks.KillDue(step), step == 7) << step;
  hooks.Kill();
  EXPECT_EQ(r.kills, 1);
  for (const char* phase : kPhases) hooks.StallIfAsked(phase);
  EXPECT_TRUE(r.sleeps.empty());
}

TEST(DebugHooks, NoVariablesAndNoneDoNothing) {
  const std::map<std::string, std::string> empty;
  Recorded r;
  const DebugHooks from_nothing = DebugHooks::FromEnvironment(&empty, r.Actions());
  for (const DebugHooks* hooks : {&from_nothing, DebugHooks::None()}) {
    for (const char* phase : kPhases) hooks->StallIfAsked(phase);
    for (int64_t step = -1; step < 20; ++step) EXPECT_FALSE(hooks->KillDue(step));
  }
  EXPECT_TRUE(r.sleeps.empty());
}

TEST(DebugHooks, ValuesAreReadAsTheyAlwaysWere) {
  // atof and atoll: an empty or unparsable number is 0, a stall of nothing and a step never reached.
  const std::map<std::string, std::string> env{
      {"EFT_DEBUG_STALL", "step,"}, {"EFT_DEBUG_STALL_SECONDS", ""}, {"EFT_DEBUG_KILL_AT_STEP", "soon"}};
  Recorded r;
  const DebugHooks hooks = DebugHooks::FromEnvironment(&env, r.Actions());
  hooks.StallIfAsked("step");
  EXPECT_EQ(r.sleeps, std::vector<double>{0.0});
  for (int64_t step = 0; step < 20; ++step) EXPECT_FALSE(hooks.KillDue(step));
}

}  // namespace
}  // namespace eft::trainer
