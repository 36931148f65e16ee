#include "worker/log_shipper.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <grpcpp/grpcpp.h>

#include "common/grpc/credentials.h"
#include "common/logging.h"

namespace eft::worker {

namespace {
constexpr size_t kMaxChunk = 256 * 1024;
constexpr size_t kMaxRequest = 2 * 1024 * 1024;
// Logs are not urgent: gRPC's usual patience, short of its 20 s default.
constexpr std::chrono::milliseconds kConnectTimeout{5000};

std::string KeyText(const v1::RankKey& k) {
  return k.job_id() + "/" + std::to_string(k.attempt()) + "/" + std::to_string(k.rank());
}
}  // namespace

std::unique_ptr<v1::AgentService::Stub> NewAgentStub(const ControllerEndpoint& controller,
                                                     std::chrono::milliseconds connect_timeout) {
  grpc::ChannelArguments args;
  // Channels to one target share their connections by default: a "new" channel would inherit the
  // old one's stuck connection and its backoff.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const int ms = static_cast<int>(connect_timeout.count());
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, ms);  // gRPC's name for the minimum connect timeout
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, std::max(ms, 1000));
  return v1::AgentService::NewStub(
      grpc::CreateCustomChannel(controller.address, MakeChannelCredentials(controller.tls), args));
}

void AddJoinToken(const ControllerEndpoint& controller, grpc::ClientContext* ctx) {
  AddBearerToken(controller.join_token, ctx);
}

LogShipper::LogShipper(ControllerEndpoint controller, std::string node_name, std::chrono::milliseconds interval,
                       std::chrono::milliseconds rpc_timeout)
    : controller_(std::move(controller)),
      node_name_(std::move(node_name)),
      interval_(interval),
      rpc_timeout_(rpc_timeout),
      stub_(NewAgentStub(controller_, kConnectTimeout)) {}

LogShipper::~LogShipper() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void LogShipper::Start() { thread_ = std::thread([this] { Loop(); }); }

void LogShipper::Track(const v1::RankKey& key, const std::string& path) {
  MutexLock lock(&mu_);
  File& f = files_[path];
  f.key = key;
  f.path = path;
  f.done = false;
}

void LogShipper::Untrack(const v1::RankKey& key) {
  MutexLock lock(&mu_);
  for (auto& [path, f] : files_) {
    if (KeyText(f.key) == KeyText(key)) f.done = true;
  }
  wake_ = true;
  cv_.NotifyAll();
}

void LogShipper::Wake() {
  MutexLock lock(&mu_);
  wake_ = true;
  cv_.NotifyAll();
}

void LogShipper::Loop() {
  while (true) {
    bool sent = PushOnce();
    bool stopped_while_waiting = false;
    {
      MutexLock lock(&mu_);
      if (stop_) break;
      // More to send: go again at once; otherwise wait for the interval or a wake-up.
      if (!sent) cv_.WaitFor(&mu_, interval_, [&]() REQUIRES(mu_) { return wake_ || stop_; });
      wake_ = false;
      stopped_while_waiting = stop_;
    }
    if (stopped_while_waiting) {
      PushOnce();
      break;
    }
  }
}

bool LogShipper::PushOnce() {
  v1::PushLogsRequest req;
  req.set_node_name(node_name_);
  size_t total = 0;
  {
    MutexLock lock(&mu_);
    for (auto it = files_.begin(); it != files_.end();) {
      File& f = it->second;
      struct stat st {};
      int64_t size = ::stat(f.path.c_str(), &st) == 0 ? st.st_size : 0;
      if (f.done && f.confirmed >= size) {
        it = files_.erase(it);
        continue;
      }
      if (size > f.confirmed && total < kMaxRequest) {
        size_t want = std::min<size_t>(kMaxChunk, static_cast<size_t>(size - f.confirmed));
        std::string data(want, '\0');
        int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? ::pread(fd, data.data(), want, f.confirmed) : -1;
        if (fd >= 0) ::close(fd);
        if (n > 0) {
          data.resize(static_cast<size_t>(n));
          v1::LogChunk* c = req.add_chunks();
          c->set_job_id(f.key.job_id());
          c->set_attempt(f.key.attempt());
          c->set_rank(f.key.rank());
          c->set_offset(f.confirmed);
          c->set_data(std::move(data));
          total += static_cast<size_t>(n);
        }
      }
      ++it;
    }
  }
  if (req.chunks_size() == 0) return false;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + rpc_timeout_);
  AddJoinToken(controller_, &ctx);
  v1::PushLogsResponse resp;
  grpc::Status s = stub_->PushLogs(&ctx, req, &resp);
  if (!s.ok()) {
    EFT_LOG(DEBUG) << "PushLogs failed (" << s.error_message() << "); retrying later";
    ++push_failures_;
    stub_ = NewAgentStub(controller_, kConnectTimeout);
    return false;
  }
  MutexLock lock(&mu_);
  bool progressed = false;
  for (const auto& c : resp.committed()) {
    for (auto& [path, f] : files_) {
      if (KeyText(f.key) != KeyText(c.key())) continue;
      // The controller's end may also be behind ours (it lost data): resend from there.
      progressed |= c.offset() != f.confirmed;
      if (c.offset() > f.confirmed) bytes_shipped_ += static_cast<uint64_t>(c.offset() - f.confirmed);
      f.confirmed = c.offset();
    }
  }
  return progressed;
}

}  // namespace eft::worker
