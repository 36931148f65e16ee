// Test hooks that hold a rank inside one phase of its life, so tests can stop it (SIGTERM) right
// there and check that it answers in bounded time: EFT_DEBUG_STALL=tokenize,load,... names the
// phases, EFT_DEBUG_STALL_SECONDS how long each stall lasts (default 30). Unset: no effect. The
// phases: "tokenize" (data preparation), "load" (model weights), "save" (writing the final full
// checkpoint, after its files are written and before it is committed), "sharded_write" (the
// background writer of a sharded save, before it writes: a slow disk), "step" (after every step: a
// slow trainer, for tests whose job must outlast a timer of the controller's). Each phase is logged
// the first time it stalls.
#pragma once

namespace eft::trainer {

void StallIfAsked(const char* phase);

}  // namespace eft::trainer
