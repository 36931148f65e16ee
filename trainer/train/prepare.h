// `eft-train prepare --config job.yaml`: tokenizes the job's data into the token cache (as a
// training run would, so the run then starts at once) and prints what the data holds: examples,
// tokens and the trained share, truncated / dropped / skipped counts, packing efficiency, steps per
// epoch. A progress bar on stderr when it is a terminal, progress lines otherwise.
#pragma once

#include "trainer/train/train_config.h"

namespace eft::trainer {

// Returns the process exit code: 0, 2 for bad configuration or data, 1 otherwise.
int RunPrepare(const TrainConfig& config);

}  // namespace eft::trainer
