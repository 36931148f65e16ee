#include "trainer/train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/logging.h"
#include "common/stopwatch.h"
#include "trainer/train/build.h"
#include "trainer/checkpoint/full_state.h"
#include "trainer/checkpoint/merge_lora.h"
#include "trainer/export/gguf_export.h"
#include "trainer/checkpoint/peft_adapter.h"
#include "trainer/io/safetensors.h"
#include "trainer/kernels/gpu_info.h"
#include "trainer/kernels/kernels.h"
#include "trainer/data/packing.h"
#include "trainer/train/evaluation.h"
#include "trainer/train/memory_advice.h"
#include "trainer/train/precision.h"
#include "trainer/train/training_data.h"
#include "trainer/optim/clip.h"
#include "trainer/optim/schedule.h"

namespace eft::trainer {
namespace {

// For the start-up line on a GPU: which kernels run (docs/gpu.md, "Fused kernels").
std::string KernelsNote(const c10::Device& device) {
  if (!device.is_cuda()) return "";
  if (UseFusedKernels(device, at::kFloat)) return " with eft's fused kernels";
  const GpuProperties gpu = GetGpuProperties(device);
  if (FusedCudaKernelsBuilt() && !FusedKernelsRunOn(gpu)) {
    return " with ATen's kernels (eft's fused kernels need compute capability 8.0 or later: " + gpu.describe() + ")";
  }
  return FusedCudaKernelsBuilt() ? " with ATen's kernels (EFT_FUSED_KERNELS=0)" : " with ATen's kernels";
}

// For the start-up line: what MFU is measured against, or on a GPU why it is not reported.
std::string PeakNote(const PeakFlops& peak) {
  if (peak.source.empty()) return "";
  if (peak.tflops <= 0) return ", MFU not reported (" + peak.source + ")";
  char tflops[32];
  std::snprintf(tflops, sizeof tflops, "%g", peak.tflops);
  return std::string(", MFU against ") + tflops + " TFLOP/s per rank (" + peak.source + ")";
}

namespace fs = std::filesystem;

std::atomic<bool> g_stop_requested{false};
// Until the first step starts a stop request ends the process at once: loading, tokenizing, the
// rendezvous and resuming have nothing to save, and may block for minutes (a peer that never
// arrives). Lock-free, so the signal handler may read it.
std::atomic<bool> g_nothing_to_save{true};
static_assert(std::atomic<bool>::is_always_lock_free);

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::Create(TrainConfig config, RankEnv env, TrainerDeps deps) {
  const ScheduleConfig schedule = BuildSchedule(config);
  EFT_RETURN_IF_ERROR(ValidateSchedule(schedule));  // the schedule's own precondition
  EFT_ASSIGN_OR_RETURN(const CheckpointPolicy policy, BuildCheckpointPolicy(config));
  EFT_ASSIGN_OR_RETURN(const ProfileWindow profile, ParseProfileWindow(config.profile_steps, config.profile_dir));
  if (config.spec.checkpoint().merge_lora() && config.output_dir.empty() && config.spec.checkpoint().dir().empty()) {
    return Status::InvalidArgument("spec.checkpoint.merge_lora: the merged model goes to <--output-dir>/merged or "
                                   "<spec.checkpoint.dir>/merged; set one of them");
  }
  if (!config.spec.checkpoint().export_gguf().empty() && config.output_dir.empty() &&
      config.spec.checkpoint().dir().empty()) {
    return Status::InvalidArgument("spec.checkpoint.export_gguf: the GGUF file goes to <--output-dir>/model-<type>.gguf "
                                   "or <spec.checkpoint.dir>/model-<type>.gguf; set one of them");
  }
  std::unique_ptr<Trainer> t(new Trainer(std::move(config), std::move(env), deps));
  t->schedule_ = schedule;
  const TrainConfig& c = t->config_;
  const v1::TrainingSpec& training = c.spec.training();
  const int threads = ConfigureThreads(c, t->env_);

  // A loopback address across hosts could never rendezvous: said before anything slow is done
  // (docs/architecture.md, "Rank traffic and the node's address").
  EFT_ASSIGN_OR_RETURN(t->device_, ChooseRankDevice(c, t->env_));
  EFT_RETURN_IF_ERROR(CheckRankAddresses(
      t->env_, t->device_.is_cpu() || t->env_.gpu_collectives == GpuCollectives::kGlooStaged));

  // The model directory and the data first: their errors are the user's, and cost no rendezvous.
  const std::string& model_dir = c.spec.model();
  EFT_ASSIGN_OR_RETURN(ModelConfig model_config, ModelConfig::FromHfDir(model_dir));
  EFT_ASSIGN_OR_RETURN(auto weights, SafetensorsDir::Open(model_dir));
  EFT_RETURN_IF_ERROR(CheckWeightsMatchConfig(*weights, model_config, model_dir));
  EFT_ASSIGN_OR_RETURN(const PackingStats packing, t->PrepareData(model_config.vocab_size));

  // Kernels and NCCL pick the current device where none is given: make it this rank's own.
  t->device_guard_ = std::make_unique<c10::DeviceGuard>(t->device_);
  EFT_ASSIGN_OR_RETURN(t->comm_, ConnectRanks(t->env_, t->device_, t->clock_));
  EFT_ASSIGN_OR_RETURN(const PrecisionChoice precision,
                       AgreePrecision(training.precision(), t->device_, DetectCpuBf16(), GetGpuProperties(t->device_),
                                      t->comm_.get()));
  EFT_ASSIGN_OR_RETURN(const ShardingOptions sharding, BuildShardingOptions(c, precision, t->device_));
  t->peak_ = ChoosePeakFlops(c.peak_tflops, t->device_, GetGpuProperties(t->device_).name, precision.dtype);
  t->hooks_->StallIfAsked("load");
  EFT_ASSIGN_OR_RETURN(t->model_, BuildModel(model_config, *weights, model_dir, t->comm_.get(), sharding,
                                             BuildLoraOptions(c)));
  if (training.has_lora()) EFT_RETURN_IF_ERROR(t->InitAdapters());
  t->pad_token_id_ = model_config.pad_token_id >= 0 ? model_config.pad_token_id : 0;
  t->optimizer_ = BuildOptimizer(c, *t->model_);

  t->sampler_ = std::make_unique<GlobalSampler>(t->dataset_.size(), training.global_batch_size(),
                                                static_cast<uint64_t>(training.seed()));
  t->total_steps_ = training.epochs() * t->sampler_->steps_per_epoch();
  if (training.max_steps() > 0) t->total_steps_ = std::min<int64_t>(t->total_steps_, training.max_steps());

  t->checkpointer_ = std::make_unique<Checkpointer>(policy, t->comm_.get(), t->model_.get(), t->optimizer_.get(),
                                                    &t->events_, t->hooks_, t->clock_);
  t->snapshots_ = std::make_unique<MemorySnapshotter>(BuildMemorySnapshotPolicy(c, t->env_), t->comm_.get(),
                                                      t->model_.get(), t->optimizer_.get(), &t->events_, t->hooks_,
                                                      t->clock_);
  t->compat_ = CompatibilityRecord(c, model_config, t->dataset_.stats().examples, t->dataset_.stats().tokens);
  // Before anything is resumed: a stale attempt stops here, and from here on nothing an older
  // attempt commits is resumed from (trainer/checkpoint/fence.h).
  EFT_RETURN_IF_ERROR(t->checkpointer_->BeginAttempt(AttemptId{t->env_.job_id, t->env_.attempt}));
  EFT_RETURN_IF_ERROR(t->ResumeIfAsked());
  t->profiler_ = std::make_unique<StepProfiler>(profile, t->env_.rank, t->device_);
  if (t->env_.rank == 0) {
    t->LogStart(model_config, packing, precision, threads);
    t->LogSnapshots();
    // The job's TensorBoard run (docs/tracking.md), written from the events rank 0 emits.
    t->tensorboard_ = TensorBoardRun::Start(TensorBoardDir(c.spec.tracking().tensorboard(), c.spec.checkpoint().dir()),
                                            {t->env_.attempt, t->env_.world, t->step_}, t->clock_);
    if (t->tensorboard_) t->events_.SetObserver([tb = t->tensorboard_.get()](const rank::Event& e) { tb->Observe(e); });
  }
  return t;
}

Result<PackingStats> Trainer::PrepareData(int64_t vocab_size) {
  const TrainConfig& c = config_;
  const v1::DataSpec& data_spec = c.spec.data();
  EFT_ASSIGN_OR_RETURN(LoadedText text, LoadTextPipeline(c));
  hooks_->StallIfAsked("tokenize");
  EFT_ASSIGN_OR_RETURN(PreparedData data, PrepareTrainingData(c, vocab_size, text.pipeline()));
  dataset_ = std::move(data.documents);
  if (dataset_.size() == 0) {
    return Status::InvalidArgument("spec.data.train: " + data_spec.train() + " holds no usable examples (" +
                                   data.stats.ToJson().dump() + ")");
  }
  documents_ = dataset_.stats();
  if (env_.rank == 0) {
    const SftBuildStats& st = data.stats;
    EFT_LOG(INFO) << "data: " << st.examples << " examples from " << st.lines << " lines of " << data_spec.train()
                  << " ("
                  << (data.from_cache ? "read from " : "built into ") << data.cache_file << "); "
                  << st.tokens << " tokens, " << st.trained_tokens << " trained, " << st.truncated << " truncated, "
                  << st.dropped_long << " dropped as too long, " << st.skipped_bad << " bad lines skipped"
                  << (st.first_bad.empty() ? std::string() : " (first: " + st.first_bad + ")") << ", "
                  << st.no_trained << " with nothing to train";
  }
  EFT_RETURN_IF_ERROR(PrepareEval(vocab_size, text.pipeline()));
  PackingStats packing;
  if (data_spec.packing()) dataset_ = PackDataset(dataset_, data_spec.max_seq_len(), &packing);
  return packing;
}

Status Trainer::ResumeIfAsked() {
  // A retry whose controller knew of no checkpoint (the save's event was lost, or the controller
  // itself was replaced, as on a Slurm requeue) still resumes from what is on disk.
  const std::string& checkpoint_dir = config_.spec.checkpoint().dir();
  if (env_.resume_from.empty() && env_.attempt > 1 && !checkpoint_dir.empty()) {
    if (env_.rank == 0) {
      EFT_LOG(INFO) << "attempt " << env_.attempt << " without EFT_RESUME_FROM: looking for a checkpoint in "
                    << checkpoint_dir;
    }
    env_.resume_from = "auto";
  }
  if (env_.resume_from.empty()) return Status::Ok();
  EFT_ASSIGN_OR_RETURN(std::optional<TrainerState> resumed, checkpointer_->Resume(env_.resume_from, compat_));
  if (resumed) {
    step_ = resumed->step;
    loss_tail_ = resumed->loss_tail;
  }
  return Status::Ok();
}

void Trainer::LogStart(const ModelConfig& model, const PackingStats& packing, const PrecisionChoice& precision,
                       int threads) const {
  const v1::JobSpec& spec = config_.spec;
  const DatasetStats& st = documents_;
  if (spec.data().packing()) {
    EFT_LOG(INFO) << "packed " << packing.documents << " documents into " << packing.rows << " sequences of up to "
                  << spec.data().max_seq_len() << " tokens (" << static_cast<int>(packing.efficiency() * 1000) / 10.0
                  << "% tokens, the rest padding)";
  }
  EFT_LOG(INFO) << "eft-train: " << model.model_type << " " << model.NumParameters() / 1e6 << "M parameters, world size "
                << env_.world << " (" << env_.source << ", " << comm_->backend() << "), " << st.examples
                << " examples (" << st.tokens << " tokens, " << st.truncated << " truncated), " << total_steps_
                << " steps of " << spec.training().global_batch_size() << " sequences, " << precision.name << " ("
                << precision.reason << "), sharding " << spec.parallel().sharding() << ", activation checkpointing "
                << spec.training().activation_checkpointing() << ", on " << device_.str() << KernelsNote(device_)
                << ", " << threads << " threads per rank" << PeakNote(peak_);
}

void Trainer::LogSnapshots() const {
  const std::string& every = config_.spec.checkpoint().memory_every_steps();
  if (snapshots_->enabled()) {
    EFT_LOG(INFO) << "memory snapshots into " << env_.snapshot_dir << ": "
                  << (snapshots_->interval() > 0
                          ? "every " + std::to_string(snapshots_->interval()) + (snapshots_->interval() == 1 ? " step" : " steps")
                          : std::string("auto (decided after the first step)"))
                  << " (docs/checkpoints.md, \"Memory snapshots\")";
  } else if (env_.snapshot_dir.empty() && every != "auto" && every != "0") {
    EFT_LOG(INFO) << "checkpoint.memory_every_steps " << every << ": no " << rank::env::kSnapshotDir
                  << " (eft-worker gives its ranks one): no memory snapshots";
  }
}

Status Trainer::PrepareEval(int64_t vocab_size, const TextPipeline& text) {
  const v1::DataSpec& data = config_.spec.data();
  const double eval_fraction = data.eval_fraction();
  if (eval_fraction > 0) {
    EFT_ASSIGN_OR_RETURN(HeldOutSplit split, SplitHeldOut(dataset_, eval_fraction));
    dataset_ = std::move(split.train);
    eval_sets_.push_back(
        {"eval", std::move(split.eval), "a held-out " + std::to_string(eval_fraction) + " of " + data.train()});
  }
  for (const v1::EvalSet& set : data.eval()) {
    EFT_ASSIGN_OR_RETURN(PreparedData prepared, PrepareEvalData(config_, set, vocab_size, text));
    eval_sets_.push_back({set.name(), std::move(prepared.documents), set.path()});
  }
  if (eval_sets_.empty() && config_.spec.checkpoint().keep_best()) {
    return Status::InvalidArgument("spec.checkpoint.keep_best needs eval data: set spec.data.eval or "
                                   "spec.data.eval_fraction");
  }
  for (EvalSet& set : eval_sets_) {
    if (set.data.stats().trained_tokens == 0) {
      return Status::InvalidArgument(std::string(eval_fraction > 0 ? "spec.data.eval_fraction" : "spec.data.eval") +
                                     (eval_fraction > 0 ? "" : " " + set.name) + ": the eval set (" +
                                     std::to_string(set.data.size()) +
                                     " examples) has no trained tokens to compute a loss on");
    }
    if (env_.rank == 0) {
      EFT_LOG(INFO) << "eval set " << set.name << ": " << set.data.size() << " examples, "
                    << set.data.stats().trained_tokens << " trained tokens, from " << set.source;
    }
    if (data.packing()) set.data = PackDataset(set.data, data.max_seq_len());
  }
  return Status::Ok();
}

bool Trainer::EvalDue(bool last) const {
  if (eval_sets_.empty()) return false;
  if (last) return true;
  const int64_t every = config_.spec.training().eval_every_steps();
  if (every > 0) return step_ % every == 0;
  const int64_t full = config_.spec.checkpoint().full_every_steps();
  return checkpointer_->enabled() && full > 0 && step_ % full == 0;
}

void Trainer::RunEval() {
  for (size_t i = 0; i < eval_sets_.size(); ++i) {
    const EvalSet& set = eval_sets_[i];
    EvalResult r =
        Evaluate(*model_, *comm_, set.data, config_.spec.training().micro_batch_size(), pad_token_id_, clock_);
    if (i == 0) {
      last_eval_step_ = step_;
      last_eval_loss_ = r.loss;
    }
    if (env_.rank != 0) continue;
    // One set keeps the line it always had; several name theirs.
    const std::string label = eval_sets_.size() == 1 ? "" : " " + set.name;
    std::printf("eval  %lld/%lld |%s eval_loss %.4f | %lld tokens | %.1fs\n", static_cast<long long>(step_),
                static_cast<long long>(total_steps_), label.c_str(), r.loss, static_cast<long long>(r.tokens),
                r.seconds);
    std::fflush(stdout);
    rank::EvalEvent event{step_, r.loss, r.tokens, r.seconds};
    event.set = set.name;
    event.index = static_cast<int>(i);
    events_.Emit(event);
  }
}

Result<StepResult> Trainer::Step() {
  const Stopwatch watch(clock_);
  const double blocked0 = comm_->blocked_seconds();
  const int64_t spe = sampler_->steps_per_epoch();
  const int64_t epoch = step_ / spe, in_epoch = step_ % spe;
  std::vector<int64_t> examples = sampler_->StepExamples(epoch, in_epoch);
  auto positions = RankMicroBatchPositions(static_cast<int64_t>(examples.size()), comm_->rank(), comm_->world(),
                                           config_.spec.training().micro_batch_size());
  std::vector<Batch> batches;
  int64_t trained = 0, tokens = 0;
  for (const auto& micro : positions) {
    std::vector<int64_t> indices;
    for (int64_t pos : micro) indices.push_back(examples[static_cast<size_t>(pos)]);
    batches.push_back(Collate(dataset_, indices, pad_token_id_));
    // The example's place in the step's batch keys its LoRA dropout: the same at every world size.
    if (!micro.empty()) batches.back().sample_keys = at::tensor(micro, at::kLong);
    trained += batches.back().trained_tokens;
    tokens += batches.back().tokens;
  }
  const double t_data = watch.Seconds();
  // The loss is a sum over every trained token of the step divided by their global count, so every
  // world size computes the same number (up to float rounding).
  at::Tensor counts = at::tensor({static_cast<double>(trained), static_cast<double>(tokens)}, at::kDouble);
  comm_->AllReduceSum(counts);
  const int64_t global_trained = static_cast<int64_t>(counts[0].item<double>());
  const int64_t global_tokens = static_cast<int64_t>(counts[1].item<double>());
  const double scale = global_trained > 0 ? 1.0 / static_cast<double>(global_trained) : 0.0;

  model_->SetStep(step_);
  model_->BeginStep(static_cast<int64_t>(batches.size()));
  double loss_sum = 0;
  for (const Batch& b : batches) loss_sum += model_->ForwardBackward(b, scale);
  model_->EndStep();
  const double t_optimizer = watch.Seconds();
  const double blocked_before_optimizer = comm_->blocked_seconds();

  at::Tensor total = at::tensor({loss_sum}, at::kDouble);
  comm_->AllReduceSum(total);
  std::vector<at::Tensor> grads;
  for (FlatParamUnit* u : model_->trainable_units()) grads.push_back(u->grad());
  const double grad_norm = ClipGradNorm(grads, config_.spec.training().max_grad_norm(),
                                        [&](at::Tensor& t) { comm_->AllReduceSum(t); });
  const double lr = LearningRate(schedule_, step_, total_steps_);
  if (std::isfinite(grad_norm)) {
    checkpointer_->BeforeUpdate();  // a sharded save may still be reading the shards in place
    snapshots_->BeforeUpdate();     // and so may a memory snapshot
    optimizer_->Step(lr);
  } else if (env_.rank == 0) {
    EFT_LOG(WARNING) << "step " << step_ + 1 << ": gradient norm is " << grad_norm << "; update skipped";
  }
  model_->AfterOptimizerStep();
  model_->ZeroGrad();
  ++step_;
  const double t_end = watch.Seconds();

  StepResult r;
  r.step = step_;
  r.loss = total.item<double>() * scale;
  r.grad_norm = grad_norm;
  r.lr = lr;
  r.tokens = global_tokens;
  r.trained_tokens = global_trained;
  r.seconds = t_end;
  r.data_s = t_data;
  r.comm_wait_s = comm_->blocked_seconds() - blocked0;
  r.optimizer_s = (t_end - t_optimizer) - (comm_->blocked_seconds() - blocked_before_optimizer);
  // The rest: forward and backward, less what they spent blocked in collectives.
  r.compute_s = std::max(0.0, r.seconds - r.data_s - r.comm_wait_s - r.optimizer_s);
  return r;
}

void Trainer::Report(const StepResult& r) {
  if (env_.rank != 0) return;
  const double tps = r.seconds > 0 ? static_cast<double>(r.tokens) / r.seconds : 0;
  const double elapsed = std::chrono::duration<double>(clock_->Now() - started_at_).count();
  const double eta = elapsed / static_cast<double>(r.step) * static_cast<double>(total_steps_ - r.step);
  double mfu = 0;
  if (peak_.tflops > 0) {
    const double flops = model_->config().TrainingFlopsPerToken(config_.spec.data().max_seq_len()) * tps;
    mfu = flops / (peak_.tflops * 1e12 * comm_->world());
  }
  char mfu_text[32] = "";
  if (mfu > 0) std::snprintf(mfu_text, sizeof mfu_text, " | MFU %.1f%%", mfu * 100);
  std::printf("step %lld/%lld | loss %.4f | lr %.3g | grad_norm %.3f | %.0f tokens/s%s | ETA %s\n",
              static_cast<long long>(r.step), static_cast<long long>(total_steps_), r.loss, r.lr, r.grad_norm, tps,
              mfu_text, FormatDuration(eta).c_str());
  std::fflush(stdout);
  rank::StepEvent e;
  e.step = r.step;
  e.total_steps = total_steps_;
  e.loss = r.loss;
  e.lr = r.lr;
  e.grad_norm = r.grad_norm;
  e.tokens = r.tokens;
  e.tokens_per_s = tps;
  e.seconds = r.seconds;
  e.mfu = mfu;
  e.data_s = r.data_s;
  e.compute_s = r.compute_s;
  e.comm_wait_s = r.comm_wait_s;
  e.optimizer_s = r.optimizer_s;
  events_.Emit(e);
}

void Trainer::RequestStop() { g_stop_requested = true; }

bool Trainer::NothingToSaveYet() { return g_nothing_to_save.load(); }

TrainerState Trainer::State() const {
  TrainerState s;
  s.step = step_;
  s.optimizer_step = optimizer_->step();
  s.epoch = step_ / sampler_->steps_per_epoch();
  const v1::TrainingSpec& training = config_.spec.training();
  s.samples_consumed = std::min(step_ * training.global_batch_size(), training.epochs() * dataset_.size());
  s.total_steps = total_steps_;
  s.world_size = comm_->world();
  s.loss_tail = loss_tail_;
  s.compat = compat_;
  s.seed = static_cast<uint64_t>(training.seed());
  if (last_eval_step_ == step_) s.eval_loss = last_eval_loss_;
  return s;
}

Status Trainer::Run() {
  // From here a stop is answered at the next step boundary, with a checkpoint.
  g_nothing_to_save = false;
  started_at_ = clock_->Now();
  const int64_t first_step = step_;
  const CheckpointPolicy& policy = checkpointer_->policy();
  // The loss before fine-tuning, for comparison (a resumed run has its earlier evaluations).
  if (!eval_sets_.empty() && step_ == 0 && total_steps_ > 0) RunEval();
  while (step_ < total_steps_) {
    profiler_->BeforeStep(step_ + 1);
    EFT_ASSIGN_OR_RETURN(StepResult r, Step());
    EFT_RETURN_IF_ERROR(profiler_->AfterStep(step_).status());
    loss_tail_.push_back(r.loss);
    if (loss_tail_.size() > 100) loss_tail_.erase(loss_tail_.begin());
    Report(r);
    if (step_ == first_step + 1) ReportMemory();
    const bool last = step_ == total_steps_;
    // Before this step's checkpoint, so the checkpoint can carry its eval loss.
    if (EvalDue(last)) RunEval();
    bool saved = false;
    if (checkpointer_->enabled() && !last) {
      if (policy.full_every_steps > 0 && step_ % policy.full_every_steps == 0) {
        EFT_RETURN_IF_ERROR(checkpointer_->SaveFull(State()));
        saved = true;
      } else if (policy.every_steps > 0 && step_ % policy.every_steps == 0) {
        EFT_RETURN_IF_ERROR(checkpointer_->BeginSharded(State()).status());
        saved = true;
      }
    }
    if (!last) snapshots_->AfterStep(State(), r.seconds);
    // One small collective per step: commits finished background saves, and spreads a stop request
    // from any rank to all of them, so they all stop after the same step.
    EFT_ASSIGN_OR_RETURN(bool stop, checkpointer_->Poll(g_stop_requested.load(), /*wait=*/false));
    hooks_->StallIfAsked("step");
    // Test hook: die like a node that lost power, at a known step, on every rank. A save begun at an
    // earlier step is finished first, so tests know which checkpoints exist however slow the disk;
    // one begun at this very step is left half written, as a real crash would.
    if (hooks_->KillDue(step_)) {
      if (checkpointer_->pending_step() >= 0 && checkpointer_->pending_step() < step_) {
        EFT_RETURN_IF_ERROR(checkpointer_->Poll(false, /*wait=*/true).status());
      }
      hooks_->Kill();
    }
    if (stop && !last) {
      if (checkpointer_->enabled()) {
        if (!saved) EFT_RETURN_IF_ERROR(checkpointer_->BeginSharded(State()).status());
        EFT_RETURN_IF_ERROR(checkpointer_->Poll(false, /*wait=*/true).status());
      }
      if (env_.rank == 0) EFT_LOG(INFO) << "stopped on request after step " << step_;
      if (tensorboard_) tensorboard_->End(step_, "stopped on request");
      return Status(StatusCode::kAborted, "stopped on request after step " + std::to_string(step_));
    }
  }
  snapshots_->Wait();
  EFT_RETURN_IF_ERROR(checkpointer_->Poll(false, /*wait=*/true).status());
  if (checkpointer_->enabled()) EFT_RETURN_IF_ERROR(checkpointer_->SaveFull(State(), /*final=*/true));
  EFT_RETURN_IF_ERROR(SaveFinalModel());
  std::string merged;
  if (config_.spec.checkpoint().merge_lora() && env_.rank == 0) {
    EFT_ASSIGN_OR_RETURN(merged, MergeFinalAdapter());
  }
  if (!config_.spec.checkpoint().export_gguf().empty() && env_.rank == 0) {
    EFT_RETURN_IF_ERROR(ExportFinalGguf(merged));
  }
  if (env_.rank == 0) events_.Emit(rank::FinishedEvent{step_, merged});
  return Status::Ok();
}

Status Trainer::ExportFinalGguf(const std::string& merged) {
  // The final model as a directory: a LoRA run's merged model, else --output-dir, else the final
  // full checkpoint just written.
  const std::string& checkpoint_dir = config_.spec.checkpoint().dir();
  const std::string source = !merged.empty()                 ? merged
                             : !config_.output_dir.empty()   ? config_.output_dir
                                                             : checkpoint_dir + "/step-" + std::to_string(step_);
  const std::string& type_name = config_.spec.checkpoint().export_gguf();
  const std::string out = (config_.output_dir.empty() ? checkpoint_dir : config_.output_dir) + "/model-" + type_name + ".gguf";
  EFT_ASSIGN_OR_RETURN(const GgufFileType type, ParseGgufFileType(type_name));
  const Stopwatch exporting(clock_);
  auto summary = ExportGguf(source, out, type, nullptr, config_.spec.name());
  if (!summary.ok()) return summary.status().WithContext("spec.checkpoint.export_gguf");
  const double seconds = exporting.Seconds();
  EFT_LOG(INFO) << "final model exported for llama.cpp: " << out << " (" << summary->architecture << ", " << type_name
                << ", " << summary->tensors << " tensors, " << summary->bytes / 1e6 << " MB, from " << source << ", in "
                << seconds << " s)";
  events_.Emit(rank::ExportedEvent{step_, out, type_name, static_cast<int64_t>(summary->bytes), seconds});
  return Status::Ok();
}

Result<std::string> Trainer::MergeFinalAdapter() {
  // The final adapter directory just written: --output-dir, else the final full checkpoint. The
  // merge is the one `eft-train merge-lora` does, so both give the same bytes.
  const bool to_output = !config_.output_dir.empty();
  const std::string& checkpoint_dir = config_.spec.checkpoint().dir();
  const std::string adapter = to_output ? config_.output_dir : checkpoint_dir + "/step-" + std::to_string(step_);
  const std::string merged = (to_output ? config_.output_dir : checkpoint_dir) + "/merged";
  // Written beside and renamed into place, so `merged` is never a half-written model (a retry
  // after a crash here merges again).
  const std::string scratch = merged + ".tmp";
  std::error_code ec;
  fs::remove_all(scratch, ec);
  const Stopwatch merging(clock_);
  EFT_RETURN_IF_ERROR(
      MergeLoraAdapter(config_.spec.model(), adapter, scratch).WithContext("spec.checkpoint.merge_lora"));
  fs::remove_all(merged, ec);
  fs::rename(scratch, merged, ec);
  if (ec) return Status::IoError("spec.checkpoint.merge_lora: renaming " + scratch + " to " + merged + ": " + ec.message());
  EFT_LOG(INFO) << "merged model (" << config_.spec.model() << " + the LoRA adapters of " << adapter << ") written to "
                << merged << " in " << merging.Seconds() << " s";
  return merged;
}

Status Trainer::SaveFinalModel() {
  if (config_.output_dir.empty()) return Status::Ok();
  // Collective, streamed a unit at a time; the optimizer state is not part of a model.
  std::vector<UnitState> units;
  for (FlatParamUnit* u : model_->trainable_units()) units.push_back(UnitState{u, at::Tensor(), at::Tensor()});
  EFT_RETURN_IF_ERROR(WriteFullState(*model_, units, config_.output_dir, checkpointer_->policy().hf_files, env_.rank == 0,
                                     /*with_optimizer=*/false)
                          .status());
  if (env_.rank == 0) EFT_LOG(INFO) << "final model written to " << config_.output_dir;
  return Status::Ok();
}

Status Trainer::InitAdapters() {
  const v1::LoraSpec& lora = config_.spec.training().lora();
  if (lora.init_from().empty()) {
    const ModelConfig& mc = model_->config();
    const auto seed = static_cast<uint64_t>(config_.spec.training().seed());
    return model_->InitAdapters(
        [&](const ParamSpec& spec) -> Result<at::Tensor> { return InitParameter(mc, spec, seed); });
  }
  const std::string context = "spec.training.lora.init_from " + lora.init_from();
  Result<AdapterConfig> read = ReadAdapterConfig(lora.init_from());
  if (!read.ok()) return read.status().WithContext(context);
  const AdapterConfig& saved = *read;
  const std::vector<std::string> modules = LoraTargetModules(lora);
  if (saved.r != lora.r() || saved.alpha != lora.alpha() || saved.target_modules != modules) {
    return Status::InvalidArgument(context + ": the adapter has r " + std::to_string(saved.r) + ", lora_alpha " +
                                   c10::str(saved.alpha) + ", target_modules " + c10::Join(",", saved.target_modules) +
                                   "; spec.training.lora has r " + std::to_string(lora.r()) + ", alpha " +
                                   c10::str(lora.alpha()) + ", target_modules " + c10::Join(",", modules) +
                                   ": make them equal");
  }
  EFT_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(lora.init_from() + "/" + kAdapterWeightsFile));
  return model_->InitAdapters([&](const ParamSpec& spec) { return file->Load(spec.name, at::kFloat); })
      .WithContext(context);
}

void Trainer::ReportMemory() {
  // What this rank keeps between steps (the 1/W part), and the process's peak resident memory.
  int64_t peak_rss = 0;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) peak_rss = std::atoll(line.c_str() + 6) * 1024;
  }
  const int64_t persistent = PersistentBytes();
  std::string gpu;
  const GpuMemoryPeak p = PeakGpuMemory(model_->options().device);
  const int64_t total = GetGpuProperties(model_->options().device).total_memory;
  if (p.allocated >= 0) {
    // Through the first step: every buffer a step needs has been allocated once.
    gpu = "; peak GPU memory " + std::to_string(p.allocated / 1048576) + " MiB allocated, " +
          std::to_string(p.reserved / 1048576) + " MiB reserved, of " + std::to_string(total / 1048576) + " MiB";
  }
  EFT_LOG(INFO) << "rank " << env_.rank << ": " << persistent / 1048576.0
                << " MiB of parameters, gradients and optimizer state; peak RSS " << peak_rss / 1048576.0 << " MiB"
                << gpu;
  if (env_.rank == 0) {
    const v1::TrainingSpec& training = config_.spec.training();
    if (auto hint = LargerMicroBatchHint(persistent, p.allocated, total, training.micro_batch_size(),
                                         training.global_batch_size() / comm_->world())) {
      EFT_LOG(INFO) << "rank 0: " << *hint;
    }
  }
  events_.Emit(rank::MemoryEvent{env_.rank, persistent, peak_rss});
}

int64_t Trainer::PersistentBytes() const {
  int64_t bytes = model_->ShardBytes();
  for (const auto& p : optimizer_->params()) {
    if (p.exp_avg.defined()) bytes += p.exp_avg.numel() * 4;
    if (p.exp_avg_sq.defined()) bytes += p.exp_avg_sq.numel() * 4;
  }
  return bytes;
}

}  // namespace eft::trainer
