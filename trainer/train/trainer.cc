#include "trainer/train/trainer.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/logging.h"
#include "trainer/io/safetensors.h"
#include "trainer/optim/clip.h"
#include "trainer/optim/schedule.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The data format the file holds: pretokenized JSONL is the only one until the SFT pipeline lands.
Status CheckDataFormat(const TrainConfig& c) {
  if (c.data_format != "auto" && c.data_format != "pretokenized") {
    return Status::InvalidArgument("spec.data.format: '" + c.data_format +
                                   "' is not supported by this eft-train yet; use pretokenized JSONL "
                                   "({\"input_ids\": [...], \"labels\": [...]}) with format auto or pretokenized");
  }
  return Status::Ok();
}

at::ScalarType HfDtype(const std::string& torch_dtype) {
  if (torch_dtype == "float32") return at::kFloat;
  if (torch_dtype == "float16") return at::kHalf;
  return at::kBFloat16;
}

// LibTorch's intra-op pool and OpenBLAS's own pool each default to every core; together they
// oversubscribe the CPU and spin against each other (measured on 2 cores: 5x slower). Keep OpenBLAS
// single-threaded unless the user set OPENBLAS_NUM_THREADS. Looked up at run time: the BLAS library
// is whatever libblas.so.3 Debian's alternatives point at.
void LimitBlasThreads() {
  if (std::getenv("OPENBLAS_NUM_THREADS")) return;
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::Create(TrainConfig config, RankEnv env) {
  EFT_RETURN_IF_ERROR(ValidateTrainConfig(config));
  EFT_RETURN_IF_ERROR(CheckDataFormat(config));
  std::unique_ptr<Trainer> t(new Trainer(std::move(config), std::move(env)));
  const TrainConfig& c = t->config_;

  int threads = c.threads;
  // torchrun's convention: OMP_NUM_THREADS caps the threads of every rank.
  if (threads <= 0 && std::getenv("OMP_NUM_THREADS")) threads = std::atoi(std::getenv("OMP_NUM_THREADS"));
  if (threads <= 0) {
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, t->env_.local_world));
  }
  at::set_num_threads(threads);
  LimitBlasThreads();

  EFT_ASSIGN_OR_RETURN(ModelConfig model_config, ModelConfig::FromHfDir(c.model));
  EFT_ASSIGN_OR_RETURN(auto weights, SafetensorsDir::Open(c.model));
  DatasetOptions data_options;
  data_options.max_seq_len = c.max_seq_len;
  data_options.vocab_size = model_config.vocab_size;
  EFT_ASSIGN_OR_RETURN(t->dataset_, TokenDataset::LoadPretokenized(c.train_data, data_options));
  if (t->dataset_.size() == 0) return Status::InvalidArgument("spec.data.train: " + c.train_data + " holds no examples");

  RendezvousOptions rv;
  rv.rank = t->env_.rank;
  rv.world = t->env_.world;
  rv.master_addr = t->env_.master_addr;
  rv.master_port = t->env_.master_port;
  EFT_ASSIGN_OR_RETURN(t->comm_, CreateCpuCommunicator(rv));

  ShardingOptions sharding;
  sharding.compute_dtype = c.precision == "bf16" ? at::kBFloat16 : at::kFloat;
  sharding.activation_checkpointing = c.activation_checkpointing;
  t->model_ = std::make_unique<ShardedLlama>(model_config, t->comm_.get(), sharding);
  EFT_RETURN_IF_ERROR(t->model_->InitFrom([&](const ParamSpec& spec) -> Result<at::Tensor> {
    return weights->Load(spec.name, at::kFloat);
  }).WithContext("loading " + c.model));
  t->pad_token_id_ = model_config.pad_token_id >= 0 ? model_config.pad_token_id : 0;

  t->optimizer_ = std::make_unique<AdamW>(c.adamw);
  for (auto& u : t->model_->units()) t->optimizer_->AddParam(u->shard(), u->grad(), u->decay_mask());

  t->sampler_ = std::make_unique<GlobalSampler>(t->dataset_.size(), c.global_batch_size, c.seed);
  t->total_steps_ = c.epochs * t->sampler_->steps_per_epoch();
  if (c.max_steps > 0) t->total_steps_ = std::min(t->total_steps_, c.max_steps);
  if (t->env_.rank == 0) {
    const auto& st = t->dataset_.stats();
    EFT_LOG(INFO) << "eft-train: " << model_config.model_type << " " << model_config.NumParameters() / 1e6
                  << "M parameters, world size " << t->env_.world << " (" << t->env_.source << ", "
                  << t->comm_->backend() << "), " << st.examples << " examples (" << st.tokens << " tokens, "
                  << st.truncated << " truncated), " << t->total_steps_ << " steps of " << c.global_batch_size
                  << " sequences, " << c.precision << ", activation checkpointing "
                  << (c.activation_checkpointing ? "full" : "none") << ", " << threads << " threads per rank";
  }
  return t;
}

Result<StepResult> Trainer::Step() {
  const double t0 = Now();
  const int64_t spe = sampler_->steps_per_epoch();
  const int64_t epoch = step_ / spe, in_epoch = step_ % spe;
  std::vector<int64_t> examples = sampler_->StepExamples(epoch, in_epoch);
  auto micro = RankMicroBatches(examples, comm_->rank(), comm_->world(), config_.micro_batch_size);
  std::vector<Batch> batches;
  int64_t trained = 0, tokens = 0;
  for (const auto& indices : micro) {
    batches.push_back(Collate(dataset_, indices, pad_token_id_));
    trained += batches.back().trained_tokens;
    tokens += batches.back().tokens;
  }
  // The loss is a sum over every trained token of the step divided by their global count, so every
  // world size computes the same number (up to float rounding).
  at::Tensor counts = at::tensor({static_cast<double>(trained), static_cast<double>(tokens)}, at::kDouble);
  comm_->AllReduceSum(counts);
  const int64_t global_trained = static_cast<int64_t>(counts[0].item<double>());
  const int64_t global_tokens = static_cast<int64_t>(counts[1].item<double>());
  const double scale = global_trained > 0 ? 1.0 / static_cast<double>(global_trained) : 0.0;

  model_->BeginStep();
  double loss_sum = 0;
  for (const Batch& b : batches) loss_sum += model_->ForwardBackward(b, scale);
  model_->EndStep();

  at::Tensor total = at::tensor({loss_sum}, at::kDouble);
  comm_->AllReduceSum(total);
  std::vector<at::Tensor> grads;
  for (auto& u : model_->units()) grads.push_back(u->grad());
  const double grad_norm = ClipGradNorm(grads, config_.max_grad_norm, [&](at::Tensor& t) { comm_->AllReduceSum(t); });
  const double lr = LearningRate(config_.schedule, step_, total_steps_);
  if (std::isfinite(grad_norm)) {
    optimizer_->Step(lr);
  } else if (env_.rank == 0) {
    EFT_LOG(WARNING) << "step " << step_ + 1 << ": gradient norm is " << grad_norm << "; update skipped";
  }
  model_->ZeroGrad();
  ++step_;

  StepResult r;
  r.step = step_;
  r.loss = total.item<double>() * scale;
  r.grad_norm = grad_norm;
  r.lr = lr;
  r.tokens = global_tokens;
  r.trained_tokens = global_trained;
  r.seconds = Now() - t0;
  return r;
}

void Trainer::Report(const StepResult& r) {
  if (env_.rank != 0) return;
  const double tps = r.seconds > 0 ? static_cast<double>(r.tokens) / r.seconds : 0;
  const double elapsed = Now() - started_at_;
  const double eta = elapsed / static_cast<double>(r.step) * static_cast<double>(total_steps_ - r.step);
  double mfu = 0;
  if (config_.peak_tflops > 0) {
    const double flops = model_->config().TrainingFlopsPerToken(config_.max_seq_len) * tps;
    mfu = flops / (config_.peak_tflops * 1e12 * comm_->world());
  }
  std::printf("step %lld/%lld | loss %.4f | lr %.3g | grad_norm %.3f | %.0f tokens/s%s | ETA %s\n",
              static_cast<long long>(r.step), static_cast<long long>(total_steps_), r.loss, r.lr, r.grad_norm, tps,
              mfu > 0 ? (" | mfu " + std::to_string(mfu)).c_str() : "", FormatDuration(eta).c_str());
  std::fflush(stdout);
  nlohmann::json e = {{"event", "step"},       {"step", r.step},          {"total_steps", total_steps_},
                      {"loss", r.loss},        {"lr", r.lr},              {"grad_norm", r.grad_norm},
                      {"tokens", r.tokens},    {"tokens_per_s", tps},     {"seconds", r.seconds}};
  if (mfu > 0) e["mfu"] = mfu;
  events_.Emit(e);
}

Status Trainer::Run() {
  started_at_ = Now();
  while (step_ < total_steps_) {
    EFT_ASSIGN_OR_RETURN(StepResult r, Step());
    Report(r);
    if (step_ == 1) ReportMemory();
  }
  EFT_RETURN_IF_ERROR(SaveFinalModel());
  if (env_.rank == 0) events_.Emit({{"event", "finished"}, {"step", step_}});
  return Status::Ok();
}

Status Trainer::SaveFinalModel() {
  std::string dir = config_.output_dir;
  if (dir.empty() && !config_.checkpoint_dir.empty()) dir = config_.checkpoint_dir + "/final";
  if (dir.empty()) return Status::Ok();
  auto params = model_->FullParameters();  // collective: every rank takes part
  if (env_.rank != 0) return Status::Ok();
  const at::ScalarType dtype = HfDtype(model_->config().torch_dtype);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [name, t] : params) tensors.emplace_back(name, t.to(dtype));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("creating " + dir + ": " + ec.message());
  EFT_RETURN_IF_ERROR(WriteSafetensorsDir(dir, tensors, 5ull << 30, {{"format", "pt"}}));
  std::ofstream(dir + "/config.json") << model_->config().ToHfJson().dump(2) << "\n";
  // The tokenizer travels with the weights, so the directory is usable on its own.
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                        "vocab.json", "merges.txt", "tokenizer.model"}) {
    fs::path src = fs::path(config_.model) / f;
    if (fs::exists(src)) fs::copy_file(src, fs::path(dir) / f, fs::copy_options::overwrite_existing, ec);
  }
  EFT_LOG(INFO) << "final model written to " << dir;
  return Status::Ok();
}

void Trainer::ReportMemory() {
  // What this rank keeps between steps (the 1/W part), and the process's peak resident memory.
  int64_t peak_rss = 0;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) peak_rss = std::atoll(line.c_str() + 6) * 1024;
  }
  const int64_t persistent = PersistentBytes();
  EFT_LOG(INFO) << "rank " << env_.rank << ": " << persistent / 1048576.0
                << " MiB of parameters, gradients and optimizer state; peak RSS " << peak_rss / 1048576.0 << " MiB";
  events_.Emit({{"event", "memory"}, {"rank", env_.rank}, {"persistent_bytes", persistent}, {"peak_rss_bytes", peak_rss}});
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
