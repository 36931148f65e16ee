#include "trainer/train/build.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "common/logging.h"
#include "spec/job_spec.h"
#include "trainer/parallel/device.h"

namespace eft::trainer {
namespace {

// LibTorch's intra-op pool and OpenBLAS's own pool each default to every core; together they
// oversubscribe the CPU and spin against each other (2 cores: fp32 training 1.3x slower, see
// docs/benchmarks.md "fp32 and BLAS threads"). Keep OpenBLAS single-threaded unless the user set
// OPENBLAS_NUM_THREADS. Looked up at run time: the BLAS library is whatever libblas.so.3 Debian's
// alternatives point at.
void LimitBlasThreads() {
  if (std::getenv("OPENBLAS_NUM_THREADS")) return;
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
}

}  // namespace

int ConfigureThreads(const TrainConfig& config, const RankEnv& env) {
  int threads = config.threads;
  // torchrun's convention: OMP_NUM_THREADS caps the threads of every rank.
  if (threads <= 0 && std::getenv("OMP_NUM_THREADS")) threads = std::atoi(std::getenv("OMP_NUM_THREADS"));
  if (threads <= 0) {
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, env.local_world));
  }
  at::set_num_threads(threads);
  LimitBlasThreads();
  return threads;
}

Result<c10::Device> ChooseRankDevice(const TrainConfig& config, const RankEnv& env) {
  DeviceRequest request;
  request.requested = config.spec.training().device();
  request.cuda_devices = VisibleCudaDevices();
  request.assigned = GpuAssignedByLauncher();
  request.local_rank = env.local_rank;
  request.local_world = env.local_world;
  request.share_gpus = env.gpu_collectives == GpuCollectives::kGlooStaged;
  EFT_ASSIGN_OR_RETURN(c10::Device device, ChooseDevice(request));
  if (device.is_cpu() && request.cuda_devices > 0 && env.rank == 0) {
    EFT_LOG(WARNING) << "training on the CPU although " << request.cuda_devices << " GPU(s) are visible: "
                     << (request.requested == "cpu" ? "spec.training.device is cpu"
                                                    : std::to_string(request.local_world) +
                                                          " local ranks cannot each have their own");
  }
  return device;
}

Result<std::unique_ptr<TimedCommunicator>> ConnectRanks(const RankEnv& env, c10::Device device, const Clock* clock) {
  RendezvousOptions rv;
  rv.rank = env.rank;
  rv.world = env.world;
  rv.master_addr = env.master_addr;
  rv.master_port = env.master_port;
  rv.node_address = env.node_address;
  if (rv.world > 1) {
    EFT_LOG(INFO) << "rendezvous of " << rv.world << " ranks at " << rv.master_addr << ":" << rv.master_port
                  << (rv.node_address.empty() ? "" : ", this rank at " + rv.node_address);
  }
  if (device.is_cuda() && rv.world > 1 && env.gpu_collectives == GpuCollectives::kGlooStaged && env.rank == 0) {
    EFT_LOG(WARNING) << "EFT_GPU_COLLECTIVES=gloo: the GPU ranks' collectives go through host memory over Gloo, "
                        "many times slower than NCCL (for trying multi-rank jobs on fewer GPUs than ranks)";
  }
  EFT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateCommunicator(rv, device, env.gpu_collectives));
  return std::make_unique<TimedCommunicator>(std::move(comm), clock);
}

// A config.json with plausible but wrong sizes would otherwise allocate the whole (maybe far larger)
// model first and fail late, or run out of memory.
Status CheckWeightsMatchConfig(const SafetensorsDir& weights, const ModelConfig& model, const std::string& dir) {
  std::vector<ParamSpec> specs = RootParamSpecs(model);
  for (int64_t i = 0; i < model.num_hidden_layers; ++i) {
    auto layer = LayerParamSpecs(model, static_cast<int>(i));
    specs.insert(specs.end(), layer.begin(), layer.end());
  }
  auto shape_text = [](const std::vector<int64_t>& shape) { return c10::str(at::IntArrayRef(shape)); };
  for (const ParamSpec& spec : specs) {
    const SafetensorsEntry* entry = weights.Find(spec.name);
    if (entry == nullptr) {
      return Status::NotFound(dir + ": no tensor '" + spec.name + "' in the safetensors files, and " + dir +
                              "/config.json describes a model that has one");
    }
    if (entry->shape != spec.shape) {
      return Status::InvalidArgument(dir + ": " + spec.name + ": shape " + shape_text(entry->shape) +
                                     " in the safetensors files, but config.json gives " + shape_text(spec.shape));
    }
  }
  return Status::Ok();
}

Result<ShardingOptions> BuildShardingOptions(const TrainConfig& config, const PrecisionChoice& precision,
                                             c10::Device device) {
  EFT_ASSIGN_OR_RETURN(ShardingStrategy strategy, ParseShardingStrategy(config.spec.parallel().sharding()));
  ShardingOptions sharding(strategy, config.spec.training().activation_checkpointing() == "full");
  sharding.compute_dtype = precision.dtype;
  sharding.device = device;
  return sharding;
}

LoraOptions BuildLoraOptions(const TrainConfig& config) {
  const v1::TrainingSpec& training = config.spec.training();
  LoraOptions options;
  if (!training.has_lora()) return options;  // docs/lora.md
  const v1::LoraSpec& lora = training.lora();
  options.enabled = true;
  options.r = lora.r();
  options.scale = LoraScale(lora);
  options.dropout = lora.dropout();
  options.modules = LoraTargetModules(lora);
  options.seed = static_cast<uint64_t>(training.seed());
  return options;
}

Result<std::unique_ptr<ShardedLlama>> BuildModel(const ModelConfig& model, const SafetensorsDir& weights,
                                                 const std::string& model_dir, Communicator* comm,
                                                 const ShardingOptions& sharding, const LoraOptions& lora) {
  auto sharded = std::make_unique<ShardedLlama>(model, comm, sharding, lora);
  EFT_RETURN_IF_ERROR(sharded->InitFrom([&](const ParamSpec& spec) -> Result<at::Tensor> {
    return weights.Load(spec.name, at::kFloat);
  }).WithContext("loading " + model_dir));
  return sharded;
}

std::unique_ptr<AdamW> BuildOptimizer(const TrainConfig& config, ShardedLlama& model) {
  AdamWConfig adamw;  // betas and epsilon are PyTorch's defaults; the spec has none of them
  adamw.weight_decay = config.spec.training().weight_decay();
  auto optimizer = std::make_unique<AdamW>(adamw);
  for (FlatParamUnit* u : model.trainable_units()) optimizer->AddParam(u->shard(), u->grad(), u->decay_mask());
  return optimizer;
}

ScheduleConfig BuildSchedule(const TrainConfig& config) {
  const v1::TrainingSpec& training = config.spec.training();
  const v1::ScheduleSpec& schedule = training.schedule();
  ScheduleConfig s;
  s.type = schedule.type();
  s.lr = training.lr();
  s.min_lr = schedule.min_lr();
  s.warmup_ratio = schedule.warmup_ratio();
  s.warmup_steps = schedule.warmup_steps();
  return s;
}

Result<CheckpointPolicy> BuildCheckpointPolicy(const TrainConfig& config) {
  const v1::CheckpointSpec& checkpoint = config.spec.checkpoint();
  const std::optional<FullWriteMode> full_write = FullWriteModeFromName(checkpoint.full_write());
  if (!full_write) {
    return Status::InvalidArgument("spec.checkpoint.full_write (\"" + checkpoint.full_write() +
                                   "\") must be one of parallel, rank0");
  }
  CheckpointPolicy policy{};
  policy.root = checkpoint.dir();
  policy.every_steps = checkpoint.every_steps();
  policy.full_every_steps = checkpoint.full_every_steps();
  policy.keep_last = checkpoint.keep_last();
  policy.hf_files.model_dirs = {config.spec.model()};
  const std::string& chat_template = config.spec.data().chat_template();
  if (chat_template != "auto") policy.hf_files.chat_template = chat_template;
  policy.require_resume = checkpoint.require_resume();
  policy.keep_best = checkpoint.keep_best();
  policy.full_write = *full_write;
  return policy;
}

MemorySnapshotPolicy BuildMemorySnapshotPolicy(const TrainConfig& config, const RankEnv& env) {
  MemorySnapshotPolicy policy;
  policy.dir = env.snapshot_dir;
  // Normalized specs hold "auto" or a number; anything else (a config built by hand) means off.
  policy.every_steps = spec::MemorySnapshotInterval(config.spec.checkpoint().memory_every_steps()).value_or(0);
  policy.attempt = AttemptId{env.job_id, env.attempt};
  return policy;
}

}  // namespace eft::trainer
