// The tokens file, the join token and the authorization policy (role x action x ownership).
#include "controller/auth.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/config.h"

namespace eft::controller {
namespace {

const std::string kAdmin = "admin-token-0123456789";
const std::string kAlice = "alice-token-0123456789";
const std::string kViewer = "viewer-token-0123456789";
const std::string kJoin = "join-token-0123456789ab";

// The files Temp() wrote, removed when the test program exits.
struct TempFiles {
  std::vector<std::string> paths;
  ~TempFiles() {
    std::error_code ec;
    for (const auto& p : paths) std::filesystem::remove(p, ec);
  }
};

std::string Temp(const std::string& name, const std::string& text) {
  static TempFiles written;
  std::string path =
      (std::filesystem::temp_directory_path() / ("eft-auth-" + std::to_string(::getpid()) + "-" + name)).string();
  std::ofstream(path) << text;
  written.paths.push_back(path);
  return path;
}

TEST(Sha256, KnownVector) {
  EXPECT_EQ(ToHex(Sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TokensFile, ParsesPlainAndHashedTokens) {
  auto entries = ParseTokens("- {token: " + kAdmin + ", user: root, role: admin}\n"
                             "- {token_sha256: " + ToHex(Sha256(kAlice)) + ", user: alice, role: Submitter}\n",
                             "tokens.yaml");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].user, "root");
  EXPECT_EQ((*entries)[0].role, Role::kAdmin);
  EXPECT_EQ((*entries)[0].digest, Sha256(kAdmin));
  EXPECT_EQ((*entries)[1].role, Role::kSubmitter);
  EXPECT_EQ((*entries)[1].digest, Sha256(kAlice));
  // The `tokens:` form and JSON are the same.
  auto wrapped = ParseTokens(R"({"tokens": [{"token": ")" + kAdmin + R"(", "user": "root", "role": "admin"}]})", "t.json");
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  EXPECT_EQ(wrapped->size(), 1u);
}

TEST(TokensFile, ErrorsNameTheEntryAndField) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    auto r = ParseTokens(text, "tokens.yaml");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  };
  expect_error("- {user: a, role: admin}\n", "tokens[0]: give exactly one of token");
  expect_error("- {token: " + kAdmin + ", token_sha256: " + ToHex(Sha256(kAdmin)) + ", user: a, role: admin}\n",
               "exactly one of token");
  expect_error("- {token: short, user: a, role: admin}\n", "tokens[0].token: at least 16 characters");
  expect_error("- {token_sha256: abc, user: a, role: admin}\n", "tokens[0].token_sha256: expected 64 hex digits");
  expect_error("- {token: " + kAdmin + ", role: admin}\n", "tokens[0].user");
  expect_error("- {token: " + kAdmin + ", user: a, role: root}\n", "'root' is not a role");
  expect_error("- {token: " + kAdmin + ", user: a, role: admin, group: x}\n", "unknown field 'group'");
  expect_error("- {token: " + kAdmin + ", user: a, role: admin}\n- {token: " + kAdmin + ", user: b, role: viewer}\n",
               "tokens[1]: the same token is listed twice");
  expect_error("users: []\n", "expected a list");
}

TEST(JoinToken, FirstLineTrimmedAndLongEnough) {
  auto ok = ReadJoinTokenFile(Temp("join", "\n  " + kJoin + "  \n"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, Sha256(kJoin));
  EXPECT_FALSE(ReadJoinTokenFile(Temp("join-short", "short\n")).ok());
  EXPECT_FALSE(ReadJoinTokenFile(Temp("join-empty", "\n")).ok());
  EXPECT_FALSE(ReadJoinTokenFile("/nonexistent/join").ok());
}

TEST(Bearer, ParsesTheScheme) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("bearer   abc "), "abc");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  EXPECT_EQ(BearerToken(""), "");
}

Authenticator MakeAuth() {
  return Authenticator({{Sha256(kAdmin), "root", Role::kAdmin},
                        {Sha256(kAlice), "alice", Role::kSubmitter},
                        {Sha256(kViewer), "vic", Role::kViewer}},
                       Sha256(kJoin));
}

TEST(Authenticator, KnowsTokensAndTheJoinToken) {
  Authenticator auth = MakeAuth();
  auto alice = auth.Authenticate("Bearer " + kAlice);
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->user, "alice");
  EXPECT_EQ(alice->role, Role::kSubmitter);
  EXPECT_FALSE(alice->worker);
  auto worker = auth.Authenticate("Bearer " + kJoin);
  ASSERT_TRUE(worker.ok());
  EXPECT_TRUE(worker->worker);
  EXPECT_EQ(auth.Authenticate("").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Authenticate("Bearer nope-nope-nope-nope").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Authenticate(kAlice).status().code(), StatusCode::kUnauthenticated) << "the scheme is required";
  // The join token only works on AgentService, user tokens never do.
  EXPECT_TRUE(auth.Check("Bearer " + kJoin, Action::kAgent).ok());
  EXPECT_EQ(auth.Check("Bearer " + kJoin, Action::kReadJobs).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.Check("Bearer " + kAdmin, Action::kAgent).status().code(), StatusCode::kPermissionDenied);
}

TEST(Authenticator, LoadsAndReloadsFiles) {
  std::string tokens = Temp("tokens.yaml", "- {token: " + kAdmin + ", user: root, role: admin}\n");
  std::string join = Temp("join.txt", kJoin + "\n");
  auto auth = Authenticator::Load(tokens, join);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->Authenticate("Bearer " + kAdmin).ok());
  EXPECT_FALSE((*auth)->Authenticate("Bearer " + kAlice).ok());
  std::ofstream(tokens) << "- {token_sha256: " << ToHex(Sha256(kAlice)) << ", user: alice, role: submitter}\n";
  ASSERT_TRUE((*auth)->Reload().ok());
  EXPECT_FALSE((*auth)->Authenticate("Bearer " + kAdmin).ok()) << "a removed token stops working";
  EXPECT_TRUE((*auth)->Authenticate("Bearer " + kAlice).ok());
  // A broken file keeps the previous tokens.
  std::ofstream(tokens) << "- {token: x}\n";
  EXPECT_FALSE((*auth)->Reload().ok());
  EXPECT_TRUE((*auth)->Authenticate("Bearer " + kAlice).ok());
  // The join token must not double as a user token.
  std::ofstream(tokens) << "- {token: " << kJoin << ", user: w, role: viewer}\n";
  EXPECT_FALSE(Authenticator::Load(tokens, join).ok());
}

struct Case {
  Role role;
  Action action;
  std::string owner;  // for kCancelJob; the caller is "alice"
  bool allowed;
};

TEST(Policy, RoleActionOwnershipMatrix) {
  const std::vector<Action> reads = {Action::kReadJobs, Action::kReadLogs, Action::kReadNodes, Action::kMetrics};
  std::vector<Case> cases;
  for (Role r : {Role::kViewer, Role::kSubmitter, Role::kAdmin}) {
    for (Action a : reads) cases.push_back({r, a, "", true});
    cases.push_back({r, Action::kAgent, "", false});
  }
  cases.push_back({Role::kViewer, Action::kSubmitJob, "", false});
  cases.push_back({Role::kSubmitter, Action::kSubmitJob, "", true});
  cases.push_back({Role::kAdmin, Action::kSubmitJob, "", true});
  cases.push_back({Role::kViewer, Action::kCancelJob, "alice", false});
  cases.push_back({Role::kSubmitter, Action::kCancelJob, "alice", true});
  cases.push_back({Role::kSubmitter, Action::kCancelJob, "bob", false});
  cases.push_back({Role::kSubmitter, Action::kCancelJob, "", false});
  cases.push_back({Role::kAdmin, Action::kCancelJob, "bob", true});
  cases.push_back({Role::kViewer, Action::kDrainNode, "", false});
  cases.push_back({Role::kSubmitter, Action::kDrainNode, "", false});
  cases.push_back({Role::kAdmin, Action::kDrainNode, "", true});
  for (const Case& c : cases) {
    Principal p;
    p.user = "alice";
    p.role = c.role;
    Status s = Authorize(p, c.action, c.owner);
    EXPECT_EQ(s.ok(), c.allowed) << RoleName(c.role) << " " << ActionName(c.action) << " owner " << c.owner << ": "
                                 << s;
    if (!c.allowed) {
      EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
    }
  }
  Principal viewer;
  viewer.role = Role::kViewer;
  EXPECT_EQ(Authorize(viewer, Action::kCancelJob).message(), "role viewer may not cancel jobs");
  Principal worker;
  worker.worker = true;
  EXPECT_TRUE(Authorize(worker, Action::kAgent).ok());
  for (Action a : reads) EXPECT_FALSE(Authorize(worker, a).ok());
  Principal anonymous;
  anonymous.anonymous = true;
  EXPECT_TRUE(Authorize(anonymous, Action::kDrainNode).ok());
}

TEST(ListenSecurity, LoopbackOnlyWithoutAuth) {
  ControllerConfig c;
  EXPECT_TRUE(CheckListenSecurity(c, "").ok()) << "the default is loopback";
  c.listen = "127.0.0.1:7070";
  EXPECT_TRUE(CheckListenSecurity(c, "127.0.0.1:8080").ok());
  EXPECT_TRUE(CheckListenSecurity(c, "[::1]:8080").ok());
  EXPECT_TRUE(CheckListenSecurity(c, "localhost:8080").ok());
  Status s = CheckListenSecurity(c, "0.0.0.0:8080");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--insecure-listen-anywhere"), std::string::npos) << s;
  c.listen = "0.0.0.0:7070";
  EXPECT_FALSE(CheckListenSecurity(c, "").ok());
  c.listen = ":7070";
  EXPECT_FALSE(CheckListenSecurity(c, "").ok());
  c.insecure_listen_anywhere = true;
  EXPECT_TRUE(CheckListenSecurity(c, "0.0.0.0:8080").ok());

  ControllerConfig authed;
  authed.listen = "0.0.0.0:7070";
  authed.auth_tokens_file = "t";
  EXPECT_FALSE(CheckListenSecurity(authed, "").ok()) << "tokens without a join token";
  authed.join_token_file = "j";
  EXPECT_TRUE(CheckListenSecurity(authed, "0.0.0.0:8080").ok());
  authed.tls_cert = "c";
  EXPECT_FALSE(CheckListenSecurity(authed, "").ok()) << "a certificate without a key";

  ControllerConfig defaults;
  defaults.db_path = "x.db";
  ASSERT_TRUE(FinalizeControllerConfig(&defaults).ok());
  EXPECT_EQ(defaults.listen, "127.0.0.1:7070");
  ControllerConfig anywhere = authed;
  anywhere.tls_cert.clear();
  anywhere.listen.clear();
  anywhere.db_path = "x.db";
  ASSERT_TRUE(FinalizeControllerConfig(&anywhere).ok());
  EXPECT_EQ(anywhere.listen, "0.0.0.0:7070");
}

TEST(ControllerConfigAuth, LoadsAuthSettings) {
  ControllerConfig c;
  std::string path = Temp("controller.yaml",
                          "auth_tokens: /etc/eft/tokens.yaml\njoin_token_file: /etc/eft/join\ntls_cert: c.pem\n"
                          "tls_key: k.pem\ntls_client_ca: ca.pem\ninsecure_listen_anywhere: true\n"
                          "metrics_without_auth: true\n");
  ASSERT_TRUE(LoadControllerConfig(path, &c).ok());
  EXPECT_EQ(c.auth_tokens_file, "/etc/eft/tokens.yaml");
  EXPECT_EQ(c.join_token_file, "/etc/eft/join");
  EXPECT_EQ(c.tls_cert, "c.pem");
  EXPECT_EQ(c.tls_key, "k.pem");
  EXPECT_EQ(c.tls_client_ca, "ca.pem");
  EXPECT_TRUE(c.insecure_listen_anywhere);
  EXPECT_TRUE(c.metrics_without_auth);
}

}  // namespace
}  // namespace eft::controller

namespace eft::controller {
namespace {

// docs/auth.md: a priority above max_submitter_priority takes an admin.
TEST(AuthorizePriority, AboveTheLimitOnlyAdmins) {
  Principal alice{"alice", Role::kSubmitter, false, false};
  Principal root{"root", Role::kAdmin, false, false};
  Principal anonymous{"", Role::kAdmin, false, true};
  EXPECT_TRUE(AuthorizePriority(alice, 0, 0).ok());
  EXPECT_TRUE(AuthorizePriority(alice, -5, 0).ok());
  EXPECT_TRUE(AuthorizePriority(alice, 3, 3).ok());
  Status s = AuthorizePriority(alice, 5, 0);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "user alice (role submitter) may submit jobs of priority at most 0 (the controller's "
            "max_submitter_priority); priority 5 takes an admin");
  EXPECT_EQ(AuthorizePriority(alice, 4, 3).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(AuthorizePriority(root, 1000000, 0).ok());
  EXPECT_TRUE(AuthorizePriority(anonymous, 1000000, 0).ok());
}

}  // namespace
}  // namespace eft::controller
