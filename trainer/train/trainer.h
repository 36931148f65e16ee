// Trainer: one rank's training run, start to end. The loop itself is Run(); one optimizer step is
// Step(). Everything it uses (communicator, model, data, optimizer) is built by Create, but for its
// TrainerDeps: the test hooks and the clock, which it hands on to the checkpointer.
#pragma once

#include <memory>
#include <vector>

#include <c10/core/DeviceGuard.h>

#include "common/clock.h"
#include "common/status.h"
#include "trainer/checkpoint/checkpointer.h"
#include "trainer/checkpoint/memory_snapshot.h"
#include "trainer/data/sampler.h"
#include "trainer/data/token_dataset.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/schedule.h"
#include "trainer/parallel/communicator.h"
#include "trainer/parallel/device.h"
#include "trainer/parallel/sharded_llama.h"
#include "trainer/parallel/timed_communicator.h"
#include "trainer/train/evaluation.h"
#include "trainer/runtime/debug_hooks.h"
#include "trainer/runtime/events.h"
#include "trainer/tracking/tensorboard_run.h"
#include "trainer/train/launch.h"
#include "trainer/train/peak_flops.h"
#include "trainer/train/precision.h"
#include "trainer/train/step_profiler.h"
#include "trainer/data/packing.h"
#include "trainer/train/train_config.h"
#include "trainer/train/training_data.h"

namespace eft::trainer {

struct StepResult {
  int64_t step = 0;  // 1-based
  double loss = 0;   // sum of token losses over all ranks / trained tokens over all ranks
  double grad_norm = 0;
  double lr = 0;
  int64_t tokens = 0;  // over all ranks
  int64_t trained_tokens = 0;
  double seconds = 0;
  // This rank's timeline (see rank::StepEvent): batches, compute, blocked in collectives, optimizer.
  double data_s = 0, compute_s = 0, comm_wait_s = 0, optimizer_s = 0;
};

// What a Trainer uses besides its configuration and rank environment, so that tests can replace it.
// Not owned: both must outlive the trainer.
struct TrainerDeps {
  // The test hooks (trainer/runtime/debug_hooks.h), which eft-train's main reads from its
  // environment. Unset: none.
  const DebugHooks* hooks = nullptr;
  // What the step, checkpoint and evaluation times (the events, the progress lines) are read on.
  // Unset: RealClock::Get().
  const Clock* clock = nullptr;
};

class Trainer {
 public:
  // Rendezvous, model (from the spec's model), data, optimizer. Errors in the configuration, the
  // model or the data are InvalidArgument (the caller exits 2).
  static Result<std::unique_ptr<Trainer>> Create(TrainConfig config, RankEnv env, TrainerDeps deps = {});

  // Trains to the end (epochs or max_steps), checkpointing on the way and writing a full checkpoint
  // (and output_dir, if set) at the end, then under checkpoint.merge_lora the merged model. Collective. Aborted when it stopped on request (SIGTERM
  // on any rank: see RequestStop) after saving a checkpoint; the caller exits 75.
  Status Run();
  // Asks every rank to stop after the current step (async-signal-safe: call it from a handler).
  static void RequestStop();
  // True until Run() starts its first step: a stop request may then end the process at once
  // (async-signal-safe).
  static bool NothingToSaveYet();
  // One optimizer step. Collective.
  Result<StepResult> Step();

  int64_t total_steps() const { return total_steps_; }
  int64_t completed_steps() const { return step_; }
  const c10::Device& device() const { return device_; }
  ShardedLlama& model() { return *model_; }
  Communicator& comm() { return *comm_; }
  // Bytes this rank holds between steps for parameters, gradients and optimizer state.
  int64_t PersistentBytes() const;

 private:
  Trainer(TrainConfig config, RankEnv env, TrainerDeps deps)
      : config_(std::move(config)),
        env_(std::move(env)),
        hooks_(deps.hooks != nullptr ? deps.hooks : DebugHooks::None()),
        clock_(deps.clock != nullptr ? deps.clock : RealClock::Get()),
        events_(env_.events_fd) {}
  // Create's steps: the training (and eval) set, tokenized, split and packed; the resume from
  // EFT_RESUME_FROM (or, on a retry, from what the checkpoint directory holds); the start-up line.
  Result<PackingStats> PrepareData(int64_t vocab_size);
  Status ResumeIfAsked();
  void LogSnapshots() const;
  void LogStart(const ModelConfig& model, const PackingStats& packing, const PrecisionChoice& precision,
                int threads) const;
  void Report(const StepResult& r);
  TrainerState State() const;
  void ReportMemory();
  Status SaveFinalModel();
  // checkpoint.merge_lora, rank 0, after the final adapter directory: the merged model's directory.
  Result<std::string> MergeFinalAdapter();
  // checkpoint.export_gguf, rank 0, last: the final model (`merged` when a LoRA run merged it) as one
  // GGUF file; an `exported` event says where.
  Status ExportFinalGguf(const std::string& merged);
  // Evaluation (trainer/train/evaluation.h): the eval sets of data.eval, or the one of
  // data.eval_fraction (which also takes it out of dataset_); whether this step is evaluated; the
  // evaluation of every set, each reported on a progress line and as an EvalEvent. Collective.
  Status PrepareEval(int64_t vocab_size, const TextPipeline& text);
  bool EvalDue(bool last) const;
  void RunEval();
  // LoRA: PEFT's initialisation (seeded), or training.lora.init_from's adapter.
  Status InitAdapters();

  TrainConfig config_;
  ScheduleConfig schedule_;  // the spec's training.lr and training.schedule
  RankEnv env_;
  const DebugHooks* hooks_;
  const Clock* clock_;
  // Rank 0's TensorBoard run, which events_ hands every event to (null: none); declared before
  // events_ so that it outlives whatever may still emit.
  std::unique_ptr<TensorBoardRun> tensorboard_;
  EventWriter events_;
  c10::Device device_ = c10::Device(c10::kCPU);
  PeakFlops peak_;  // what MFU is measured against (none: not reported)
  std::unique_ptr<c10::DeviceGuard> device_guard_;
  std::unique_ptr<TimedCommunicator> comm_;
  std::unique_ptr<ShardedLlama> model_;
  std::unique_ptr<AdamW> optimizer_;
  TokenDataset dataset_;
  DatasetStats documents_;  // of the training set before packing
  std::unique_ptr<GlobalSampler> sampler_;
  int64_t total_steps_ = 0;
  int64_t step_ = 0;  // completed optimizer steps
  SteadyTime started_at_;  // of Run()
  int64_t pad_token_id_ = 0;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<MemorySnapshotter> snapshots_;
  std::unique_ptr<StepProfiler> profiler_;
  std::vector<double> loss_tail_;
  nlohmann::json compat_;
  struct EvalSet {
    std::string name;
    TokenDataset data;   // packed like dataset_
    std::string source;  // where it came from, for the log
  };
  std::vector<EvalSet> eval_sets_;  // data.eval's order; the first is the one keep_best ranks by
  int64_t last_eval_step_ = -1;     // the newest evaluation, for the checkpoint saved at that step
  double last_eval_loss_ = 0;       // of the first set
};

}  // namespace eft::trainer
