// eftctl: the operator CLI. `eftctl [--controller HOST:PORT] [-o table|json|yaml] <noun> <verb>`.
// Exit codes: 0 success, 1 error (the controller said no, or it is unreachable), 2 usage.
// This file only maps the command line onto the commands of cli/commands.h.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "cli/client.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace eft;
  using namespace eft::cli;
  GlobalOptions g;
  CLI::App app{"eftctl: submit and watch elastic-ft jobs, manage nodes"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the subcommands, as kubectl allows
  app.add_option("--controller", g.controller, "controller HOST:PORT (default: $EFT_CONTROLLER, ~/.config/eft/config.yaml, 127.0.0.1:7070)");
  app.add_option("-o,--output", g.output, "table|json|yaml")->check(CLI::IsMember({"table", "json", "yaml"}));
  app.add_option("--timeout", g.timeout_s, "seconds to wait for the controller (default 10)");
  app.add_option("--token", g.token, "bearer token (default: $EFT_TOKEN, `token:` in ~/.config/eft/config.yaml)");
  app.add_flag("--tls", g.tls, "TLS to the controller, trusting the system's CAs (default: `tls: true` in the config file)");
  app.add_option("--tls-ca", g.tls_ca, "PEM CA for the controller's certificate; implies --tls (default: $EFT_TLS_CA, `tls_ca:`)");

  auto* job = app.add_subcommand("job", "jobs")->require_subcommand(1);
  std::string file, request_id, id, state_filter;
  bool follow = false, no_progress = false;
  const char* no_progress_help =
      "no live status block or bounded progress lines: one line per change the controller sends (logs: the logs only)";
  int rank = -1, attempt = 0;
  auto* submit = job->add_subcommand("submit", "submit a job spec (YAML or JSON)");
  submit->add_option("-f,--file", file, "job spec file ('-' for stdin)")->required();
  submit->add_option("--request-id", request_id, "idempotency key: resubmitting with it returns the same job");
  submit->add_flag("--follow", follow,
                   "show the job until it ends (a live status block on a terminal, else a line per state change, "
                   "event and 10% of steps); exit 0 only if it succeeded");
  submit->add_flag("--no-progress", no_progress, no_progress_help);
  auto* list = job->add_subcommand("list", "list jobs, newest first");
  list->add_option("--state", state_filter, "only jobs in this state (e.g. RUNNING)");
  auto* get = job->add_subcommand("get", "one job");
  get->add_option("ID", id)->required();
  auto* describe = job->add_subcommand("describe", "one job in detail: attempts, checkpoints, events");
  describe->add_option("ID", id)->required();
  auto* logs = job->add_subcommand("logs", "rank logs");
  logs->add_option("ID", id)->required();
  logs->add_flag("-f,--follow", follow, "keep streaming until the job ends");
  logs->add_option("--rank", rank, "only this rank");
  logs->add_option("--attempt", attempt, "only this attempt");
  logs->add_flag("--no-progress", no_progress, no_progress_help);
  auto* cancel = job->add_subcommand("cancel", "cancel a job (its ranks get SIGTERM, then SIGKILL)");
  cancel->add_option("ID", id)->required();
  std::string plot_out;
  auto* plot = job->add_subcommand("plot", "the job's train and eval loss over the steps as an SVG picture");
  plot->add_option("ID", id)->required();
  plot->add_option("--out", plot_out, "the SVG file to write ('-': stdout)")->required();
  auto* watch = job->add_subcommand("watch", "stream a job's progress until it ends");
  watch->add_option("ID", id)->required();
  watch->add_flag("--no-progress", no_progress, no_progress_help);

  auto* node = app.add_subcommand("node", "nodes")->require_subcommand(1);
  std::string name;
  auto* node_list = node->add_subcommand("list", "list nodes");
  bool evict = false;
  auto* drain = node->add_subcommand("drain", "take no new ranks on a node");
  drain->add_option("NAME", name)->required();
  drain->add_flag("--evict", evict,
                  "also stop the ranks running there with a checkpoint; their jobs continue on their other nodes");
  auto* undrain = node->add_subcommand("undrain", "accept new ranks again");
  undrain->add_option("NAME", name)->required();

  auto* checkpoint = app.add_subcommand("checkpoint", "checkpoints")->require_subcommand(1);
  auto* ck_list = checkpoint->add_subcommand("list", "checkpoints of a job");
  ck_list->add_option("JOB", id)->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  Result<ClientTls> tls = ResolveGlobalOptions(&g);
  if (!tls.ok()) {
    std::fprintf(stderr, "eftctl: %s\n", tls.status().message().c_str());
    return 2;
  }
  ControllerClient c(g, *tls);

  if (*submit) return SubmitJob(c, file, request_id, follow, !no_progress);
  if (*list) return ListJobs(c, state_filter);
  if (*get) return ShowJob(c, id, JobView::kRow);
  if (*describe) return ShowJob(c, id, JobView::kDescription);
  if (*ck_list) return ShowJob(c, id, JobView::kCheckpoints);
  if (*cancel) return CancelJob(c, id);
  if (*plot) return PlotJob(c, id, plot_out);
  if (*watch) return WatchJob(c, id, !no_progress);
  if (*logs) return JobLogs(c, id, follow, rank, attempt, !no_progress);
  if (*node_list) return ListNodes(c);
  if (*drain || *undrain) return SetNodeDrained(c, name, /*drained=*/static_cast<bool>(*drain), evict);
  return 2;
}
