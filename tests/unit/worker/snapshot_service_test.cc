// Two workers' snapshot stores on 127.0.0.1: node A's replicator pushes what A took over to node B's
// SnapshotService (a real gRPC server), which holds it; a wrong join token, damaged bytes and a full
// budget are refused, and the newest snapshot goes first.
#include "worker/snapshot_service.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "tests/unit/worker/snapshot_test_util.h"

namespace eft::worker::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kToken[] = "join-token-0123456789abcdef";

bool Eventually(const std::function<bool()>& pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

class SnapshotServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    ASSERT_FALSE(dir_.empty());
    a_ = OpenStore("a", 256 << 20);
    StartB(256 << 20);
  }
  void TearDown() override {
    replicator_.reset();
    server_.reset();
    a_.reset();
    b_.reset();
    fs::remove_all(dir_);
  }
  std::unique_ptr<SnapshotStore> OpenStore(const std::string& name, int64_t budget) {
    SnapshotStoreOptions o;
    o.root = dir_ + "/" + name;
    o.budget_bytes = budget;
    auto s = SnapshotStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  void StartB(int64_t budget, ClientTls tls = {}) {
    server_.reset();
    b_ = OpenStore("b", budget);
    SnapshotAuth auth;
    auth.join_token = kToken;
    auth.tls = std::move(tls);
    auto server = SnapshotServer::Start(b_.get(), "127.0.0.1", 0, auth);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    peer_.set_node_name("node-b");
    peer_.set_address("127.0.0.1:" + std::to_string(server_->port()));
  }
  // A's replicator, sending `token`; started unless told otherwise.
  void StartReplicator(const std::string& token = kToken, bool start = true, ClientTls tls = {}) {
    SnapshotReplicator::Options o;
    o.node_name = "node-a";
    o.auth.join_token = token;
    o.auth.tls = std::move(tls);
    o.tries = 1;
    o.deadline_base = std::chrono::seconds(10);
    o.on_refused = [this](const v1::RankKey& key, const rank::MemorySnapshotRefusedEvent& refusal) {
      std::lock_guard<std::mutex> lock(mu_);
      refusals_.emplace_back(key, refusal);
    };
    replicator_ = std::make_unique<SnapshotReplicator>(a_.get(), std::move(o));
    if (start) replicator_->Start();
  }
  // Node A's rank `rank` of attempt a_ took a snapshot of `step`; A holds it.
  rank::MemorySnapshotEvent TakeOverOnA(int64_t step, int rank, size_t bytes, uint32_t crc_damage = 0) {
    auto incoming = a_->IncomingDir(attempt_);
    EXPECT_TRUE(incoming.ok());
    rank::MemorySnapshotEvent e = WriteRankSnapshot(*incoming, step, rank, 2, SnapshotBytes(bytes, step));
    e.crc32c ^= crc_damage;  // as if the bytes had changed in memory since the rank wrote them
    const Status s = a_->TakeOver(attempt_, rank, e);
    EXPECT_TRUE(s.ok()) << s;
    return e;
  }
  void Push(int64_t step, int rank) { replicator_->Enqueue(attempt_, rank, step, {peer_}); }
  uint64_t Pushes(const std::string& result) {
    auto stats = replicator_->Stats();
    return stats.pushes.count(result) ? stats.pushes.at(result) : 0;
  }
  std::vector<std::pair<v1::RankKey, rank::MemorySnapshotRefusedEvent>> Refusals() {
    std::lock_guard<std::mutex> lock(mu_);
    return refusals_;
  }

  std::string dir_;
  const AttemptId attempt_{"7", 2};
  std::unique_ptr<SnapshotStore> a_, b_;
  std::unique_ptr<SnapshotServer> server_;
  std::unique_ptr<SnapshotReplicator> replicator_;
  v1::SnapshotPeer peer_;
  std::mutex mu_;
  std::vector<std::pair<v1::RankKey, rank::MemorySnapshotRefusedEvent>> refusals_;
};

TEST_F(SnapshotServiceTest, ASnapshotTakenOverOnOneNodeIsHeldByItsPeer) {
  StartReplicator();
  const size_t bytes = 5 * kSnapshotChunkBytes / 2 + 123;  // several chunks, the last one short
  TakeOverOnA(5, 1, bytes);
  Push(5, 1);
  ASSERT_TRUE(Eventually([&] { return !b_->Held().empty(); }));
  const std::vector<v1::HeldSnapshot> held = b_->Held();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].job_id(), "7");
  EXPECT_EQ(held[0].attempt(), 2);
  EXPECT_EQ(held[0].step(), 5);
  EXPECT_EQ(held[0].world_size(), 2);
  ASSERT_EQ(held[0].ranks_size(), 1);
  EXPECT_EQ(held[0].ranks(0), 1);
  EXPECT_EQ(held[0].bytes(), static_cast<int64_t>(bytes));
  EXPECT_EQ(ReadWholeFile(dir_ + "/b/job-7/attempt-2/held/step-5/" + snapshot::ShardFileName(1, 2)),
            SnapshotBytes(bytes, 5));
  EXPECT_EQ(b_->Stats().replica_bytes, static_cast<int64_t>(bytes));
  EXPECT_EQ(a_->Held().size(), 1u) << "the sender keeps its own";
  ASSERT_TRUE(Eventually([&] { return Pushes("ok") == 1; }));
  EXPECT_EQ(replicator_->Stats().pushed_bytes, bytes);
  EXPECT_GT(replicator_->Stats().last_push_seconds, 0);
  EXPECT_TRUE(Refusals().empty());
  // The rank is told how long it took (its `auto` interval counts it), in its own directory.
  const auto note = snapshot::ReadReplicationNote(dir_ + "/a/job-7/attempt-2/incoming", 1);
  ASSERT_TRUE(note.has_value());
  EXPECT_EQ(note->step, 5);
  EXPECT_EQ(note->bytes, static_cast<int64_t>(bytes));
  EXPECT_GT(note->seconds, 0);
  EXPECT_FALSE(snapshot::ReadReplicationNote(dir_ + "/a/job-7/attempt-2/incoming", 0).has_value());
}

TEST_F(SnapshotServiceTest, APushWithoutTheJoinTokenIsRefused) {
  StartReplicator("not-the-join-token");
  TakeOverOnA(3, 0, 1000);
  Push(3, 0);
  ASSERT_TRUE(Eventually([&] { return Pushes("failed") == 1; }));
  EXPECT_TRUE(b_->Held().empty());
  EXPECT_TRUE(Refusals().empty()) << "a failed call is logged; only a peer's answer is a job event";

  // Without any token, and with one of the right length: UNAUTHENTICATED, before any byte is taken.
  for (const std::string& token : {std::string(), std::string(std::strlen(kToken), 'x')}) {
    auto stub = v1::SnapshotService::NewStub(grpc::CreateChannel(peer_.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    AddBearerToken(token, &ctx);
    v1::PushSnapshotReply reply;
    auto writer = stub->PushSnapshot(&ctx, &reply);
    v1::SnapshotChunk chunk;
    chunk.mutable_header()->set_job_id("7");
    writer->Write(chunk);
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "token '" << token << "'";
  }
  EXPECT_EQ(b_->Stats().receiving_bytes, 0);
}

// A worker's TLS (--tls-cert/--tls-key/--tls-ca; docs/auth.md) between workers: B serves TLS with
// its certificate, A pushes over TLS and checks it against the CA. A push in plaintext, or one that
// trusts another CA, gets nowhere.
TEST_F(SnapshotServiceTest, OverTlsAPeerIsReachedOnlyWithTlsAndItsCertificateTrusted) {
  if (std::system("openssl version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: the openssl program is missing (Debian package openssl); it makes the certificates";
  }
  // Self-signed certificates for 127.0.0.1, each its own CA (as tests/e2e/auth_test.cc makes them).
  auto make_cert = [&](const std::string& name) {
    const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
                            "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " + dir_ + "/" + name +
                            ".key -out " + dir_ + "/" + name + ".pem > " + dir_ + "/openssl.log 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << ReadWholeFile(dir_ + "/openssl.log");
    auto tls = LoadClientTls(true, dir_ + "/" + name + ".pem", dir_ + "/" + name + ".pem", dir_ + "/" + name + ".key");
    EXPECT_TRUE(tls.ok()) << tls.status();
    return tls.ok() ? *tls : ClientTls{};
  };
  const ClientTls cluster = make_cert("cluster"), other = make_cert("other");
  StartB(256 << 20, cluster);

  StartReplicator(kToken, true, cluster);
  TakeOverOnA(4, 0, 3000);
  Push(4, 0);
  ASSERT_TRUE(Eventually([&] { return Pushes("ok") == 1; })) << "over TLS";
  ASSERT_EQ(b_->Held().size(), 1u);
  EXPECT_EQ(b_->Held()[0].step(), 4);

  StartReplicator(kToken, true, ClientTls{});  // plaintext to a TLS server
  TakeOverOnA(5, 0, 3000);
  Push(5, 0);
  ASSERT_TRUE(Eventually([&] { return Pushes("failed") == 1; }));

  StartReplicator(kToken, true, other);  // TLS, but B's certificate is not signed by the CA it trusts
  TakeOverOnA(6, 0, 3000);
  Push(6, 0);
  ASSERT_TRUE(Eventually([&] { return Pushes("failed") == 1; }));
  ASSERT_EQ(b_->Held().size(), 1u);
  EXPECT_EQ(b_->Held()[0].step(), 4) << "nothing arrived but over TLS with B's certificate trusted";
  EXPECT_EQ(Pushes("ok"), 0u);
}

// The receiver checks the bytes against the CRC-32C the rank reported; a refusal is reported once
// per series as a memory_snapshot_refused event naming the peer.
TEST_F(SnapshotServiceTest, DamagedBytesAreRefusedByThePeerAndReportedOnce) {
  StartReplicator();
  TakeOverOnA(4, 1, 3000, /*crc_damage=*/0x40);
  Push(4, 1);
  ASSERT_TRUE(Eventually([&] { return Pushes("refused") == 1; }));
  EXPECT_TRUE(b_->Held().empty());
  EXPECT_EQ(CountFiles(dir_ + "/b/job-7"), 0u) << "nothing half received stays";
  ASSERT_TRUE(Eventually([&] { return Refusals().size() == 1; }));
  const auto [key, refusal] = Refusals()[0];
  EXPECT_EQ(key.job_id(), "7");
  EXPECT_EQ(key.attempt(), 2);
  EXPECT_EQ(key.rank(), 1);
  EXPECT_EQ(refusal.step, 4);
  EXPECT_EQ(refusal.rank, 1);
  EXPECT_EQ(refusal.node, "node-b");
  EXPECT_EQ(refusal.reason.rfind("damaged in transit: received 3000 bytes with CRC-32C ", 0), 0u) << refusal.reason;

  TakeOverOnA(5, 1, 3000, 0x40);
  Push(5, 1);
  ASSERT_TRUE(Eventually([&] { return Pushes("refused") == 2; }));
  EXPECT_EQ(Refusals().size(), 1u) << "the same refusal again is not another event";
  TakeOverOnA(6, 1, 3000);
  Push(6, 1);
  ASSERT_TRUE(Eventually([&] { return Pushes("ok") == 1; }));
  EXPECT_EQ(b_->Held().size(), 1u);
}

TEST_F(SnapshotServiceTest, APeerWithoutRoomSaysSo) {
  StartB(1 << 20);
  StartReplicator();
  TakeOverOnA(2, 0, 3 << 20);
  Push(2, 0);
  ASSERT_TRUE(Eventually([&] { return Refusals().size() == 1; }));
  EXPECT_EQ(Refusals()[0].second.reason,
            "needs 3.0 MiB, 1.0 MiB of the 1.0 MiB budget free (--snapshot-memory-mb)");
  EXPECT_TRUE(b_->Held().empty());
}

// A newer snapshot of the same rank replaces an older one not yet sent.
TEST_F(SnapshotServiceTest, OnlyTheNewestWaitingSnapshotOfARankIsSent) {
  StartReplicator(kToken, /*start=*/false);
  for (int64_t step = 1; step <= 2; ++step) {
    TakeOverOnA(step, 0, 1000);
    Push(step, 0);
  }
  TakeOverOnA(3, 1, 1000);
  Push(3, 1);
  TakeOverOnA(3, 0, 1000);  // step 1 of rank 0 is dropped on A now
  Push(3, 0);
  replicator_->Start();
  ASSERT_TRUE(Eventually([&] { return Pushes("ok") == 2; }));
  const std::vector<v1::HeldSnapshot> held = b_->Held();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].step(), 3);
  EXPECT_EQ(held[0].ranks_size(), 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Pushes("ok"), 2u);
  EXPECT_EQ(Pushes("failed") + Pushes("refused"), 0u);
}

TEST(ListenAddressTest, BracketsIpv6) {
  EXPECT_EQ(ListenAddress("10.0.0.3", 7000), "10.0.0.3:7000");
  EXPECT_EQ(ListenAddress("::1", 7000), "[::1]:7000");
  EXPECT_EQ(ListenAddress("", 0), "0.0.0.0:0");
}

}  // namespace
}  // namespace eft::worker::testing
