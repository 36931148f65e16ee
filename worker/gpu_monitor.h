// GpuMonitor: per-GPU utilisation and memory from nvidia-smi, for the worker's /metrics.
//
// nvidia-smi can take a second or hang on a sick GPU, so it never runs on the scrape path: a thread
// polls it every `interval` with a timeout (the process is killed when it runs over), and scrapes
// read the newest readings. When a poll fails the readings are dropped, so a dead GPU's series go
// stale instead of repeating old values. The command sits behind GpuQuery so tests can feed it text.
//
// JoinGpusToJobs labels each of this worker's GPUs with the job whose rank holds its slot, so
// dashboards can put GPU utilisation next to the job's loss.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace eft::worker {

struct GpuReading {
  std::string index;  // nvidia-smi's index, the `gpu` label
  std::string uuid;   // "GPU-..."; matches CUDA_VISIBLE_DEVICES given as UUIDs
  // Absent when nvidia-smi says "[N/A]" or "[Not Supported]" (e.g. utilisation on some MIG setups).
  std::optional<double> utilization_ratio;  // 0..1
  std::optional<double> memory_used_bytes;
  std::optional<double> memory_total_bytes;
};

// The arguments that produce what ParseNvidiaSmiCsv reads.
inline constexpr const char* kNvidiaSmiQueryArgs[] = {
    "--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"};

// Parses one line per GPU: "0, GPU-5f..., 37, 1024, 81559" (percent and MiB). INVALID_ARGUMENT
// names the line that does not have five fields or a number where one must be.
Result<std::vector<GpuReading>> ParseNvidiaSmiCsv(std::string_view text);

// Runs the query and returns its standard output.
class GpuQuery {
 public:
  virtual ~GpuQuery() = default;
  virtual Result<std::string> Run(std::chrono::milliseconds timeout) = 0;
};

// `program` (default "nvidia-smi", looked up on PATH) with kNvidiaSmiQueryArgs. A run past the
// timeout is SIGKILLed; a non-zero exit or a missing program is an error.
std::unique_ptr<GpuQuery> MakeNvidiaSmiQuery(std::string program = "nvidia-smi");

class GpuMonitor {
 public:
  GpuMonitor(std::unique_ptr<GpuQuery> query, std::chrono::milliseconds interval,
             std::chrono::milliseconds timeout);
  ~GpuMonitor();  // Stop()s
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Polls at once, then every interval on a thread of its own.
  void Start();
  void Stop() EXCLUDES(mu_);
  // One poll on the calling thread (what the thread does; tests call it directly).
  Status PollOnce() EXCLUDES(mu_);

  std::vector<GpuReading> Latest() const EXCLUDES(mu_);  // empty until a poll succeeded, and after one failed
  uint64_t failures() const EXCLUDES(mu_);               // polls that failed

 private:
  void Loop() EXCLUDES(mu_);

  // Set at construction, read-only after. The query runs without mu_ (it may take seconds), so
  // scrapes never wait for nvidia-smi.
  const std::unique_ptr<GpuQuery> query_;
  const std::chrono::milliseconds interval_;
  const std::chrono::milliseconds timeout_;

  mutable Mutex mu_;
  CondVar cv_;  // notified when stop_ is set
  bool stop_ GUARDED_BY(mu_) = false;
  bool logged_failure_ GUARDED_BY(mu_) = false;
  std::vector<GpuReading> latest_ GUARDED_BY(mu_);
  uint64_t failures_ GUARDED_BY(mu_) = 0;
  std::thread thread_;  // started by Start, joined by Stop: the owner's thread only
};

// One GPU of this worker with the job using it.
struct GpuUse {
  std::string gpu;  // GpuReading::index
  std::string job;  // "" when no rank holds the slot
  GpuReading reading;
};

// `gpu_ids[slot]` is the CUDA_VISIBLE_DEVICES value of that slot (an index or a UUID);
// `slot_jobs` maps the slots of live ranks to their job. GPUs that are not one of this worker's
// slots are left out: they belong to another worker, or to nobody eft knows.
std::vector<GpuUse> JoinGpusToJobs(const std::vector<GpuReading>& readings, const std::vector<std::string>& gpu_ids,
                                   const std::map<int, std::string>& slot_jobs);

}  // namespace eft::worker
