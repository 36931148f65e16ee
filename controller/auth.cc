#include "controller/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "common/yaml_json.h"

namespace eft::controller {

namespace {

using nlohmann::json;

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

constexpr size_t kMinTokenLength = 16;

bool ParseHexDigest(const std::string& hex, Sha256Digest* out) {
  if (hex.size() != 64) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < 32; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

Result<std::vector<TokenEntry>> EntriesFromJson(const json& doc, const std::string& origin) {
  const json* list = &doc;
  if (doc.is_object()) {
    if (!doc.contains("tokens") || doc.size() != 1) {
      return Status::InvalidArgument(origin + ": expected a list of {token | token_sha256, user, role}, or `tokens:` with one");
    }
    list = &doc["tokens"];
  }
  if (!list->is_array()) {
    return Status::InvalidArgument(origin + ": expected a list of {token | token_sha256, user, role}");
  }
  std::vector<TokenEntry> out;
  std::set<std::string> digests;
  for (size_t i = 0; i < list->size(); ++i) {
    const json& e = (*list)[i];
    const std::string where = origin + ": tokens[" + std::to_string(i) + "]";
    if (!e.is_object()) return Status::InvalidArgument(where + ": expected a mapping {token | token_sha256, user, role}");
    for (const auto& [key, _] : e.items()) {
      if (key != "token" && key != "token_sha256" && key != "user" && key != "role") {
        return Status::InvalidArgument(where + ": unknown field '" + key + "' (known: token, token_sha256, user, role)");
      }
    }
    TokenEntry entry;
    const bool has_token = e.contains("token"), has_hash = e.contains("token_sha256");
    if (has_token == has_hash) {
      return Status::InvalidArgument(where + ": give exactly one of token (the token itself) or token_sha256 "
                                             "(its SHA-256 in hex: `printf %s TOKEN | sha256sum`)");
    }
    if (has_token) {
      if (!e["token"].is_string()) return Status::InvalidArgument(where + ".token: expected a string");
      std::string token = e["token"].get<std::string>();
      if (token.size() < kMinTokenLength) {
        return Status::InvalidArgument(where + ".token: at least " + std::to_string(kMinTokenLength) +
                                       " characters (e.g. `openssl rand -hex 32`)");
      }
      if (token != Trim(token)) return Status::InvalidArgument(where + ".token: must not start or end with whitespace");
      entry.digest = Sha256(token);
    } else {
      if (!e["token_sha256"].is_string() || !ParseHexDigest(e["token_sha256"].get<std::string>(), &entry.digest)) {
        return Status::InvalidArgument(where + ".token_sha256: expected 64 hex digits (`printf %s TOKEN | sha256sum`)");
      }
    }
    if (!e.contains("user") || !e["user"].is_string() || e["user"].get<std::string>().empty()) {
      return Status::InvalidArgument(where + ".user: expected a non-empty string");
    }
    entry.user = e["user"].get<std::string>();
    if (!e.contains("role") || !e["role"].is_string()) {
      return Status::InvalidArgument(where + ".role: expected admin, submitter or viewer");
    }
    auto role = ParseRole(e["role"].get<std::string>());
    if (!role) {
      return Status::InvalidArgument(where + ".role: '" + e["role"].get<std::string>() +
                                     "' is not a role (admin, submitter or viewer)");
    }
    entry.role = *role;
    if (!digests.insert(ToHex(entry.digest)).second) {
      return Status::InvalidArgument(where + ": the same token is listed twice");
    }
    out.push_back(std::move(entry));
  }
  return out;
}

// Constant time in the token: every entry is compared, with CRYPTO_memcmp.
const TokenEntry* FindDigest(const std::vector<TokenEntry>& entries, const Sha256Digest& d) {
  const TokenEntry* found = nullptr;
  for (const auto& e : entries) {
    if (CRYPTO_memcmp(e.digest.data(), d.data(), d.size()) == 0) found = &e;
  }
  return found;
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kViewer: return "viewer";
    case Role::kSubmitter: return "submitter";
    case Role::kAdmin: return "admin";
  }
  return "?";
}

std::optional<Role> ParseRole(const std::string& name) {
  std::string n = Lower(name);
  if (n == "viewer") return Role::kViewer;
  if (n == "submitter") return Role::kSubmitter;
  if (n == "admin") return Role::kAdmin;
  return std::nullopt;
}

const char* ActionName(Action action) {
  switch (action) {
    case Action::kReadJobs: return "read jobs";
    case Action::kReadLogs: return "read logs";
    case Action::kSubmitJob: return "submit jobs";
    case Action::kCancelJob: return "cancel jobs";
    case Action::kReadNodes: return "read nodes";
    case Action::kDrainNode: return "drain or undrain nodes";
    case Action::kAgent: return "call the worker API (AgentService)";
    case Action::kMetrics: return "read metrics";
  }
  return "?";
}

Sha256Digest Sha256(const std::string& data) {
  Sha256Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d.data());
  return d;
}

std::string ToHex(const Sha256Digest& digest) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : digest) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

Result<std::vector<TokenEntry>> ParseTokens(const std::string& text, const std::string& origin) {
  auto doc = YamlToJson(text);
  if (!doc.ok()) return doc.status().WithContext(origin);
  return EntriesFromJson(*doc, origin);
}

Result<std::vector<TokenEntry>> ParseTokensFile(const std::string& path) {
  EFT_ASSIGN_OR_RETURN(json doc, LoadYamlOrJsonFile(path));
  return EntriesFromJson(doc, path);
}

Result<Sha256Digest> ReadJoinTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument(path + ": cannot read the join token file");
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty()) continue;
    if (line.size() < kMinTokenLength) {
      return Status::InvalidArgument(path + ": the join token must have at least " + std::to_string(kMinTokenLength) +
                                     " characters (e.g. `openssl rand -hex 32`)");
    }
    return Sha256(line);
  }
  return Status::InvalidArgument(path + ": the join token file is empty");
}

std::string BearerToken(const std::string& header) {
  std::string h = Trim(header);
  if (h.size() < 7 || Lower(h.substr(0, 7)) != "bearer ") return "";
  return Trim(h.substr(7));
}

Status AuthorizePriority(const Principal& who, int64_t priority, int64_t max_submitter_priority) {
  if (who.anonymous || (!who.worker && who.role == Role::kAdmin) || priority <= max_submitter_priority) {
    return Status::Ok();
  }
  return Status::PermissionDenied("user " + who.user + " (role " + RoleName(who.role) + ") may submit jobs of priority at most " +
                                  std::to_string(max_submitter_priority) + " (the controller's max_submitter_priority); " +
                                  "priority " + std::to_string(priority) + " takes an admin");
}

Status Authorize(const Principal& who, Action action, const std::string& job_owner) {
  if (who.anonymous) return Status::Ok();
  if (who.worker) {
    if (action == Action::kAgent) return Status::Ok();
    return Status::PermissionDenied(std::string("the join token may only be used by workers (AgentService); it may not ") +
                                    ActionName(action));
  }
  const std::string role = RoleName(who.role);
  switch (action) {
    case Action::kReadJobs:
    case Action::kReadLogs:
    case Action::kReadNodes:
    case Action::kMetrics:
      return Status::Ok();
    case Action::kSubmitJob:
      if (who.role >= Role::kSubmitter) return Status::Ok();
      break;
    case Action::kCancelJob:
      if (who.role == Role::kAdmin) return Status::Ok();
      if (who.role == Role::kSubmitter) {
        if (job_owner == who.user) return Status::Ok();
        return Status::PermissionDenied("user " + who.user + " (role submitter) may cancel only their own jobs; this one belongs to " +
                                        (job_owner.empty() ? std::string("nobody (submitted without authentication)")
                                                           : job_owner));
      }
      break;
    case Action::kDrainNode:
      if (who.role == Role::kAdmin) return Status::Ok();
      break;
    case Action::kAgent:
      return Status::PermissionDenied("user tokens may not call the worker API (AgentService); workers use the join token");
  }
  return Status::PermissionDenied("role " + role + " may not " + ActionName(action));
}

Authenticator::Authenticator(std::vector<TokenEntry> users, std::optional<Sha256Digest> join)
    : users_(std::make_shared<const std::vector<TokenEntry>>(std::move(users))), join_(join) {}

Result<std::unique_ptr<Authenticator>> Authenticator::Load(const std::string& tokens_file,
                                                           const std::string& join_token_file) {
  EFT_ASSIGN_OR_RETURN(auto users, ParseTokensFile(tokens_file));
  EFT_ASSIGN_OR_RETURN(auto join, ReadJoinTokenFile(join_token_file));
  if (FindDigest(users, join)) {
    return Status::InvalidArgument(join_token_file + ": the join token is also a user token in " + tokens_file +
                                   "; they must differ");
  }
  auto a = std::make_unique<Authenticator>(std::move(users), join);
  a->tokens_file_ = tokens_file;
  a->join_token_file_ = join_token_file;
  return a;
}

Status Authenticator::Reload() {
  if (tokens_file_.empty()) return Status::Ok();
  EFT_ASSIGN_OR_RETURN(auto fresh, Load(tokens_file_, join_token_file_));
  MutexLock lock(&mu_);
  MutexLock lock2(&fresh->mu_);
  users_ = fresh->users_;
  join_ = fresh->join_;
  return Status::Ok();
}

size_t Authenticator::user_count() const {
  MutexLock lock(&mu_);
  return users_->size();
}

Result<Principal> Authenticator::Authenticate(const std::string& header) const {
  if (Trim(header).empty()) {
    return Status::Unauthenticated("authentication required: send `authorization: Bearer <token>`");
  }
  std::string token = BearerToken(header);
  if (token.empty()) return Status::Unauthenticated("authorization must be `Bearer <token>`");
  const Sha256Digest d = Sha256(token);
  std::shared_ptr<const std::vector<TokenEntry>> users;
  std::optional<Sha256Digest> join;
  {
    MutexLock lock(&mu_);
    users = users_;
    join = join_;
  }
  Principal p;
  if (join && CRYPTO_memcmp(join->data(), d.data(), d.size()) == 0) {
    p.worker = true;
    p.user = "worker";
    return p;
  }
  const TokenEntry* e = FindDigest(*users, d);
  if (!e) return Status::Unauthenticated("invalid token");
  p.user = e->user;
  p.role = e->role;
  return p;
}

Result<Principal> Authenticator::Check(const std::string& header, Action action, const std::string& job_owner) const {
  EFT_ASSIGN_OR_RETURN(Principal p, Authenticate(header));
  EFT_RETURN_IF_ERROR(Authorize(p, action, job_owner));
  return p;
}

}  // namespace eft::controller
