// LoRA end to end (docs/lora.md): eft-train processes with training.lora set, killed with SIGKILL at
// a known step and resumed at another world size, must end with the adapters of the uninterrupted
// run; dropout draws the same masks at every world size; the output is a PEFT adapter directory (and,
// with checkpoint.merge_lora, the merged model); init_from continues from one.
#include <cmath>
#include <fstream>
#include <iterator>
#include <set>

#include "tests/e2e/trainer_fixture.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/io/safetensors.h"

namespace eft::testing {
namespace {

class LoraTest : public TrainerTest {
 protected:
  void SetUp() override {
    TrainerTest::SetUp();
    InitModel();
    WriteData(48);
    epochs_ = 2;  // 48 examples / 8 per step = 6 steps per epoch: 12 steps
  }
  std::string Spec(const std::string& ckpt_dir, int every = 3) {
    extra_yaml_ = "checkpoint: {dir: " + ckpt_dir + ", every_steps: " + std::to_string(every) + ", keep_last: 5}\n";
    return WriteSpec(8, 2, 1e-2);
  }
  static std::string Lora(const std::string& more = "") {
    return "--set training.lora.r=4 --set training.lora.alpha=8 " + more;
  }
  std::map<std::string, at::Tensor> Adapters(const std::string& dir) {
    std::map<std::string, at::Tensor> out;
    auto file = trainer::SafetensorsFile::Open(dir + "/adapter_model.safetensors");
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return out;
    for (const auto& e : (*file)->entries()) out[e.name] = *(*file)->Load(e.name, at::kFloat);
    return out;
  }
};

TEST_F(LoraTest, KilledAtW2ResumesAtW3WithTheAdaptersOfTheUninterruptedRun) {
  Run ref = TrainRun("ref", 2, Spec((dir_ / "ref-ckpt").string()), 0, Lora());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  ASSERT_EQ(ref.losses.size(), 12u);
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the adapters learn";
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string spec = Spec(ckpt);
  Run killed = TrainRun("killed", 2, spec, 0, Lora(), "EFT_DEBUG_KILL_AT_STEP=7");
  EXPECT_NE(killed.exit_code, 0);
  // Committed: step-3 and step-6. A LoRA checkpoint holds the adapters and their moments only.
  ASSERT_TRUE(trainer::VerifyCheckpoint(ckpt + "/step-6").ok());
  int64_t bytes = 0;
  for (const auto& f : fs::directory_iterator(ckpt + "/step-6")) bytes += static_cast<int64_t>(fs::file_size(f));
  EXPECT_LT(bytes, 200 * 1024) << "2 layers x 7 modules x (A + B) x 3 fp32 tensors, ~110 KiB, not the model";
  Run resumed = TrainRun("resumed", 3, spec, 0, Lora() + " --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ASSERT_EQ(resumed.losses.size(), 6u) << resumed.output;
  // Another world size sums the same fp32 numbers in another order: ~1e-7 relative per step; 1e-6
  // absolute on losses (~4.8) and adapters (~0.1) leaves a factor of a few over 6 Adam steps.
  for (size_t i = 0; i < resumed.losses.size(); ++i) EXPECT_NEAR(resumed.losses[i], ref.losses[6 + i], 1e-6) << i;
  auto want = Adapters((dir_ / "ref").string()), got = Adapters((dir_ / "resumed").string());
  ASSERT_EQ(want.size(), 28u);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    EXPECT_LT((got.at(name) - t).abs().max().item<double>(), 1e-6) << name;
  }
  // A full fine-tuning run cannot take the LoRA checkpoint for its own.
  Run full = TrainRun("full", 2, spec, 0, "--resume " + ckpt + "/step-6");
  EXPECT_EQ(full.exit_code, 2) << full.output;
  EXPECT_NE(full.output.find("training.lora: checkpoint"), std::string::npos) << full.output;
}

TEST_F(LoraTest, TheFinalModelIsAPeftAdapterDirectory) {
  Run run = TrainRun("out", 2, Spec((dir_ / "ckpt").string(), 0), 4, Lora("--set training.lora.target_modules=[q_proj,down_proj]"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const fs::path out = dir_ / "out";
  EXPECT_FALSE(fs::exists(out / "config.json")) << "an adapter directory, not a model";
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  std::ifstream in(out / "adapter_config.json");
  json config = json::parse(in, nullptr, false);
  ASSERT_TRUE(config.is_object());
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["task_type"], "CAUSAL_LM");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8.0);
  EXPECT_EQ(config["bias"], "none");
  EXPECT_EQ(config["target_modules"], json({"q_proj", "down_proj"}));
  EXPECT_EQ(config["base_model_name_or_path"], (dir_ / "model").string());
  auto file = trainer::SafetensorsFile::Open((out / "adapter_model.safetensors").string());
  ASSERT_TRUE(file.ok()) << file.status();
  // hidden 64, intermediate 96, 4 heads of 16: q_proj 64 -> 64, down_proj 96 -> 64.
  const std::map<std::string, std::vector<int64_t>> shapes = {
      {"self_attn.q_proj.lora_A.weight", {4, 64}}, {"self_attn.q_proj.lora_B.weight", {64, 4}},
      {"mlp.down_proj.lora_A.weight", {4, 96}},    {"mlp.down_proj.lora_B.weight", {64, 4}}};
  EXPECT_EQ((*file)->entries().size(), 8u);
  for (int layer = 0; layer < 2; ++layer) {
    for (const auto& [suffix, shape] : shapes) {
      const std::string name = "base_model.model.model.layers." + std::to_string(layer) + "." + suffix;
      const trainer::SafetensorsEntry* e = (*file)->Find(name);
      ASSERT_NE(e, nullptr) << name;
      EXPECT_EQ(e->shape, shape) << name;
      EXPECT_EQ(e->scalar_type, at::kFloat) << name;
      // B starts at zero (PEFT's init) and has trained away from it.
      EXPECT_GT((*file)->Load(name, at::kFloat)->abs().max().item<double>(), 0) << name;
    }
  }
  // The final full checkpoint is the same kind of directory, plus the optimizer state.
  EXPECT_TRUE(fs::exists(dir_ / "ckpt/step-4/adapter_model.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "ckpt/step-4/optimizer.safetensors"));
  EXPECT_TRUE(trainer::VerifyCheckpoint((dir_ / "ckpt/step-4").string()).ok());
}

TEST_F(LoraTest, InitFromContinuesFromAnAdapterAndRefusesAMismatchedOne) {
  Run first = TrainRun("first", 1, Spec((dir_ / "ckpt1").string(), 0), 3, Lora());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string adapter = (dir_ / "first").string();
  // Starting from the adapter: its first loss is below a fresh start's (which is exactly the base
  // model's, B being zero).
  Run fresh = TrainRun("fresh", 1, Spec((dir_ / "ckpt2").string(), 0), 1, Lora());
  Run from = TrainRun("from", 1, Spec((dir_ / "ckpt3").string(), 0), 1, Lora("--set training.lora.init_from=" + adapter));
  ASSERT_EQ(from.exit_code, 0) << from.output;
  ASSERT_EQ(fresh.losses.size(), 1u);
  ASSERT_EQ(from.losses.size(), 1u);
  EXPECT_LT(from.losses[0], fresh.losses[0] - 1e-3);
  Run mismatched = TrainRun("bad", 1, Spec((dir_ / "ckpt4").string(), 0), 1,
                            "--set training.lora.r=8 --set training.lora.init_from=" + adapter);
  EXPECT_NE(mismatched.exit_code, 0);
  EXPECT_NE(mismatched.output.find("the adapter has r 4"), std::string::npos) << mismatched.output;
  Run missing = TrainRun("missing", 1, Spec((dir_ / "ckpt5").string(), 0), 1,
                         Lora("--set training.lora.init_from=" + (dir_ / "nowhere").string()));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("adapter_config.json: no such file"), std::string::npos) << missing.output;
}

// Merged weights against W + (alpha / r) B A computed here from the two directories' tensors. The
// model is fp32, so the only difference is the order of the r-term sums: 1e-6 on weights of ~0.02.
TEST_F(LoraTest, MergeLoraWritesBasePlusScaledBA) {
  Run run = TrainRun("out", 2, Spec((dir_ / "ckpt").string(), 0), 4, Lora("--set training.lora.target_modules=[v_proj,up_proj]"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string base = (dir_ / "model").string(), adapter = (dir_ / "out").string(), merged = (dir_ / "merged").string();
  std::string out;
  ASSERT_EQ(Shell(Train() + " merge-lora --base " + base + " --adapter " + adapter + " --out " + merged, &out), 0) << out;
  auto b = trainer::SafetensorsDir::Open(base), m = trainer::SafetensorsDir::Open(merged);
  ASSERT_TRUE(b.ok() && m.ok());
  ASSERT_TRUE(fs::exists(merged + "/config.json"));
  auto a = Adapters(adapter);
  ASSERT_EQ((*m)->names(), (*b)->names());
  int adapted = 0;
  for (const std::string& name : (*b)->names()) {
    at::Tensor w = *(*b)->Load(name, at::kFloat), got = *(*m)->Load(name, at::kFloat);
    const std::string stem = "base_model.model." + name.substr(0, name.size() - 7);
    if (a.count(stem + ".lora_A.weight")) {
      ++adapted;
      at::Tensor delta = at::matmul(a.at(stem + ".lora_B.weight"), a.at(stem + ".lora_A.weight")) * 2.0;  // 8 / 4
      EXPECT_GT(delta.abs().max().item<double>(), 1e-5) << name << ": the adapter changed something";
      EXPECT_LT((got - (w + delta)).abs().max().item<double>(), 1e-6) << name;
    } else {
      EXPECT_TRUE(at::equal(got, w)) << name;
    }
  }
  EXPECT_EQ(adapted, 4);  // 2 layers x {v_proj, up_proj}
  // `generate --adapter` answers exactly as the merged model does, and leaves no temporary files.
  const std::string gen =
      Train() + " generate --prompt-ids '5 17 3 9' --max-new-tokens 12 --format ids --threads 1 --model ";
  auto scratch_dirs = [] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(fs::temp_directory_path())) {
      n += e.path().filename().string().rfind("eft-generate-adapter-", 0) == 0;
    }
    return n;
  };
  const int scratch_before = scratch_dirs();
  std::string with_adapter, with_merged;
  ASSERT_EQ(Shell(gen + base + " --adapter " + adapter, &with_adapter), 0) << with_adapter;
  ASSERT_EQ(Shell(gen + merged, &with_merged), 0) << with_merged;
  EXPECT_EQ(with_adapter, with_merged);
  EXPECT_EQ(scratch_dirs(), scratch_before);
  std::string without;
  ASSERT_EQ(Shell(gen + base, &without), 0) << without;
  EXPECT_NE(without, with_adapter) << "the adapter changes what this model says, so the comparison means something";
  EXPECT_EQ(Shell(gen + base + " --adapter " + (dir_ / "none").string(), &out), 2);
  EXPECT_NE(out.find("no such directory"), std::string::npos) << out;
  // An adapter for another shape of model is refused before anything is written.
  std::string other = (dir_ / "other").string();
  ASSERT_EQ(Shell(Train() + " init-model --arch llama --hidden 32 --layers 2 --heads 4 --intermediate 96 "
                  "--vocab-size 128 --dtype float32 --out " + other, &out), 0) << out;
  EXPECT_EQ(Shell(Train() + " merge-lora --base " + other + " --adapter " + adapter + " --out " + merged + "2", &out), 2);
  EXPECT_NE(out.find("do not fit r 4"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(merged + "2"));
}

// LoRA dropout keyed by each example's place in its step's batch (docs/lora.md): W = 1, 2 and 3
// draw the same masks although they group the 8 examples of a step into micro-batches differently
// (4 x 2 on one rank; 2 x 2 on each of two; 2 + 1 on each of three) and so pad them differently.
TEST_F(LoraTest, DropoutGivesTheSameLossesAtEveryWorldSize) {
  const std::string dropout = Lora("--set training.lora.dropout=0.1");
  // Each run its own checkpoint directory (the final full checkpoint is step-4 in each).
  Run none = TrainRun("none", 1, Spec((dir_ / "ckpt-none").string(), 0), 4, Lora());
  Run w1 = TrainRun("w1", 1, Spec((dir_ / "ckpt-w1").string(), 0), 4, dropout);
  ASSERT_EQ(w1.exit_code, 0) << w1.output;
  ASSERT_EQ(none.losses.size(), 4u) << none.output;
  ASSERT_EQ(w1.losses.size(), 4u);
  // B starts at zero, so the first step cannot see dropout; the later ones do.
  EXPECT_GT(std::abs(w1.losses[3] - none.losses[3]), 1e-4) << "dropout 0.1 changes the run";
  for (int world : {2, 3}) {
    const std::string name = "w" + std::to_string(world);
    Run got = TrainRun(name, world, Spec((dir_ / ("ckpt-" + name)).string(), 0), 4, dropout);
    ASSERT_EQ(got.exit_code, 0) << got.output;
    ASSERT_EQ(got.losses.size(), 4u);
    // As KilledAtW2ResumesAtW3...: the same fp32 numbers summed in another order, 1e-6 on ~4.8.
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got.losses[i], w1.losses[i], 1e-6) << "W=" << world << " step " << i;
  }
}

std::string FileBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every file of `a` is in `b` with the same bytes, and `b` has no others.
void ExpectSameFiles(const fs::path& a, const fs::path& b) {
  std::set<std::string> names_a, names_b;
  for (const auto& e : fs::directory_iterator(a)) names_a.insert(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(b)) names_b.insert(e.path().filename().string());
  EXPECT_EQ(names_a, names_b) << a << " vs " << b;
  for (const std::string& name : names_a) {
    if (names_b.count(name)) {
      EXPECT_TRUE(FileBytes(a / name) == FileBytes(b / name)) << name << " differs";
    }
  }
}

// checkpoint.merge_lora: the model merged at the end of training is byte for byte what
// `eft-train merge-lora` makes of the run's adapter, at <--output-dir>/merged (or
// <checkpoint.dir>/merged without one), and the finished event says where.
TEST_F(LoraTest, MergeLoraAtTheEndWritesWhatTheMergeCommandWrites) {
  extra_yaml_ = "checkpoint: {dir: " + (dir_ / "ckpt").string() + ", every_steps: 0, merge_lora: true}\n";
  const std::string spec = WriteSpec(8, 2, 1e-2);
  Run run = TrainRun("out", 2, spec, 3, Lora());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const fs::path merged = dir_ / "out" / "merged";
  ASSERT_TRUE(fs::exists(merged / "model.safetensors")) << run.output;
  EXPECT_TRUE(fs::exists(merged / "config.json"));
  EXPECT_FALSE(fs::exists(dir_ / "out" / "merged.tmp"));
  EXPECT_NE(run.output.find("written to " + merged.string()), std::string::npos) << run.output;
  ASSERT_FALSE(run.events.empty());
  EXPECT_EQ(run.events.back()["event"], "finished");
  EXPECT_EQ(run.events.back().value("merged_model", ""), merged.string());
  std::string out;
  const fs::path by_hand = dir_ / "by-hand";
  ASSERT_EQ(Shell(Train() + " merge-lora --base " + (dir_ / "model").string() + " --adapter " + (dir_ / "out").string() +
                      " --out " + by_hand.string(), &out), 0) << out;
  ExpectSameFiles(by_hand, merged);
  EXPECT_FALSE(FileBytes(merged / "model.safetensors") == FileBytes(dir_ / "model" / "model.safetensors"))
      << "the adapters trained away from zero, so the merged weights are not the base's";

  // Without --output-dir: beside the checkpoints, merged from the final full checkpoint.
  const fs::path ckpt = dir_ / "ckpt2";
  extra_yaml_ = "checkpoint: {dir: " + ckpt.string() + ", every_steps: 0, merge_lora: true}\n";
  const std::string spec2 = WriteSpec(8, 2, 1e-2);
  ASSERT_EQ(Shell(Train() + " train --config " + spec2 + " --nproc 1 --max-steps 2 --threads 1 " + Lora(), &out), 0)
      << out;
  ASSERT_TRUE(fs::exists(ckpt / "merged" / "model.safetensors")) << out;
  ASSERT_EQ(Shell(Train() + " merge-lora --base " + (dir_ / "model").string() + " --adapter " +
                      (ckpt / "step-2").string() + " --out " + (dir_ / "by-hand2").string(), &out), 0) << out;
  ExpectSameFiles(dir_ / "by-hand2", ckpt / "merged");
  EXPECT_TRUE(trainer::VerifyCheckpoint((ckpt / "step-2").string()).ok()) << "the merged directory is not a checkpoint";

  // Only a LoRA run has adapters to merge: refused before anything runs, naming the field.
  Run full = TrainRun("full", 1, spec, 1);
  EXPECT_EQ(full.exit_code, 2) << full.output;
  EXPECT_NE(full.output.find("spec.checkpoint.merge_lora needs spec.training.lora"), std::string::npos) << full.output;
}

}  // namespace
}  // namespace eft::testing
