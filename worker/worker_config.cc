#include "worker/worker_config.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace eft::worker {

std::vector<std::string> DiscoverGpus() {
  std::vector<std::string> ids;
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string value = env;
    if (value.empty() || value == "-1") return ids;
    std::stringstream ss(value);
    std::string id;
    while (std::getline(ss, id, ',')) {
      if (!id.empty()) ids.push_back(id);
    }
    return ids;
  }
  FILE* p = ::popen("nvidia-smi -L 2>/dev/null", "r");
  if (p == nullptr) return ids;
  char line[512];
  while (std::fgets(line, sizeof(line), p)) {
    int index = -1;
    if (std::sscanf(line, "GPU %d:", &index) == 1 && index >= 0) ids.push_back(std::to_string(index));
  }
  ::pclose(p);
  return ids;
}

Status FinalizeWorkerConfig(WorkerConfig* c) {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  if (c->name.empty()) c->name = host;
  if (c->address.empty()) c->address = host;
  if (c->work_dir.empty()) c->work_dir = "/tmp/eft-worker-" + c->name;
  if (c->controller.empty()) return Status::InvalidArgument("--controller: must be HOST:PORT");
  for (char ch : c->name) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) {
      return Status::InvalidArgument("--name '" + c->name + "': use letters, digits, '-', '_' and '.' only");
    }
  }
  std::vector<std::string> gpus = DiscoverGpus();
  if (c->slots < 0) return Status::InvalidArgument("--slots: must be >= 1");
  if (!gpus.empty()) {
    if (c->slots > static_cast<int>(gpus.size())) {
      return Status::InvalidArgument("--slots " + std::to_string(c->slots) + ": only " + std::to_string(gpus.size()) +
                                     " GPUs are visible (CUDA_VISIBLE_DEVICES / nvidia-smi)");
    }
    if (c->slots == 0) c->slots = static_cast<int>(gpus.size());
    gpus.resize(c->slots);
    c->gpu_ids = gpus;
  } else if (c->slots == 0) {
    c->slots = 1;
  }
  return Status::Ok();
}

}  // namespace eft::worker
