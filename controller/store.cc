// Store: the schema and its migrations; opening the database at the current version. The tables'
// reads and writes are in store_records.cc.
#include "controller/store.h"

#include <array>
#include <utility>

namespace eft::controller {
namespace {

// Migration i (0-based) takes the schema from user_version i to i + 1. Scripts are append-only:
// a released script is never edited, a change is a new entry (and kSchemaVersion + 1). Columns are
// NOT NULL with defaults so a row written by an older script still loads after a newer one adds
// columns.
constexpr std::array<const char*, Store::kSchemaVersion> kMigrations = {
    // 1: the initial schema. Job ids are AUTOINCREMENT so an id is never handed out twice, even
    // after the newest job's row is deleted: an id in a log or a client's hand keeps meaning one job.
    R"sql(
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  request_id TEXT NOT NULL DEFAULT '', spec TEXT NOT NULL, state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  create_ms INTEGER NOT NULL DEFAULT 0, start_ms INTEGER NOT NULL DEFAULT 0, end_ms INTEGER NOT NULL DEFAULT 0,
  attempt INTEGER NOT NULL DEFAULT 0, restarts INTEGER NOT NULL DEFAULT 0,
  not_before_ms INTEGER NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX jobs_request_id ON jobs (request_id) WHERE request_id != '';

CREATE TABLE attempts (
  job_id INTEGER NOT NULL REFERENCES jobs (id), number INTEGER NOT NULL,
  world_size INTEGER NOT NULL DEFAULT 0, ranks_per_node INTEGER NOT NULL DEFAULT 0,
  nodes TEXT NOT NULL DEFAULT '[]',  -- JSON array of node names in rank order
  slots TEXT NOT NULL DEFAULT '[]',  -- JSON array per node: the slot of each local rank
  master_addr TEXT NOT NULL DEFAULT '', master_port INTEGER NOT NULL DEFAULT 0,
  resume_from TEXT NOT NULL DEFAULT '',
  start_ms INTEGER NOT NULL DEFAULT 0, end_ms INTEGER NOT NULL DEFAULT 0, end_reason TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, number));
CREATE INDEX attempts_unfinished ON attempts (job_id, number) WHERE end_ms = 0;

CREATE TABLE nodes (
  name TEXT PRIMARY KEY NOT NULL, address TEXT NOT NULL DEFAULT '', slots INTEGER NOT NULL DEFAULT 0,
  drained INTEGER NOT NULL DEFAULT 0, version TEXT NOT NULL DEFAULT '',
  registered_ms INTEGER NOT NULL DEFAULT 0, lost INTEGER NOT NULL DEFAULT 0,
  state_reason TEXT NOT NULL DEFAULT '');

CREATE TABLE checkpoints (
  id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs (id), step INTEGER NOT NULL,
  kind TEXT NOT NULL DEFAULT '', path TEXT NOT NULL, bytes INTEGER NOT NULL DEFAULT 0,
  attempt INTEGER NOT NULL DEFAULT 0, time_ms INTEGER NOT NULL DEFAULT 0,
  UNIQUE (job_id, path));
CREATE INDEX checkpoints_job_step ON checkpoints (job_id, step, time_ms);

CREATE TABLE events (
  id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs (id), time_ms INTEGER NOT NULL DEFAULT 0,
  type TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '');
CREATE INDEX events_job ON events (job_id, id);

CREATE TABLE counters (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
)sql",
    // 2: the submitting user (authentication, docs/auth.md); '' for jobs from before, or without auth.
    R"sql(
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
)sql",
    // 3: what a controller restart must not forget (docs/architecture.md, "Controller restart"): the
    // highest step each attempt reached (its resume step until it reports one; 0 in rows from before,
    // which means "not known"), and the nodes held for waiting jobs of higher priority.
    R"sql(
ALTER TABLE attempts ADD COLUMN reached_step INTEGER NOT NULL DEFAULT 0;
CREATE TABLE reservations (
  node TEXT PRIMARY KEY NOT NULL, job_id INTEGER NOT NULL REFERENCES jobs (id)) WITHOUT ROWID;
)sql",
    // 4: each job's loss curves (train, eval) for describe, REST and `eftctl job plot`
    // (docs/architecture.md, "Loss history"): at most loss_history.h's cap of rows per curve.
    R"sql(
CREATE TABLE loss_points (
  job_id INTEGER NOT NULL REFERENCES jobs (id), curve INTEGER NOT NULL, idx INTEGER NOT NULL,
  step INTEGER NOT NULL, value REAL NOT NULL, samples INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY (job_id, curve, idx)) WITHOUT ROWID;
)sql",
    // 5: data.eval became a list of named sets (proto/eft/v1/spec.proto, EvalSet): a stored spec's
    // one path becomes a set named "eval", its "" (no eval file) an empty list, so every stored spec
    // still parses as an eft.v1.JobSpec.
    R"sql(
UPDATE jobs SET spec = json_set(spec, '$.data.eval',
  CASE WHEN json_extract(spec, '$.data.eval') = '' THEN json('[]')
       ELSE json_array(json_object('name', 'eval', 'path', json_extract(spec, '$.data.eval'))) END)
WHERE json_type(spec, '$.data.eval') = 'text';
)sql",
    // 6: how an attempt ended as a kind (eft.v1.AttemptEnd, stored by name as jobs.state is), which
    // decisions read instead of the words of end_reason. Rows from before get the kind their
    // reason's words, as the controller of schema 5 wrote them, stand for; this is the only place
    // that reads them.
    R"sql(
ALTER TABLE attempts ADD COLUMN end_kind TEXT NOT NULL DEFAULT 'ATTEMPT_END_UNSPECIFIED';
UPDATE attempts SET end_kind = CASE
  WHEN end_reason LIKE 'resized: %' THEN 'ATTEMPT_END_RESIZED'
  WHEN end_reason LIKE 'preempted: %' THEN 'ATTEMPT_END_PREEMPTED'
  WHEN end_reason LIKE 'cancelled by user%' THEN 'ATTEMPT_END_CANCELLED'
  WHEN end_reason LIKE 'all % ranks exited 0%' THEN 'ATTEMPT_END_SUCCEEDED'
  WHEN end_reason LIKE 'node % lost (%' THEN 'ATTEMPT_END_NODE_LOST'
  WHEN end_reason LIKE 'rank % vanished (%' THEN 'ATTEMPT_END_RANK_LOST'
  WHEN end_reason LIKE 'rank % exited with code 78 (out of memory)%' THEN 'ATTEMPT_END_OUT_OF_MEMORY'
  WHEN end_reason LIKE 'rank % stopped after saving a checkpoint (exit %' THEN 'ATTEMPT_END_STOPPED'
  WHEN end_reason LIKE 'rank % (rendezvous port % busy on node %' THEN 'ATTEMPT_END_PORT_BUSY'
  ELSE 'ATTEMPT_END_RANK_FAILED' END
WHERE end_ms != 0;
)sql",
    // 7: where rank traffic goes (docs/architecture.md, "Rank traffic and the node's address"): each
    // node's numeric data address and network stack, so that an attempt placed right after a
    // controller restart, before its nodes re-register, still gets them. '' in rows from before:
    // the node's address is used, and whether nodes share loopback is not known.
    R"sql(
ALTER TABLE nodes ADD COLUMN data_address TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN network_stack TEXT NOT NULL DEFAULT '';
)sql",
    // 8: the step an attempt resumed from (0: a fresh start), so each attempt's steps lost can be
    // shown after its reached_step has moved on (docs/checkpoints.md, "Memory snapshots"). -1 in rows
    // from before: not known.
    R"sql(
ALTER TABLE attempts ADD COLUMN resume_step INTEGER NOT NULL DEFAULT -1;
)sql",
    // 9: the MLflow run each job is logged to (docs/tracking.md, "MLflow"): a row from the submit of a
    // job whose spec.tracking names a server, so a restarted controller continues that run, ends the
    // runs of jobs that ended while the server was down, and never makes a second one. run_key is
    // the run's eft.run_key tag: it finds a run made just before a crash whose id was not stored yet.
    R"sql(
CREATE TABLE mlflow_runs (
  job_id INTEGER PRIMARY KEY NOT NULL REFERENCES jobs (id),
  run_key TEXT NOT NULL DEFAULT '', experiment_id TEXT NOT NULL DEFAULT '', run_id TEXT NOT NULL DEFAULT '',
  ended INTEGER NOT NULL DEFAULT 0);
CREATE INDEX mlflow_runs_open ON mlflow_runs (job_id) WHERE ended = 0;
)sql",
};

}  // namespace

Store::Store(std::unique_ptr<Database> db) : db_(std::move(db)) {}

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  EFT_ASSIGN_OR_RETURN(auto db, Database::Open(path, std::vector<const char*>(kMigrations.begin(), kMigrations.end())));
  return std::unique_ptr<Store>(new Store(std::move(db)));
}

}  // namespace eft::controller
