// eft-train: the LibTorch FSDP trainer. One process per rank.
//
//   eft-train train [--config job.yaml] [--nproc N] [--set training.lr=1e-4 ...]
//   eft-train prepare --config job.yaml
//   eft-train tokenize --tokenizer MODEL_DIR [--file F]
//   eft-train chat-template --tokenizer MODEL_DIR --messages F.json [--add-generation-prompt]
//   eft-train init-model --arch qwen3 --hidden 256 --layers 4 --heads 4 --kv-heads 2 ... --out DIR
//   eft-train generate --model DIR --prompt TEXT ...   /   eft-train chat --model DIR (docs/generate.md)
//   eft-train merge-lora --base DIR --adapter DIR --out DIR (docs/lora.md)
//   eft-train export --model DIR --out FILE.gguf --type f32|f16|bf16|q8_0 (docs/models.md)
//
// Without --config the job spec comes from EFT_JOB_SPEC (set by eft-worker). Exit codes are the rank
// protocol's (common/rank_protocol.h, docs/architecture.md): 0 done, 2 bad configuration or input,
// 75 stopped on request after saving, 76 rendezvous port busy, 77 checkpoint storage full, 78 out of
// memory, 1 anything else.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "common/logging.h"
#include "common/rank_protocol.h"
#include "common/yaml_json.h"
#include "trainer/checkpoint/full_state.h"
#include "trainer/checkpoint/merge_lora.h"
#include "trainer/model/llama.h"
#include "trainer/model/model_config.h"
#include "trainer/parallel/device.h"
#include "trainer/chat_template/chat_template.h"
#include "trainer/export/export_command.h"
#include "trainer/generate/generate_command.h"
#include "trainer/runtime/debug_hooks.h"
#include "trainer/runtime/host_allocator.h"
#include "trainer/tokenizer/tokenize_command.h"
#include "trainer/runtime/events.h"
#include "trainer/train/launch.h"
#include "trainer/train/memory_advice.h"
#include "trainer/train/precision.h"
#include "trainer/train/prepare.h"
#include "trainer/train/trainer.h"

namespace {

using namespace eft;
using namespace eft::trainer;

constexpr int kExitFailure = rank::ToInt(rank::ExitCode::kFailure);
constexpr int kExitConfig = rank::ToInt(rank::ExitCode::kBadInput);
constexpr int kExitStopped = rank::ToInt(rank::ExitCode::kStoppedOnRequest);
constexpr int kExitPortBusy = rank::ToInt(rank::ExitCode::kRendezvousPortBusy);
constexpr int kExitOutOfMemory = rank::ToInt(rank::ExitCode::kOutOfMemory);

// Before the first step (loading, tokenizing, rendezvous, resuming) there is nothing to save, and
// those phases may block for minutes: a stop ends the process at once with 75. From the first step
// on, the first SIGTERM/SIGINT finishes the step, saves and exits 75; a second one kills at once.
void OnStopSignal(int sig) {
  if (Trainer::NothingToSaveYet()) {
    static const char kMessage[] = "eft-train: stopped on request before the first step (nothing to save)\n";
    (void)!::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    ::_exit(kExitStopped);
  }
  Trainer::RequestStop();
  std::signal(sig, SIG_DFL);
}

int ExitFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kAlreadyExists:  // only the rendezvous port (CreateCommunicator)
      return kExitPortBusy;
    case StatusCode::kResourceExhausted:  // only a full checkpoint storage (Checkpointer)
      return rank::ToInt(rank::ExitCode::kStorageFull);
    case StatusCode::kCancelled:  // only an attempt fenced off by a newer one (checkpoint/fence.h)
      return rank::ToInt(rank::ExitCode::kFenced);
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kDataLoss:
      return kExitConfig;
    default:
      return kExitFailure;
  }
}

// Tells the worker (and so the controller, which puts it in the attempt's end reason) why this
// rank is about to exit, when there is an events pipe.
void ReportFatalError(const std::string& message, int exit_code) {
  auto env = RankEnvFromEnvironment();
  if (!env.ok() || env->events_fd < 0) return;
  EventWriter(env->events_fd).Emit(rank::ErrorEvent{message, exit_code});
}

int Fail(const Status& s) {
  std::fprintf(stderr, "eft-train: %s\n", s.message().c_str());
  const int code = ExitFor(s);
  ReportFatalError(s.message(), code);
  return code;
}

struct InitModelArgs {
  std::string arch, out, tokenizer, dtype = "bfloat16";
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, intermediate = 0, vocab = 0, head_dim = 0;
  int64_t max_position = 4096;
  double initializer_range = 0.02;  // HF's default std of the normal init
  uint64_t seed = 0;
  bool tie = false;
};

int InitModel(const InitModelArgs& a) {
  nlohmann::json cfg = {{"model_type", a.arch},
                        {"hidden_size", a.hidden},
                        {"num_hidden_layers", a.layers},
                        {"num_attention_heads", a.heads},
                        {"num_key_value_heads", a.kv_heads > 0 ? a.kv_heads : a.heads},
                        {"intermediate_size", a.intermediate},
                        {"vocab_size", a.vocab},
                        {"max_position_embeddings", a.max_position},
                        {"tie_word_embeddings", a.tie},
                        {"torch_dtype", a.dtype},
                        {"hidden_act", "silu"},
                        {"rms_norm_eps", 1e-6},
                        {"initializer_range", a.initializer_range}};
  if (a.head_dim > 0) cfg["head_dim"] = a.head_dim;
  if (a.dtype != "bfloat16" && a.dtype != "float32" && a.dtype != "float16") {
    return Fail(Status::InvalidArgument("--dtype: expected bfloat16, float16 or float32"));
  }
  auto config = ModelConfig::FromHfJson(cfg);
  if (!config.ok()) return Fail(config.status());
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  const at::ScalarType dtype = a.dtype == "float32" ? at::kFloat : a.dtype == "float16" ? at::kHalf : at::kBFloat16;
  std::vector<ParamSpec> specs = RootParamSpecs(*config);
  for (int64_t i = 0; i < config->num_hidden_layers; ++i) {
    auto layer = LayerParamSpecs(*config, static_cast<int>(i));
    specs.insert(specs.end(), layer.begin(), layer.end());
  }
  for (const auto& spec : specs) tensors.emplace_back(spec.name, InitParameter(*config, spec, a.seed));
  auto written = WriteHfModel(a.out, tensors, *config, dtype, {{a.tokenizer}, ""});
  if (!written.ok()) return Fail(written.status());
  std::printf("wrote a random %s model (%.2fM parameters, %s) to %s\n", a.arch.c_str(), config->NumParameters() / 1e6,
              a.dtype.c_str(), a.out.c_str());
  return 0;
}

// The job spec from --config (or EFT_JOB_SPEC) with --set overrides applied, read and validated by
// the same code as the controller's (spec/job_spec.h).
Result<TrainConfig> LoadConfig(const std::string& config_path, const std::vector<std::string>& overrides) {
  Result<nlohmann::json> document = Status::InvalidArgument("no job spec");
  if (!config_path.empty()) {
    document = LoadYamlOrJsonFile(config_path);
  } else if (const char* env = std::getenv(rank::env::kJobSpec); env && *env) {
    document = YamlToJson(env);
    if (!document.ok()) document = document.status().WithContext(rank::env::kJobSpec);
  } else {
    return Status::InvalidArgument(std::string("no job spec: pass --config job.yaml (or run under eft-worker, which sets ") +
                                   rank::env::kJobSpec + ")");
  }
  if (!document.ok()) return document.status();
  auto spec = LoadJobSpec(std::move(*document), overrides);
  if (!spec.ok()) return config_path.empty() ? spec.status() : spec.status().WithContext(config_path);
  return TrainConfigFromJobSpec(std::move(*spec));
}

// `eft-train train`'s command line.
struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  int nproc = 0;
  int64_t max_steps = 0;
  int threads = 0;
  std::string output_dir, resume;
  double peak_tflops = 0;
  std::string profile_steps, profile_dir;

  // The same, without --nproc, for each local rank.
  std::vector<std::string> RankArgs() const {
    std::vector<std::string> args{"train"};
    if (!config_path.empty()) args.insert(args.end(), {"--config", config_path});
    for (const auto& o : overrides) args.insert(args.end(), {"--set", o});
    if (threads > 0) args.insert(args.end(), {"--threads", std::to_string(threads)});
    if (!output_dir.empty()) args.insert(args.end(), {"--output-dir", output_dir});
    if (!resume.empty()) args.insert(args.end(), {"--resume", resume});
    if (peak_tflops > 0) args.insert(args.end(), {"--peak-tflops", std::to_string(peak_tflops)});
    if (!profile_steps.empty()) args.insert(args.end(), {"--profile-steps", profile_steps});
    if (!profile_dir.empty()) args.insert(args.end(), {"--profile-dir", profile_dir});
    return args;
  }
};

int Train(const TrainArgs& args) {
  auto config = LoadConfig(args.config_path, args.overrides);
  if (!config.ok()) return Fail(config.status());
  config->threads = args.threads;
  config->peak_tflops = args.peak_tflops;
  config->profile_steps = args.profile_steps;
  config->profile_dir = args.profile_dir;
  if (!args.output_dir.empty()) config->output_dir = args.output_dir;
  auto env = RankEnvFromEnvironment();
  if (!env.ok()) return Fail(env.status());
  if (!args.resume.empty()) env->resume_from = args.resume;
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
  // A file size limit (ulimit -f) then fails the write with EFBIG, like a full disk, instead of
  // killing the rank: a failed checkpoint is reported and training goes on.
  std::signal(SIGXFSZ, SIG_IGN);
  SetLogProgram("eft-train rank " + std::to_string(env->rank));
  // The one read of the test hooks' variables (EFT_DEBUG_*); declared before the trainer, which uses them.
  const DebugHooks hooks = DebugHooks::FromEnvironment();
  std::unique_ptr<Trainer> trainer;
  try {
    auto created = Trainer::Create(*config, *env, TrainerDeps{.hooks = &hooks});
    if (!created.ok()) return Fail(created.status());
    trainer = std::move(*created);
    Status s = trainer->Run();
    if (s.code() == StatusCode::kAborted) return kExitStopped;
    if (!s.ok()) return Fail(s);
  } catch (const std::exception& e) {
    if (std::optional<std::string> oom = OutOfMemoryMessage(e)) {
      const MemoryContext c{.rank = env->rank,
                            .world = env->world,
                            .device = trainer ? trainer->device().str() : "",
                            .step = trainer ? trainer->completed_steps() + 1 : 0,
                            .micro_batch_size = config->spec.training().micro_batch_size(),
                            .max_seq_len = config->spec.data().max_seq_len(),
                            .activation_checkpointing = config->spec.training().activation_checkpointing() == "full",
                            .sharding = config->spec.parallel().sharding()};
      const std::string message = DescribeOutOfMemory(*oom, c);
      std::fprintf(stderr, "eft-train: %s\n", message.c_str());
      ReportFatalError(message, kExitOutOfMemory);
      return kExitOutOfMemory;
    }
    // A collective failing because a peer died lands here: retryable, not a configuration error.
    std::fprintf(stderr, "eft-train: rank %d failed: %s\n", env->rank, e.what());
    ReportFatalError(e.what(), kExitFailure);
    return kExitFailure;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  SetLogProgram("eft-train");
  if (Status s = ConfigureHostAllocator(); !s.ok()) EFT_LOG(WARNING) << s;
  CLI::App app{"eft-train: LibTorch FSDP fine-tuning of Hugging Face decoder models"};
  app.require_subcommand(1);

  auto* train = app.add_subcommand("train", "train one rank (or --nproc local ranks)");
  TrainArgs ta;
  train->add_option("--resume", ta.resume, "auto (the newest valid checkpoint in checkpoint.dir) or a checkpoint path "
                                        "(default: $EFT_RESUME_FROM)");
  train->add_option("--config", ta.config_path, "job spec YAML/JSON (default: $EFT_JOB_SPEC)");
  train->add_option("--set", ta.overrides, "override one field: --set training.lr=1e-4 (repeatable)");
  train->add_option("--nproc", ta.nproc, "spawn this many local ranks (like torchrun --nproc-per-node)");
  train->add_option("--max-steps", ta.max_steps, "stop after this many optimizer steps");
  train->add_option("--threads", ta.threads, "intra-op threads per rank (default: cores / local ranks)");
  train->add_option("--output-dir", ta.output_dir, "also write the final model as a Hugging Face directory here");
  train->add_option("--profile-steps", ta.profile_steps,
                    "A:B: record steps A to B with LibTorch's profiler (CPU ops, GPU kernels) as a Chrome trace "
                    "per rank (bench/gpu/profile_summary.py sums it)");
  train->add_option("--profile-dir", ta.profile_dir, "where --profile-steps writes trace.rank<R>.json (default: .)");
  train->add_option("--peak-tflops", ta.peak_tflops,
                    "one rank's peak dense TFLOP/s in the compute precision, for the MFU progress lines and step "
                    "events report (default: the GPU's own in bf16/fp16 where eft knows it, e.g. 989.5 for an "
                    "H100 SXM; none on CPUs)")
      ->envname("EFT_PEAK_TFLOPS")
      ->check(CLI::NonNegativeNumber);

  std::string prepare_config;
  std::vector<std::string> prepare_overrides;
  auto* prepare = app.add_subcommand("prepare", "tokenize the job's data into the token cache and summarise it");
  prepare->add_option("--config", prepare_config, "job spec YAML/JSON")->required();
  prepare->add_option("--set", prepare_overrides, "override one field (repeatable)");

  TokenizeArgs tk;
  auto* tokenize = app.add_subcommand("tokenize", "print the model tokenizer's ids of each input line");
  tokenize->add_option("--tokenizer", tk.tokenizer_dir, "model directory (tokenizer.json or tokenizer.model)")->required();
  tokenize->add_option("--file", tk.file, "input file (default: standard input)");
  tokenize->add_flag("--add-special-tokens", tk.add_special_tokens, "add the tokenizer's BOS/EOS as its post-processor says");
  tokenize->add_flag("--decode", tk.decode, "the reverse: lines of ids in, text out");

  std::string ct_dir, ct_messages, ct_tools;
  bool ct_generation = false;
  auto* chat = app.add_subcommand("chat-template", "print a conversation rendered with the model's chat template");
  chat->add_option("--tokenizer", ct_dir, "model directory (tokenizer_config.json or chat_template.jinja)")->required();
  chat->add_option("--messages", ct_messages, "JSON: a list of messages, or {\"messages\": [...], \"tools\": [...]}")
      ->required();
  chat->add_option("--tools", ct_tools, "JSON list of tool definitions");
  chat->add_flag("--add-generation-prompt", ct_generation, "end with the assistant's header, as for generation");

  InitModelArgs im;
  auto* init = app.add_subcommand("init-model", "write a randomly initialised Hugging Face model directory");
  init->add_option("--arch", im.arch, "llama | qwen2 | qwen3 | mistral")->required();
  init->add_option("--hidden", im.hidden, "hidden size")->required();
  init->add_option("--layers", im.layers, "decoder layers")->required();
  init->add_option("--heads", im.heads, "attention heads")->required();
  init->add_option("--kv-heads", im.kv_heads, "key/value heads (default: heads)");
  init->add_option("--intermediate", im.intermediate, "MLP size")->required();
  init->add_option("--vocab-size", im.vocab, "vocabulary size")->required();
  init->add_option("--head-dim", im.head_dim, "per-head size (default: hidden / heads)");
  init->add_option("--max-position", im.max_position, "max_position_embeddings (default 4096)");
  init->add_flag("--tie-embeddings", im.tie, "share the embedding and output matrices");
  init->add_option("--dtype", im.dtype, "bfloat16 | float32 | float16 (default bfloat16)");
  init->add_option("--out", im.out, "output directory")->required();
  init->add_option("--tokenizer", im.tokenizer, "copy tokenizer files from this directory");
  init->add_option("--seed", im.seed, "random seed (default 0)");
  init->add_option("--initializer-range", im.initializer_range,
                   "std of the normal init of the weights (config.json initializer_range; default 0.02)")
      ->check(CLI::NonNegativeNumber);

  std::string merge_base, merge_adapter, merge_out;
  auto* version = app.add_subcommand("version", "print the LibTorch this eft-train was built with and the GPUs it sees");
  auto* merge = app.add_subcommand("merge-lora", "merge a PEFT LoRA adapter into its base model (docs/lora.md)");
  merge->add_option("--base", merge_base, "the base Hugging Face model directory")->required();
  merge->add_option("--adapter", merge_adapter, "the PEFT LoRA adapter directory")->required();
  merge->add_option("--out", merge_out, "output directory (a Hugging Face model in the base's dtype)")->required();

  GenerateCommands generate_commands(app);  // generate, chat
  ExportCommand export_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitConfig;
  }
  if (generate_commands.selected()) return generate_commands.Run(std::cin, std::cout, std::cerr);
  if (export_command.selected()) return export_command.Run(std::cout, std::cerr);
  if (*init) return InitModel(im);
  if (*version) {
    std::printf("eft-train: %s; CPU: %s\n", BuildAndDevices().c_str(), DetectCpuBf16().describe().c_str());
    return 0;
  }
  if (*merge) {
    if (Status s = MergeLoraAdapter(merge_base, merge_adapter, merge_out); !s.ok()) return Fail(s);
    std::printf("merged %s into %s: %s\n", merge_adapter.c_str(), merge_base.c_str(), merge_out.c_str());
    return 0;
  }
  if (*tokenize) return RunTokenizeCommand(tk, std::cin, std::cout, std::cerr);
  if (*chat) return RunChatTemplateCommand(ct_dir, ct_messages, ct_tools, ct_generation, std::cout, std::cerr);
  if (*prepare) {
    auto config = LoadConfig(prepare_config, prepare_overrides);
    if (!config.ok()) return Fail(config.status());
    return RunPrepare(*config);
  }

  if (ta.max_steps > 0) ta.overrides.push_back("training.max_steps=" + std::to_string(ta.max_steps));
  // Re-run ourselves N times without --nproc.
  if (ta.nproc > 0) return SpawnLocalRanks(ta.nproc, ta.RankArgs());
  return Train(ta);
}
