// eft-controller as a program: what it serves besides the state machine's own settings, and
// RunController, which builds the services (SQLite state, gRPC, REST, /metrics), serves until
// SIGTERM or SIGINT, and shuts down. controller/main.cc only parses the settings into a
// ControllerServerConfig and calls it.
#pragma once

#include <string>

#include "common/http/http_server.h"
#include "controller/config.h"

namespace eft {
class DaemonSettings;
}

namespace eft::controller {

struct ControllerServerConfig {
  ControllerConfig controller;
  // The REST API and /metrics on HOST:PORT (controller/http/); empty: no HTTP.
  std::string http_address;
  // The HTTP server's tunables with their defaults (threads, read_timeout are flags); RunController
  // fills in the address, TLS files and hooks.
  ::eft::http::HttpServerConfig http;
  // Keep running on SIGTERM, stop on SIGINT only (batch systems signal a whole allocation at once;
  // slurm/eft-cluster.sbatch records a cancellation before it stops the controller).
  bool ignore_sigterm = false;
  std::string log_level;  // debug|info|warning|error; "": the default (info)
};

// Registers every setting of *config with `settings`: ControllerConfig's (AddControllerSettings)
// and the flags of the program itself (--http*, --ignore-sigterm, --log-level).
void AddControllerServerSettings(DaemonSettings* settings, ControllerServerConfig* config);

// Serves until SIGTERM/SIGINT (SIGHUP reloads the tokens when authentication is on). Returns the
// process exit code: 0 after a shutdown signal, 2 when the configuration is refused (the listening
// rules of docs/auth.md, the tokens files, the TLS files), 1 when a service cannot start.
// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread before any thread starts.
int RunController(const ControllerServerConfig& config);

}  // namespace eft::controller
