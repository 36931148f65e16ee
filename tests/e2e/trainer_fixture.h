// A fixture for tests that run eft-train as users do: a temp dir with a tiny random Llama written
// by `eft-train init-model`, pre-tokenized data, job specs, and runs of `eft-train train --nproc W`
// whose events (EFT_EVENTS_FD) are collected.
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "tests/e2e/process_util.h"
#include "trainer/io/safetensors.h"

namespace eft::testing {

namespace fs = std::filesystem;
using nlohmann::json;

inline std::string Train() { return BuildDir() + "/trainer/eft-train"; }

inline int Shell(const std::string& cmd, std::string* output = nullptr) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-trainer-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  void InitModel(int layers = 2, const std::string& dtype = "float32") {
    std::string out;
    ASSERT_EQ(Shell(Train() + " init-model --arch llama --hidden 64 --layers " + std::to_string(layers) +
                        " --heads 4 --kv-heads 2 --intermediate 96 --vocab-size 128 --dtype " + dtype + " --seed 1 --out " +
                        (dir_ / "model").string(),
                    &out),
              0)
        << out;
  }

  // A tiny random Qwen3 (hidden 32, one layer) in dir_/model carrying the tokenizer and chat
  // template of `tokenizer_dir` (its vocabulary: 151,680 rows).
  void InitQwen3WithTokenizer(const fs::path& tokenizer_dir) {
    std::string out;
    ASSERT_EQ(Shell(Train() + " init-model --arch qwen3 --hidden 32 --layers 1 --heads 2 --kv-heads 1 "
                              "--intermediate 64 --vocab-size 151680 --dtype float32 --seed 1 --tokenizer " +
                        tokenizer_dir.string() + " --out " + (dir_ / "model").string(),
                    &out),
              0)
        << out;
  }

  // `n` random sequences of 6..20 tokens; the first 3 tokens of each are "prompt" (not trained).
  void WriteData(int n, int min_len = 6, int max_len = 20, uint32_t seed = 3) {
    std::mt19937 gen(seed);
    std::ofstream f(dir_ / "data.jsonl");
    for (int i = 0; i < n; ++i) {
      int len = min_len + static_cast<int>(gen() % (max_len - min_len + 1));
      json ids = json::array(), labels = json::array();
      for (int t = 0; t < len; ++t) {
        int id = 1 + static_cast<int>(gen() % 127);
        ids.push_back(id);
        labels.push_back(t < 3 ? -100 : id);
      }
      f << json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
    }
  }

  std::string WriteSpec(int global_batch, int micro_batch, double lr, const std::string& precision = "fp32",
                        const std::string& checkpointing = "full") {
    std::string path = (dir_ / "job.yaml").string();
    std::ofstream f(path);
    f << "name: tiny\nmodel: " << (dir_ / "model").string() << "\ndata: {train: " << (dir_ / "data.jsonl").string()
      << ", max_seq_len: 64, packing: " << (packing_ ? "true" : "false") << "}\n"
      << "training: {global_batch_size: " << global_batch << ", micro_batch_size: " << micro_batch << ", lr: " << lr
      << ", precision: " << precision << ", activation_checkpointing: " << checkpointing
      << ", max_grad_norm: 1.0, weight_decay: 0.01, schedule: {type: cosine, warmup_ratio: 0.1}, epochs: " << epochs_
      << "}\n"
      << extra_yaml_;
    return path;
  }

  struct Run {
    int exit_code = -1;
    std::string output;
    std::vector<json> events;
    std::vector<double> losses;
  };

  // Runs `eft-train train` with events to a file; `name` keeps runs apart. max_steps 0: to the end
  // of the epochs. `env` is prepended to the command ("EFT_DEBUG_KILL_AT_STEP=7 ...").
  Run TrainRun(const std::string& name, int nproc, const std::string& spec, int max_steps,
               const std::string& extra = "", const std::string& env = "") {
    Run r;
    std::string events = (dir_ / (name + ".events")).string();
    std::string cmd = env + " EFT_EVENTS_FD=3 " + Train() + " train --config " + spec + " --nproc " +
                      std::to_string(nproc) + (max_steps > 0 ? " --max-steps " + std::to_string(max_steps) : "") +
                      " --threads 1 --output-dir " + (dir_ / name).string() + " " + extra + " 3>>" + events;
    r.exit_code = Shell(cmd, &r.output);
    std::ifstream in(events);
    for (std::string line; std::getline(in, line);) {
      json e = json::parse(line, nullptr, false);
      if (e.is_discarded()) continue;
      r.events.push_back(e);
      if (e["event"] == "step") r.losses.push_back(e["loss"].get<double>());
    }
    return r;
  }

  std::map<std::string, at::Tensor> Weights(const std::string& name) {
    std::map<std::string, at::Tensor> out;
    auto dir = trainer::SafetensorsDir::Open((dir_ / name).string());
    EXPECT_TRUE(dir.ok()) << dir.status();
    if (!dir.ok()) return out;
    for (const auto& n : (*dir)->names()) out[n] = *(*dir)->Load(n, at::kFloat);
    return out;
  }

  fs::path dir_;
  int epochs_ = 1000;
  bool packing_ = false;  // tests count steps in examples
  std::string extra_yaml_;  // appended to every spec WriteSpec writes (e.g. a checkpoint section)
};

// Per-step losses and final weights of a resumed run against the uninterrupted one. Different
// world sizes sum the same fp32 numbers in a different order (per-rank partial sums, then the
// all-reduce), so results differ by float rounding only: ~1e-7 relative per step. 1e-6 absolute on
// losses (~4.8) and weights (~0.02..1) leaves a factor of a few for 7 steps of Adam.
inline void ExpectSameTraining(const std::vector<double>& ref_losses, const std::vector<double>& losses,
                               size_t first_step, const std::map<std::string, at::Tensor>& ref_weights,
                               const std::map<std::string, at::Tensor>& weights, const std::string& what) {
  ASSERT_EQ(losses.size(), ref_losses.size() - first_step) << what;
  double max_loss_diff = 0, max_weight_diff = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_NEAR(losses[i], ref_losses[first_step + i], 1e-6) << what << " step " << first_step + i + 1;
    max_loss_diff = std::max(max_loss_diff, std::abs(losses[i] - ref_losses[first_step + i]));
  }
  ASSERT_EQ(weights.size(), ref_weights.size()) << what;
  for (const auto& [name, t] : ref_weights) {
    const double d = (weights.at(name) - t).abs().max().item<double>();
    EXPECT_LT(d, 1e-6) << what << " " << name;
    max_weight_diff = std::max(max_weight_diff, d);
  }
  std::printf("%s: max |loss diff| %.3g, max |weight diff| %.3g\n", what.c_str(), max_loss_diff, max_weight_diff);
}

}  // namespace eft::testing
