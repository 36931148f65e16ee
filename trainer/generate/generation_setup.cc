#include "trainer/generate/generation_setup.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <ostream>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "common/rank_protocol.h"
#include "trainer/checkpoint/merge_lora.h"

namespace eft::trainer::gen {
namespace {

// As the trainer: LibTorch's pool gets the threads, and OpenBLAS's own pool is kept at one so the
// two do not spin against each other on the same cores (docs/architecture.md, Threads).
void SetThreads(int threads) {
  if (threads <= 0 && std::getenv("OMP_NUM_THREADS")) threads = std::atoi(std::getenv("OMP_NUM_THREADS"));
  if (threads <= 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  if (std::getenv("OPENBLAS_NUM_THREADS")) return;
  using SetBlasThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetBlasThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
}

// The adapter is merged into the base with merge-lora's code (W + alpha/r * B A, docs/lora.md) in a
// temporary directory that is removed once the weights are loaded: one tested path for the
// arithmetic, at the cost of writing the merged weights once.
Result<std::unique_ptr<InferenceModel>> LoadWithAdapter(const std::string& base, const std::string& adapter,
                                                         at::ScalarType dtype) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(adapter)) return Status::NotFound("--adapter " + adapter + ": no such directory");
  std::string tmpl = (fs::temp_directory_path() / "eft-generate-adapter-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    return Status::Internal("--adapter: cannot create a temporary directory under " +
                            fs::temp_directory_path().string() + ": " + std::strerror(errno));
  }
  const std::string scratch = buf.data();
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{scratch};
  const std::string merged = scratch + "/model";
  Status s = MergeLoraAdapter(base, adapter, merged);
  if (!s.ok()) return Status(s.code(), "--adapter " + adapter + ": " + s.message());
  return InferenceModel::Load(merged, dtype);
}

}  // namespace

Result<LoadedModel> LoadForGeneration(const GenerateArgs& args) {
  SetThreads(args.threads);
  namespace fs = std::filesystem;
  if (args.model.empty()) return Status::InvalidArgument("--model: no model directory given");
  if (!fs::is_directory(args.model)) return Status::NotFound("--model " + args.model + ": no such directory");
  if (args.dtype != "fp32" && args.dtype != "bf16")
    return Status::InvalidArgument("--dtype must be fp32 or bf16, not " + args.dtype);
  LoadedModel m;
  const at::ScalarType dtype = args.dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  if (args.adapter.empty()) {
    EFT_ASSIGN_OR_RETURN(m.model, InferenceModel::Load(args.model, dtype));
  } else {
    EFT_ASSIGN_OR_RETURN(m.model, LoadWithAdapter(args.model, args.adapter, dtype));
  }
  auto tokenizer = LoadTokenizer(args.model);
  if (tokenizer.ok()) {
    m.tokenizer = std::move(tokenizer).value();
  } else if (tokenizer.status().code() != StatusCode::kNotFound) {
    return tokenizer.status();
  }
  auto tmpl = ModelChatTemplate::Load(args.model);
  if (tmpl.ok()) {
    m.chat_template = std::move(tmpl).value();
  } else if (tmpl.status().code() != StatusCode::kNotFound) {
    return tmpl.status();
  }
  EFT_ASSIGN_OR_RETURN(m.eos_ids, EosTokenIds(args.model, m.tokenizer.get()));
  return m;
}

bool IsTerminal(const std::ostream& out) { return &out == &std::cout && ::isatty(STDOUT_FILENO) == 1; }

int Fail(const Status& status, std::ostream& err) {
  err << "eft-train: " << status.message() << std::endl;
  return rank::ExitCodeFor(status);
}

void PrintStats(const GenerateResult& r, std::ostream& err) {
  const auto& t = r.token_seconds;
  // Medians, not means: one slow step (the first decode step sets up its kernels; another process
  // taking the cores for a moment) would otherwise hide whether the per-token cost grows.
  auto median_ms = [&](size_t begin, size_t end) {
    if (end <= begin) return 0.0;
    std::vector<double> v(t.begin() + static_cast<long>(begin), t.begin() + static_cast<long>(end));
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    return 1000.0 * v[v.size() / 2];
  };
  const double decode_s = std::accumulate(t.begin(), t.end(), 0.0);
  const size_t quarter = std::min(t.size(), std::max<size_t>(1, t.size() / 4));
  nlohmann::json j = {{"prompt_tokens", r.prompt_tokens},
                      {"reused_tokens", r.reused_tokens},
                      {"new_tokens", r.tokens.size()},
                      {"stop", StopReasonName(r.stop)},
                      {"prefill_s", r.prefill_seconds},
                      {"decode_tokens_per_s", decode_s > 0 ? static_cast<double>(t.size()) / decode_s : 0.0},
                      {"median_ms_per_token_first_quarter", median_ms(0, quarter)},
                      {"median_ms_per_token_last_quarter", median_ms(t.size() - quarter, t.size())}};
  err << j.dump() << std::endl;
}

}  // namespace eft::trainer::gen
