#include "worker/snapshot_service.h"

#include <algorithm>
#include <cctype>

#include "common/logging.h"
#include "common/stopwatch.h"

namespace eft::worker {
namespace {

constexpr auto kLogEvery = std::chrono::seconds(30);  // a failing peer's warnings, at most

bool TlsBetweenWorkers(const ClientTls& tls) {
  return tls.enabled && !tls.cert_chain_pem.empty() && !tls.private_key_pem.empty();
}

// Whether `header` (an "authorization" value) carries `token`. Every byte of the expected token is
// compared whatever the given one holds, so the time taken tells nothing of how much matched.
bool BearerMatches(const std::string& header, const std::string& token) {
  constexpr char kBearer[] = "bearer ";
  std::string given;
  if (header.size() >= 7) {
    std::string prefix = header.substr(0, 7);
    std::transform(prefix.begin(), prefix.end(), prefix.begin(), [](unsigned char c) { return std::tolower(c); });
    if (prefix == kBearer) given = header.substr(7);
  }
  while (!given.empty() && std::isspace(static_cast<unsigned char>(given.back()))) given.pop_back();
  size_t start = 0;
  while (start < given.size() && std::isspace(static_cast<unsigned char>(given[start]))) ++start;
  given = given.substr(start);
  unsigned char diff = given.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char g = given.empty() ? 0 : static_cast<unsigned char>(given[i % given.size()]);
    diff |= g ^ static_cast<unsigned char>(token[i]);
  }
  return diff == 0 && !token.empty();
}

std::string Describe(const v1::SnapshotHeader& h) {
  return "step " + std::to_string(h.step()) + " of rank " + std::to_string(h.rank()) + " of job " + h.job_id() +
         " attempt " + std::to_string(h.attempt()) + " from " + (h.from_node().empty() ? "?" : h.from_node());
}

}  // namespace

std::string ListenAddress(const std::string& host, int port) {
  const std::string h = host.empty() ? "0.0.0.0" : host;
  const bool ipv6 = h.find(':') != std::string::npos && h.front() != '[';
  return (ipv6 ? "[" + h + "]" : h) + ":" + std::to_string(port);
}

// ---------------------------------------------------------------------------------------------
// The server

class SnapshotServer::Service final : public v1::SnapshotService::Service {
 public:
  Service(SnapshotStore* store, std::string token) : store_(store), token_(std::move(token)) {}

  grpc::Status PushSnapshot(grpc::ServerContext* ctx, grpc::ServerReader<v1::SnapshotChunk>* reader,
                            v1::PushSnapshotReply* reply) override {
    if (!token_.empty()) {
      const auto& md = ctx->client_metadata();
      auto it = md.find("authorization");
      if (it == md.end() || !BearerMatches(std::string(it->second.data(), it->second.size()), token_)) {
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                            "a snapshot push must carry the cluster's join token (authorization: Bearer <token>)");
      }
    }
    v1::SnapshotChunk chunk;
    if (!reader->Read(&chunk)) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "an empty push");
    if (!chunk.has_header()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a push's first chunk must carry the header");
    }
    const v1::SnapshotHeader header = chunk.header();
    auto refuse = [&](const Status& why) {
      LogRefusal(Describe(header) + ": " + why.message());
      reply->set_accepted(false);
      reply->set_reason(why.message());
      return grpc::Status::OK;
    };
    auto receiver = store_->BeginReplica(header);
    if (!receiver.ok()) return refuse(receiver.status());
    do {
      if (chunk.data().empty()) continue;
      if (Status s = (*receiver)->Write(chunk.data()); !s.ok()) return refuse(s);
    } while (reader->Read(&chunk));
    if (ctx->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "the transfer was cancelled");  // the receiver abandons it
    }
    if (Status s = (*receiver)->Commit(); !s.ok()) return refuse(s);
    EFT_LOG(DEBUG) << "holding " << Describe(header) << " (" << MibText(header.bytes()) << ")";
    reply->set_accepted(true);
    return grpc::Status::OK;
  }

 private:
  // A peer refused for want of room is refused at every snapshot: a line per 30 s says so.
  void LogRefusal(const std::string& what) EXCLUDES(mu_) {
    const SteadyTime now = std::chrono::steady_clock::now();
    int unlogged;
    {
      MutexLock lock(&mu_);
      if (logged_ && now - last_logged_ < kLogEvery) {
        ++unlogged_;
        return;
      }
      logged_ = true;
      last_logged_ = now;
      unlogged = unlogged_;
      unlogged_ = 0;
    }
    EFT_LOG(WARNING) << "refused " << what
                     << (unlogged > 0 ? " (and " + std::to_string(unlogged) + " other pushes since)" : "");
  }

  SnapshotStore* store_;
  const std::string token_;
  Mutex mu_;
  bool logged_ GUARDED_BY(mu_) = false;
  SteadyTime last_logged_ GUARDED_BY(mu_);
  int unlogged_ GUARDED_BY(mu_) = 0;
};

Result<std::unique_ptr<SnapshotServer>> SnapshotServer::Start(SnapshotStore* store, const std::string& host, int port,
                                                              const SnapshotAuth& auth) {
  std::unique_ptr<SnapshotServer> s(new SnapshotServer());
  s->service_ = std::make_unique<Service>(store, auth.join_token);
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (TlsBetweenWorkers(auth.tls)) {
    grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_key_cert_pairs.push_back({auth.tls.private_key_pem, auth.tls.cert_chain_pem});
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  const std::string address = ListenAddress(host, port);
  builder.AddListeningPort(address, creds, &s->port_);
  builder.RegisterService(s->service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(4 * kSnapshotChunkBytes));
  // A sender whose node vanished mid-transfer never closes its stream: pings find out, so that its
  // reservation of the budget is released.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return Status::Unavailable("cannot serve memory snapshots on " + address + " (--snapshot-port): is it taken?");
  }
  return s;
}

SnapshotServer::~SnapshotServer() { Shutdown(); }

void SnapshotServer::Shutdown() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
}

// ---------------------------------------------------------------------------------------------
// The replicator

SnapshotReplicator::SnapshotReplicator(SnapshotStore* store, Options options)
    : store_(store), options_(std::move(options)) {}

SnapshotReplicator::~SnapshotReplicator() { Stop(); }

void SnapshotReplicator::Start() {
  for (int i = 0; i < std::max(1, options_.threads); ++i) threads_.emplace_back([this] { Loop(); });
}

void SnapshotReplicator::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
  }
  cv_.NotifyAll();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void SnapshotReplicator::Enqueue(const AttemptId& attempt, int rank, int64_t step,
                                 const std::vector<v1::SnapshotPeer>& peers) {
  {
    MutexLock lock(&mu_);
    for (const auto& p : peers) {
      if (p.address().empty()) continue;
      Peer& peer = peers_[p.address()];
      peer.name = p.node_name();
      Pending& item = peer.pending[{attempt, rank}];
      if (item.step > step) continue;  // a newer one waits already
      item = Pending{step, 0, SteadyTime{}};
    }
  }
  cv_.NotifyAll();
}

ReplicatorStats SnapshotReplicator::Stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

bool SnapshotReplicator::Pick(std::string* address, ShardId* shard, Pending* item, SteadyTime* wake) {
  const SteadyTime now = std::chrono::steady_clock::now();
  bool found = false;
  *wake = SteadyTime::max();
  for (auto& [addr, peer] : peers_) {
    if (peer.busy) continue;
    for (const auto& [id, p] : peer.pending) {
      if (p.not_before > now) {
        *wake = std::min(*wake, p.not_before);
        continue;
      }
      if (!found || p.step > item->step) {
        found = true;
        *address = addr;
        *shard = id;
        *item = p;
      }
    }
  }
  if (found) {
    Peer& peer = peers_.at(*address);
    peer.pending.erase(*shard);
    peer.busy = true;
  }
  return found;
}

void SnapshotReplicator::Loop() {
  while (true) {
    std::string address;
    ShardId shard;
    Pending item;
    {
      MutexLock lock(&mu_);
      while (true) {
        if (stop_) return;
        SteadyTime wake;
        if (Pick(&address, &shard, &item, &wake)) break;
        if (wake == SteadyTime::max()) {
          cv_.Wait(&mu_);
        } else {
          cv_.WaitFor(&mu_, wake - std::chrono::steady_clock::now(), [&]() REQUIRES(mu_) { return stop_; });
        }
      }
    }
    const Stopwatch took;
    const Outcome outcome = Push(address, shard, item.step);
    Finish(address, shard, item, outcome, took.Seconds());
  }
}

SnapshotReplicator::Outcome SnapshotReplicator::Push(const std::string& address, const ShardId& shard, int64_t step) {
  Outcome out;
  auto reader = store_->OpenOwn(shard.first, shard.second, step);
  if (!reader.ok()) {  // dropped meanwhile: a newer one is queued, or the attempt is over
    out.result = Result::kGone;
    return out;
  }
  const snapshot::ShardRecord& record = (*reader)->record();
  std::shared_ptr<grpc::Channel> channel;
  grpc::ClientContext ctx;
  {
    MutexLock lock(&mu_);
    if (stop_) {
      out.result = Result::kGone;
      return out;
    }
    Peer& peer = peers_.at(address);
    if (!peer.channel) {
      ClientTls tls = options_.auth.tls;
      tls.enabled = TlsBetweenWorkers(tls);
      peer.channel = grpc::CreateChannel(address, MakeChannelCredentials(tls));
    }
    channel = peer.channel;
    in_flight_.insert(&ctx);
  }
  AddBearerToken(options_.auth.join_token, &ctx);
  const auto deadline = options_.deadline_base + std::chrono::milliseconds(static_cast<int64_t>(
                                                     1000.0 * static_cast<double>(record.bytes) / options_.min_rate));
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  v1::PushSnapshotReply reply;
  auto stub = v1::SnapshotService::NewStub(channel);
  auto writer = stub->PushSnapshot(&ctx, &reply);
  v1::SnapshotChunk chunk;
  v1::SnapshotHeader* h = chunk.mutable_header();
  h->set_from_node(options_.node_name);
  h->set_job_id(shard.first.first);
  h->set_attempt(shard.first.second);
  h->set_step(record.step);
  h->set_rank(record.rank);
  h->set_world_size(record.world_size);
  h->set_bytes(record.bytes);
  h->set_crc32c(record.crc32c);
  Status read_status;
  std::string data;
  bool more = true;
  while (more) {
    read_status = (*reader)->Read(kSnapshotChunkBytes, &data);
    if (!read_status.ok()) break;
    more = !data.empty();
    if (!more && !chunk.has_header()) break;  // the header went with earlier bytes
    chunk.set_data(std::move(data));
    if (!writer->Write(chunk)) break;  // the receiver ended the call (a refusal) or the stream broke
    chunk.clear_header();
  }
  if (!read_status.ok()) ctx.TryCancel();
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  {
    MutexLock lock(&mu_);
    in_flight_.erase(&ctx);
  }
  if (!read_status.ok()) {
    out.reason = read_status.message();
  } else if (!s.ok()) {
    out.reason = s.error_message().empty() ? "gRPC code " + std::to_string(s.error_code()) : s.error_message();
  } else if (!reply.accepted()) {
    out.result = Result::kRefused;
    out.reason = reply.reason();
  } else {
    out.result = Result::kOk;
    out.bytes = record.bytes;
  }
  return out;
}

void SnapshotReplicator::Finish(const std::string& address, const ShardId& shard, const Pending& item,
                                const Outcome& outcome, double seconds) {
  const AttemptId& a = shard.first;
  const std::string what = "step " + std::to_string(item.step) + " of rank " + std::to_string(shard.second) +
                           " of job " + a.first + " attempt " + std::to_string(a.second);
  bool report_refusal = false;
  std::string peer_name;
  {
    MutexLock lock(&mu_);
    Peer& peer = peers_.at(address);
    peer.busy = false;
    peer_name = peer.name.empty() ? address : peer.name;
    const SteadyTime now = std::chrono::steady_clock::now();
    switch (outcome.result) {
      case Result::kGone:
        break;
      case Result::kOk:
        ++stats_.pushes["ok"];
        stats_.last_push_seconds = seconds;
        stats_.pushed_bytes += static_cast<uint64_t>(outcome.bytes);
        refusing_.erase({address, shard});
        if (peer.failing) EFT_LOG(INFO) << "memory snapshots reach " << peer_name << " (" << address << ") again";
        peer.failing = false;
        break;
      case Result::kRefused:
        ++stats_.pushes["refused"];
        if (refusing_.size() > 10000) refusing_.clear();  // attempts long over; at worst one more event each
        report_refusal = refusing_.insert({address, shard}).second;
        if (report_refusal) EFT_LOG(WARNING) << peer_name << " refused " << what << ": " << outcome.reason;
        break;
      case Result::kFailed: {
        if (stop_) break;  // cancelled by Stop()
        ++stats_.pushes["failed"];
        peer.channel.reset();
        if (!peer.failing || now - peer.last_logged >= kLogEvery) {
          EFT_LOG(WARNING) << "cannot send " << what << " to " << peer_name << " (" << address
                           << "): " << outcome.reason
                           << (peer.unlogged > 0 ? " (" + std::to_string(peer.unlogged) + " more failures since)" : "");
          peer.last_logged = now;
          peer.unlogged = 0;
        } else {
          ++peer.unlogged;
        }
        peer.failing = true;
        // Again later, unless a newer one of the shard is waiting by then.
        if (item.tries + 1 < options_.tries && peer.pending.count(shard) == 0) {
          peer.pending[shard] = Pending{item.step, item.tries + 1, now + options_.retry_pause};
        }
        break;
      }
    }
  }
  cv_.NotifyAll();
  // The rank's `auto` interval counts what replication takes (trainer/checkpoint/memory_snapshot.h).
  if (outcome.result == Result::kOk) store_->NoteReplicated(a, shard.second, {item.step, seconds, outcome.bytes});
  if (report_refusal && options_.on_refused) {
    v1::RankKey key;
    key.set_job_id(a.first);
    key.set_attempt(a.second);
    key.set_rank(shard.second);
    options_.on_refused(key, rank::MemorySnapshotRefusedEvent{item.step, shard.second, peer_name, outcome.reason});
  }
}

}  // namespace eft::worker
