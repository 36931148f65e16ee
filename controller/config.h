// ControllerConfig: every tunable of eft-controller in one place, with its default.
// Loaded from the optional --config YAML file (keys as the field names below); flags override it.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace eft::controller {

struct ControllerConfig {
  std::string listen = "0.0.0.0:7070";  // gRPC
  std::string db_path = "eft-controller.db";
  // Logs and default checkpoint dirs live here; default: "<db_path>.d".
  std::string data_dir;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{3000};
  // How often timeouts, backoffs and scheduling are re-evaluated between RPCs.
  std::chrono::milliseconds tick_interval{100};
  // MASTER_PORT of attempt k is port_base + (k-th attempt overall % port_count): a fresh port per
  // attempt, so a restarted rendezvous never meets the previous attempt's TIME_WAIT sockets.
  int master_port_base = 29500;
  int master_port_count = 2000;
  // Restart backoff after the n-th counted failure: min(initial * 2^(n-1), max).
  std::chrono::milliseconds restart_backoff_initial{1000};
  std::chrono::milliseconds restart_backoff_max{30000};
  // After ranks were told to stop, how long past their grace period the controller waits for their
  // workers to report them gone before it gives up on them (their slots stay busy until then).
  std::chrono::milliseconds stop_report_slack{5000};
  // Where eft-train is found when a job has no `command` (a name is looked up in the worker's PATH).
  std::string trainer_program = "eft-train";
};

// Reads a YAML file of overrides onto *config. Unknown keys are errors naming the key.
Status LoadControllerConfig(const std::string& path, ControllerConfig* config);
// Fills derived defaults (data_dir) and checks ranges.
Status FinalizeControllerConfig(ControllerConfig* config);

}  // namespace eft::controller
