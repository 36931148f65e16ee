// The pieces of a training run, each built from the TrainConfig (the normalized spec) by one function,
// as TorchTitan's build_model / parallelize / build_optimizers / checkpoint manager: Trainer::Create
// calls them in order. Every option struct below the trainer (ShardingOptions, LoraOptions,
// CheckpointPolicy, AdamWConfig, ScheduleConfig) is filled here from the spec's fields and nowhere
// else, so a job's defaults are the spec's alone (spec/job_spec.cc) and a new field has one place to
// be wired.
//
// Errors in the configuration or the model directory are InvalidArgument or NotFound (the caller
// exits 2); those of the rendezvous are the communicator's (trainer/parallel/communicator.h).
#pragma once

#include <memory>

#include <c10/core/Device.h>

#include "common/status.h"
#include "trainer/checkpoint/checkpointer.h"
#include "trainer/checkpoint/memory_snapshot.h"
#include "trainer/io/safetensors.h"
#include "trainer/model/model_config.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/schedule.h"
#include "trainer/parallel/sharded_llama.h"
#include "trainer/parallel/timed_communicator.h"
#include "trainer/train/launch.h"
#include "trainer/train/precision.h"
#include "trainer/train/train_config.h"

namespace eft::trainer {

// Intra-op threads for this rank (config.threads, else OMP_NUM_THREADS as torchrun, else the cores
// shared among the node's ranks), set in LibTorch; OpenBLAS kept to one thread. Returns the count.
int ConfigureThreads(const TrainConfig& config, const RankEnv& env);

// training.device resolved for this rank (trainer/parallel/device.h); warns on rank 0 when GPUs are
// visible but the rank trains on the CPU.
Result<c10::Device> ChooseRankDevice(const TrainConfig& config, const RankEnv& env);

// The rendezvous and this rank's communicator (Gloo or NCCL by device), timed on `clock` for the step
// events.
Result<std::unique_ptr<TimedCommunicator>> ConnectRanks(const RankEnv& env, c10::Device device, const Clock* clock);

// Every parameter config.json implies is in the safetensors files, with its shape: read from the
// headers before anything of the model's size is allocated.
Status CheckWeightsMatchConfig(const SafetensorsDir& weights, const ModelConfig& model, const std::string& dir);

// parallel.sharding, activation checkpointing, the agreed precision and the device.
Result<ShardingOptions> BuildShardingOptions(const TrainConfig& config, const PrecisionChoice& precision,
                                             c10::Device device);
// training.lora (disabled when absent); dropout seeded by training.seed.
LoraOptions BuildLoraOptions(const TrainConfig& config);

// The sharded model with the base weights of `weights` loaded (each rank keeps its slices). LoRA
// adapters are not initialised here (Trainer::InitAdapters: PEFT's init or an adapter directory).
Result<std::unique_ptr<ShardedLlama>> BuildModel(const ModelConfig& model, const SafetensorsDir& weights,
                                                 const std::string& model_dir, Communicator* comm,
                                                 const ShardingOptions& sharding, const LoraOptions& lora);

// AdamW over the model's trainable units (the adapters under LoRA).
std::unique_ptr<AdamW> BuildOptimizer(const TrainConfig& config, ShardedLlama& model);
// training.lr and training.schedule.
ScheduleConfig BuildSchedule(const TrainConfig& config);

// spec.checkpoint: where, how often, retention, the full save's write path.
// hf_files: what every output directory (full checkpoint, final model or adapter) carries besides
// weights and config.json: the model directory's tokenizer, templates, generation config and licence,
// and the chat template training rendered its data with when data.chat_template names one.
Result<CheckpointPolicy> BuildCheckpointPolicy(const TrainConfig& config);

// checkpoint.memory_every_steps with the rank's EFT_SNAPSHOT_DIR and attempt: off without a directory.
MemorySnapshotPolicy BuildMemorySnapshotPolicy(const TrainConfig& config, const RankEnv& env);

}  // namespace eft::trainer
