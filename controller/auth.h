// Authentication and authorization of the controller's callers (docs/auth.md).
//
// Users present a bearer token ("authorization: Bearer <token>" as gRPC metadata or HTTP header).
// The tokens file maps tokens to (user, role); workers present the separate join token. Only
// SHA-256 digests of tokens are kept in memory, and a presented token is compared against every
// entry in constant time, so neither the file (when it stores token_sha256) nor the timing of a
// refusal gives tokens away.
//
// Roles: viewer (read jobs, logs, nodes), submitter (viewer + submit, cancel own jobs), admin
// (everything: cancel any job, drain/undrain nodes). The join token is only good for AgentService,
// and user tokens are never good for AgentService.
//
// No gRPC, HTTP or SQLite here: the servers extract the header and call Authenticate/Authorize.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace eft::controller {

enum class Role { kViewer = 0, kSubmitter = 1, kAdmin = 2 };
const char* RoleName(Role role);
// "viewer" | "submitter" | "admin" (case-insensitive).
std::optional<Role> ParseRole(const std::string& name);

// Who is calling. `worker` is the join token's holder (role and user do not apply).
struct Principal {
  std::string user;
  Role role = Role::kViewer;
  bool worker = false;
  bool anonymous = false;  // auth is not configured: everything is allowed
};

// What a call wants to do.
enum class Action {
  kReadJobs,   // GetJob, ListJobs, WatchJob
  kReadLogs,   // GetLogs
  kSubmitJob,
  kCancelJob,  // needs the job's owner
  kReadNodes,  // ListNodes
  kDrainNode,  // DrainNode, UndrainNode
  kAgent,      // AgentService: Register, Heartbeat, PushLogs
  kMetrics,    // GET /metrics
};
const char* ActionName(Action action);

using Sha256Digest = std::array<unsigned char, 32>;
Sha256Digest Sha256(const std::string& data);
std::string ToHex(const Sha256Digest& digest);

struct TokenEntry {
  Sha256Digest digest;
  std::string user;
  Role role = Role::kViewer;
};

// Parses a tokens file (YAML or JSON): a list of {token | token_sha256, user, role}, or a mapping
// with such a list under `tokens`. Errors name the entry and field.
Result<std::vector<TokenEntry>> ParseTokensFile(const std::string& path);
Result<std::vector<TokenEntry>> ParseTokens(const std::string& text, const std::string& origin);
// The join token file: the token on its first non-empty line (surrounding whitespace ignored).
// At least 16 characters.
Result<Sha256Digest> ReadJoinTokenFile(const std::string& path);

// "Bearer <token>" -> "<token>"; "" when the header is absent or of another scheme.
std::string BearerToken(const std::string& authorization_header);

// The policy: may `who` do `action` (on a job owned by `job_owner`, for kCancelJob)?
// PERMISSION_DENIED with a message that says who may not do what ("role viewer may not cancel jobs").
Status Authorize(const Principal& who, Action action, const std::string& job_owner = "");
// Submitting a job of `priority` above `max_submitter_priority` (the controller's setting) takes an
// admin: PERMISSION_DENIED naming the limit otherwise. Anonymous callers are admins.
Status AuthorizePriority(const Principal& who, int64_t priority, int64_t max_submitter_priority);

class Authenticator {
 public:
  // Both files are required for auth to be enabled; see docs/auth.md.
  static Result<std::unique_ptr<Authenticator>> Load(const std::string& tokens_file, const std::string& join_token_file);
  // For tests.
  Authenticator(std::vector<TokenEntry> users, std::optional<Sha256Digest> join);

  // Re-reads both files; on error keeps the old ones and returns the error.
  Status Reload() EXCLUDES(mu_);

  // From the raw Authorization header value. UNAUTHENTICATED when absent or unknown.
  Result<Principal> Authenticate(const std::string& authorization_header) const EXCLUDES(mu_);
  // Authenticate + Authorize; `action` kAgent takes only the join token, the others only user tokens.
  Result<Principal> Check(const std::string& authorization_header, Action action,
                          const std::string& job_owner = "") const EXCLUDES(mu_);
  size_t user_count() const EXCLUDES(mu_);

 private:
  // Set by Load before the Authenticator is shared, read-only after.
  std::string tokens_file_, join_token_file_;
  // Reload swaps both at once; a check copies them out and compares without the lock.
  mutable Mutex mu_;
  std::shared_ptr<const std::vector<TokenEntry>> users_ GUARDED_BY(mu_);
  std::optional<Sha256Digest> join_ GUARDED_BY(mu_);
};

}  // namespace eft::controller
