// eft-train as users run it: real processes (`eft-train train --nproc W`), real Gloo process
// groups, a tiny random Llama written by `eft-train init-model`, pre-tokenized data.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "tests/e2e/process_util.h"
#include "trainer/io/safetensors.h"

namespace eft::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Train() { return BuildDir() + "/trainer/eft-train"; }

int Shell(const std::string& cmd, std::string* output = nullptr) {
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

  void InitModel(int layers = 2) {
    std::string out;
    ASSERT_EQ(Shell(Train() + " init-model --arch llama --hidden 64 --layers " + std::to_string(layers) +
                        " --heads 4 --kv-heads 2 --intermediate 96 --vocab-size 128 --dtype float32 --seed 1 --out " +
                        (dir_ / "model").string(),
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
      << ", max_seq_len: 64}\n"
      << "training: {global_batch_size: " << global_batch << ", micro_batch_size: " << micro_batch << ", lr: " << lr
      << ", precision: " << precision << ", activation_checkpointing: " << checkpointing
      << ", max_grad_norm: 1.0, weight_decay: 0.01, schedule: {type: cosine, warmup_ratio: 0.1}, epochs: 1000}\n";
    return path;
  }

  struct Run {
    int exit_code = -1;
    std::string output;
    std::vector<json> events;
    std::vector<double> losses;
  };

  // Runs `eft-train train` with events to a file; `name` keeps runs apart.
  Run TrainRun(const std::string& name, int nproc, const std::string& spec, int max_steps,
               const std::string& extra = "") {
    Run r;
    std::string events = (dir_ / (name + ".events")).string();
    std::string cmd = "EFT_EVENTS_FD=3 " + Train() + " train --config " + spec + " --nproc " + std::to_string(nproc) +
                      " --max-steps " + std::to_string(max_steps) + " --threads 1 --output-dir " +
                      (dir_ / name).string() + " " + extra + " 3>>" + events;
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
};

TEST_F(TrainerTest, WorldSizes124GiveTheSameLossesAndWeights) {
  InitModel();
  WriteData(64);
  // 7 sequences per step: no world size here divides it, so ranks get unequal micro-batch counts.
  for (int global_batch : {8, 7}) {
    std::string spec = WriteSpec(global_batch, 2, 3e-3);
    std::map<int, Run> runs;
    for (int w : {1, 2, 4}) {
      runs[w] = TrainRun("w" + std::to_string(w) + "-gb" + std::to_string(global_batch), w, spec, 20);
      ASSERT_EQ(runs[w].exit_code, 0) << runs[w].output;
      ASSERT_EQ(runs[w].losses.size(), 20u) << runs[w].output;
    }
    EXPECT_LT(runs[1].losses.back(), runs[1].losses.front()) << "it learns";
    auto ref = Weights("w1-gb" + std::to_string(global_batch));
    ASSERT_FALSE(ref.empty());
    for (int w : {2, 4}) {
      // fp32 sums over a different number of ranks differ in rounding only (~1e-7 relative per
      // step); 1e-5 leaves room for 20 steps of Adam amplifying them.
      for (size_t s = 0; s < 20; ++s) {
        EXPECT_NEAR(runs[w].losses[s], runs[1].losses[s], 1e-5) << "W=" << w << " gb=" << global_batch << " step " << s + 1;
      }
      auto got = Weights("w" + std::to_string(w) + "-gb" + std::to_string(global_batch));
      ASSERT_EQ(got.size(), ref.size());
      for (const auto& [name, t] : ref) {
        EXPECT_LT((got[name] - t).abs().max().item<double>(), 1e-5) << "W=" << w << " " << name;
      }
    }
  }
}

TEST_F(TrainerTest, MemorisesASmallDataset) {
  InitModel();
  WriteData(32, 6, 10, 11);
  Run r = TrainRun("mem", 2, WriteSpec(32, 8, 1e-2), 150);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(r.losses.size(), 150u);
  EXPECT_LT(r.losses.back(), 0.05) << "first " << r.losses.front() << ", last " << r.losses.back();
}

TEST_F(TrainerTest, Bf16TracksFp32AndCheckpointingChangesNothing) {
  InitModel();
  WriteData(32);
  Run fp32 = TrainRun("fp32", 2, WriteSpec(8, 2, 1e-3, "fp32", "full"), 10);
  Run none = TrainRun("none", 2, WriteSpec(8, 2, 1e-3, "fp32", "none"), 10);
  Run bf16 = TrainRun("bf16", 2, WriteSpec(8, 2, 1e-3, "bf16", "full"), 10);
  for (const Run* r : {&fp32, &none, &bf16}) {
    ASSERT_EQ(r->exit_code, 0) << r->output;
    ASSERT_EQ(r->losses.size(), 10u);
  }
  for (size_t s = 0; s < 10; ++s) {
    EXPECT_EQ(fp32.losses[s], none.losses[s]) << "recomputation must give bit-identical results";
    // bf16 rounds weights and activations to 8 mantissa bits: the mean loss (~4.8 = ln 128) moves by
    // a few 1e-3 at most on this model.
    EXPECT_NEAR(bf16.losses[s], fp32.losses[s], 1e-2) << "step " << s + 1;
  }
}

TEST_F(TrainerTest, PersistentMemoryPerRankFallsAsOneOverW) {
  InitModel(4);
  WriteData(16);
  std::string spec = WriteSpec(8, 2, 1e-3);
  std::map<int, double> bytes;
  for (int w : {1, 2, 4}) {
    Run r = TrainRun("m" + std::to_string(w), w, spec, 1);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<double> per_rank;
    for (const auto& e : r.events) {
      if (e["event"] == "memory") per_rank.push_back(e["persistent_bytes"].get<double>());
    }
    ASSERT_EQ(per_rank.size(), static_cast<size_t>(w));
    bytes[w] = *std::max_element(per_rank.begin(), per_rank.end());
  }
  std::printf("persistent bytes per rank: W=1 %.0f, W=2 %.0f, W=4 %.0f\n", bytes[1], bytes[2], bytes[4]);
  EXPECT_NEAR(bytes[2] / bytes[1], 0.5, 0.01);
  EXPECT_NEAR(bytes[4] / bytes[1], 0.25, 0.01);
}

TEST_F(TrainerTest, BadInputExitsTwoWithTheReason) {
  InitModel();
  WriteData(4);
  std::string out;
  EXPECT_EQ(Shell(Train() + " train --config /nonexistent.yaml", &out), 2) << out;
  std::ofstream(dir_ / "bad.jsonl") << "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [1, 999]}\n";
  std::string spec = WriteSpec(2, 1, 1e-3);
  EXPECT_EQ(Shell(Train() + " train --config " + spec + " --set data.train=" + (dir_ / "bad.jsonl").string(), &out), 2);
  EXPECT_NE(out.find("bad.jsonl:2"), std::string::npos) << out;
  EXPECT_EQ(Shell(Train() + " train --config " + spec + " --set training.precision=fp8", &out), 2);
  EXPECT_NE(out.find("spec.training.precision"), std::string::npos) << out;
  std::ofstream(dir_ / "model" / "config.json") << R"({"model_type": "gpt2"})";
  EXPECT_EQ(Shell(Train() + " train --config " + spec, &out), 2);
  EXPECT_NE(out.find("gpt2"), std::string::npos) << out;
}

}  // namespace
}  // namespace eft::testing
