// eft-train as users run it: real processes (`eft-train train --nproc W`), real Gloo process
// groups, a tiny random Llama written by `eft-train init-model`, pre-tokenized data.
#include "tests/e2e/trainer_fixture.h"

#include "tests/util/cpu_flags.h"

#include <ATen/Context.h>

#include <cstdlib>
#include <set>

namespace eft::testing {
namespace {

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

// parallel.sharding changes when parameters are gathered and gradients reduced, never the result:
// each strategy at W=3 (unequal micro-batch counts per rank: 8 sequences in micro-batches of 2)
// trains like W=1. Every step event carries the timeline, and its parts add up to the step.
TEST_F(TrainerTest, EveryShardingStrategyTrainsLikeOneRank) {
  InitModel();
  WriteData(48);
  std::string spec = WriteSpec(8, 2, 3e-3);
  Run ref = TrainRun("ref", 1, spec, 6);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  for (const char* strategy : {"full", "grad_op", "no_shard"}) {
    Run r = TrainRun(strategy, 3, spec, 6, std::string("--set parallel.sharding=") + strategy);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("sharding ") + strategy), std::string::npos) << r.output;
    ASSERT_EQ(r.losses.size(), 6u);
    // As WorldSizes124GiveTheSameLossesAndWeights: fp32 rounding only.
    for (size_t s = 0; s < 6; ++s) EXPECT_NEAR(r.losses[s], ref.losses[s], 1e-5) << strategy << " step " << s + 1;
    int steps = 0;
    for (const auto& e : r.events) {
      if (e["event"] != "step") continue;
      ++steps;
      double parts = 0;
      for (const char* k : {"data_s", "compute_s", "comm_wait_s", "optimizer_s"}) {
        ASSERT_TRUE(e.contains(k)) << e.dump();
        EXPECT_GE(e[k].get<double>(), 0) << k;
        parts += e[k].get<double>();
      }
      EXPECT_NEAR(parts, e["seconds"].get<double>(), 1e-3) << e.dump();
    }
    EXPECT_EQ(steps, 6);
  }
  Run bad = TrainRun("bad", 1, spec, 1, "--set parallel.sharding=zero3");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("spec.parallel.sharding"), std::string::npos) << bad.output;
}

// Packing (the default for jobs): documents share sequences, the step count follows the packed
// rows, and W = 1 and 2 still give the same losses.
TEST_F(TrainerTest, PackedTrainingIsWorldSizeIndependent) {
  InitModel();
  WriteData(60, 4, 20);
  packing_ = true;
  epochs_ = 2;
  std::string spec = WriteSpec(2, 1, 3e-3);
  Run w1 = TrainRun("w1", 1, spec, 0), w2 = TrainRun("w2", 2, spec, 0);
  ASSERT_EQ(w1.exit_code, 0) << w1.output;
  ASSERT_EQ(w2.exit_code, 0) << w2.output;
  // 60 documents of 4..20 tokens (~720 tokens) fit in ~12 rows of 64: about 6 steps per epoch
  // instead of 30.
  auto at = w1.output.find("packed 60 documents into ");
  ASSERT_NE(at, std::string::npos) << w1.output;
  const int rows = std::atoi(w1.output.c_str() + at + std::string("packed 60 documents into ").size());
  EXPECT_GE(rows, 12);
  EXPECT_LE(rows, 15);
  ASSERT_EQ(w1.losses.size(), static_cast<size_t>(2 * ((rows + 1) / 2)));
  ASSERT_EQ(w2.losses.size(), w1.losses.size());
  for (size_t s = 0; s < w1.losses.size(); ++s) EXPECT_NEAR(w2.losses[s], w1.losses[s], 1e-5) << "step " << s + 1;
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

// The trainer's fused paths, which it takes on GPUs (trainer/kernels: RoPE, the merged SwiGLU, the
// loss's softmax gradient, AdamW), run here through the kernels' host twins (EFT_FUSED_KERNELS=cpu)
// and train like the composites. In fp32 each fused op differs from its composite by a few ulps of
// its values (tests/unit/trainer/kernels); through 2 layers and 10 Adam steps (whose update is
// normalised, so relative gradient changes stay relative) that is some 10 ulps of the losses
// (~4.8, ulp 4.8e-7): 1e-5. Scaling SwiGLU's output by 1.01 alone moves a loss by 2e-4. Packed
// rows, two ranks, activation checkpointing: the GPU's paths, except attention.
TEST_F(TrainerTest, TheFusedKernelsPathsTrainLikeTheComposites) {
  InitModel();
  WriteData(32);
  Run composite = TrainRun("composite", 2, WriteSpec(8, 2, 1e-2, "fp32", "full"), 10);
  Run fused = TrainRun("fused", 2, WriteSpec(8, 2, 1e-2, "fp32", "full"), 10, "", "EFT_FUSED_KERNELS=cpu");
  for (const Run* r : {&composite, &fused}) {
    ASSERT_EQ(r->exit_code, 0) << r->output;
    ASSERT_EQ(r->losses.size(), 10u);
  }
  for (size_t s = 0; s < 10; ++s) EXPECT_NEAR(fused.losses[s], composite.losses[s], 1e-5) << "step " << s + 1;
  EXPECT_GT(std::abs(composite.losses.back() - composite.losses.front()), 0.05) << "the steps trained nothing";
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

// Every rank of a run gets its data through the token cache: one process builds it, a second run
// reads it back. A chat-format file with a model directory that has no tokenizer is refused.
TEST_F(TrainerTest, TheTokenCacheIsBuiltOnceAndReused) {
  InitModel();
  WriteData(16);
  std::string spec = WriteSpec(4, 1, 1e-3);
  const std::string cache = "--set data.cache_dir=" + (dir_ / "cache").string();
  Run first = TrainRun("first", 2, spec, 2, cache), second = TrainRun("second", 2, spec, 2, cache);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(first.output.find("] tokenized " + (dir_ / "data.jsonl").string()), std::string::npos) << first.output;
  EXPECT_EQ(second.output.find("] tokenized "), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("(read from " + (dir_ / "cache").string()), std::string::npos) << second.output;
  EXPECT_EQ(first.losses, second.losses);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "cache")) files += e.path().extension() == ".tokens";
  EXPECT_EQ(files, 1);

  std::ofstream(dir_ / "chat.jsonl") << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
                                     << "\n";
  std::string out;
  EXPECT_EQ(Shell(Train() + " train --config " + spec + " " + cache + " --set data.train=" + (dir_ / "chat.jsonl").string(),
                  &out),
            2);
  EXPECT_NE(out.find("chat.jsonl:1: text needs the model's tokenizer"), std::string::npos) << out;
}

// `eft-train prepare` builds the same cache a run reads, and says what the data holds.
TEST_F(TrainerTest, PrepareSummarisesTheDataAndFillsTheCache) {
  InitModel();
  WriteData(40, 4, 20);
  packing_ = true;
  std::string spec = WriteSpec(4, 1, 1e-3);
  {
    std::ofstream f(dir_ / "data.jsonl", std::ios::app);
    f << "{oops\n" << R"({"input_ids": [1, 2]})" << "\n";
  }
  const std::string cache = " --set data.cache_dir=" + (dir_ / "cache").string();
  std::string out;
  EXPECT_EQ(Shell(Train() + " prepare --config " + spec + cache, &out), 2);
  EXPECT_NE(out.find("data.jsonl:41: not valid JSON"), std::string::npos) << out;
  ASSERT_EQ(Shell(Train() + " prepare --config " + spec + cache + " --set data.on_bad_line=skip", &out), 0) << out;
  EXPECT_NE(out.find("format            pretokenized"), std::string::npos) << out;
  EXPECT_NE(out.find("lines             42"), std::string::npos) << out;
  EXPECT_NE(out.find("examples          41"), std::string::npos) << out;
  EXPECT_NE(out.find("bad lines       1 skipped, first: "), std::string::npos) << out;
  EXPECT_NE(out.find("sequences of up to 64 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("(built now)"), std::string::npos) << out;
  // The run then starts from the cache.
  Run run = TrainRun("run", 2, spec, 1, cache + " --set data.on_bad_line=skip");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("(read from " + (dir_ / "cache").string()), std::string::npos) << run.output;
}

// Given the hardware's peak (--peak-tflops or EFT_PEAK_TFLOPS; on a GPU eft knows, its own), every
// step reports its model FLOPs utilisation: 6 N + attention FLOPs per token times tokens/s, over the
// peak of all ranks. A CPU has no known peak (peak_flops_test covers the GPUs' names).
TEST_F(TrainerTest, ProgressReportsMfuWhenThePeakIsGiven) {
  InitModel();
  WriteData(8);
  Run r = TrainRun("mfu", 2, WriteSpec(8, 2, 1e-3), 3, "--peak-tflops 0.0005");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // InitModel's llama: embeddings and head 2 x 128 x 64, final norm 64, and per layer q/o 64x64,
  // k/v 64x32, MLP 3 x 64x96 and two norms: 78,144 parameters.
  const double parameters = 2 * 128 * 64 + 64 + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 96 + 2 * 64);
  std::vector<double> flops_per_token;
  for (const auto& e : r.events) {
    if (e["event"] != "step") continue;
    ASSERT_TRUE(e.contains("mfu")) << e.dump();
    const double tokens_per_s = e["tokens_per_s"].get<double>(), mfu = e["mfu"].get<double>();
    EXPECT_GT(mfu, 0) << e.dump();
    flops_per_token.push_back(mfu * 0.0005e12 * 2 / tokens_per_s);  // peak x ranks
  }
  ASSERT_EQ(flops_per_token.size(), 3u);
  // The implied FLOPs per token are the model's, whatever the step's speed: at least 6 per
  // parameter (forward and backward matmuls), plus attention.
  for (double f : flops_per_token) {
    EXPECT_NEAR(f, flops_per_token[0], 1e-6 * flops_per_token[0]);
    EXPECT_GE(f, 6 * parameters);
    EXPECT_LT(f, 12 * parameters);
  }
  EXPECT_NE(r.output.find("| MFU "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", MFU against 0.0005 TFLOP/s per rank (--peak-tflops)"), std::string::npos) << r.output;
  Run plain = TrainRun("plain", 1, WriteSpec(8, 2, 1e-3), 1);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("MFU"), std::string::npos) << "no peak given, no MFU";
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
  EXPECT_EQ(Shell(Train() + " train --config " + spec + " --set training.device=tpu", &out), 2);
  // The controller's words: eft-train reads its spec through the same code (spec/job_spec.h).
  EXPECT_NE(out.find("spec.training.device (\"tpu\") must be one of auto, cpu, cuda"), std::string::npos) << out;
  std::ofstream(dir_ / "model" / "config.json") << R"({"model_type": "gpt2"})";
  EXPECT_EQ(Shell(Train() + " train --config " + spec, &out), 2);
  EXPECT_NE(out.find("gpt2"), std::string::npos) << out;
}

// The CUDA build CI compiles (PyTorch's CUDA wheel; docs/gpu.md): on a machine without a GPU it
// starts, sees none, trains on the CPU with device: auto, and refuses device: cuda saying why.
TEST_F(TrainerTest, TheCudaBuildTrainsOnTheCpuWithoutAGpuAndRefusesCuda) {
  std::string version;
  ASSERT_EQ(Shell(Train() + " version", &version), 0) << version;
  std::cout << version;
#ifdef EFT_EXPECT_CUDA_BUILD
  EXPECT_NE(version.find("CUDA build: yes"), std::string::npos) << version;
  EXPECT_NE(version.find("NCCL communicator: yes"), std::string::npos) << version;
  EXPECT_NE(version.find("fused CUDA kernels: yes"), std::string::npos) << version;
  std::string needed;
  ASSERT_EQ(Shell("readelf -d " + Train(), &needed), 0) << needed;
  EXPECT_NE(needed.find("[libtorch_cuda.so]"), std::string::npos) << "libtorch_cuda is not linked:\n" << needed;
#endif
  if (version.find("GPUs visible: 0") == std::string::npos) GTEST_SKIP() << "a GPU is visible: " << version;
  InitModel();
  WriteData(8);
  Run r = TrainRun("auto", 1, WriteSpec(8, 2, 1e-3), 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(", on cpu,"), std::string::npos) << r.output;
  EXPECT_EQ(r.losses.size(), 2u);
  std::string out;
  EXPECT_EQ(Shell(Train() + " train --config " + WriteSpec(8, 2, 1e-3) + " --set training.device=cuda", &out), 2);
  const bool cuda_build = version.find("CUDA build: yes") != std::string::npos;
  EXPECT_NE(out.find(cuda_build ? "spec.training.device is cuda, but no GPU is visible"
                                : "built against a LibTorch without CUDA"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;
}

// training.precision: auto (docs/gpu.md, "Precision"). A CPU without native bf16 is this CPU with
// LibTorch held to AVX2 (what LibTorch runs on an AVX2-only CPU): auto trains in fp32 and says why;
// bf16 set explicitly trains in bf16 and warns once, with the slowdown it measured on the spot.
TEST_F(TrainerTest, PrecisionAutoFollowsTheCpuAndEmulatedBf16Warns) {
  InitModel();
  WriteData(8);
  const std::string held = "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2";
  const std::string warning = "a bf16 matrix product took ";
  Run auto_held = TrainRun("auto-held", 1, WriteSpec(8, 2, 1e-3, "auto"), 1, "", held);
  ASSERT_EQ(auto_held.exit_code, 0) << auto_held.output;
  EXPECT_NE(auto_held.output.find("fp32 (auto: this CPU ("), std::string::npos) << auto_held.output;
  EXPECT_NE(auto_held.output.find("does not compute bf16 natively"), std::string::npos) << auto_held.output;
  EXPECT_EQ(auto_held.output.find(warning), std::string::npos) << auto_held.output;

  Run bf16_held = TrainRun("bf16-held", 1, WriteSpec(8, 2, 1e-3, "bf16"), 1, "", held);
  ASSERT_EQ(bf16_held.exit_code, 0) << bf16_held.output;
  EXPECT_NE(bf16_held.output.find("bf16 (as set)"), std::string::npos) << bf16_held.output;
  const size_t at = bf16_held.output.find(warning);
  ASSERT_NE(at, std::string::npos) << bf16_held.output;
  EXPECT_EQ(bf16_held.output.find(warning, at + 1), std::string::npos) << "warned more than once";
  const double slowdown = std::atof(bf16_held.output.c_str() + at + warning.size());
  EXPECT_GT(slowdown, 1.0) << "emulated bf16 is slower than fp32: " << bf16_held.output.substr(at, 200);

  // Not held (even when the suite itself runs held back): auto follows what the kernel says the CPU has.
  const std::set<std::string> flags = KernelCpuFlags();
  const bool native = flags.count("avx512_bf16") + flags.count("amx_bf16") > 0;
  Run auto_run = TrainRun("auto", 1, WriteSpec(8, 2, 1e-3, "auto"), 1, "",
                          "env -u ATEN_CPU_CAPABILITY -u ONEDNN_MAX_CPU_ISA");
  ASSERT_EQ(auto_run.exit_code, 0) << auto_run.output;
  EXPECT_NE(auto_run.output.find(native ? "bf16 (auto: this CPU (" : "fp32 (auto: this CPU ("), std::string::npos)
      << auto_run.output;
}

// --initializer-range: config.json says it and the weights are drawn with it (std of 6,144 normal
// draws is within 3% of the true value with overwhelming probability: its standard error is 0.9%).
TEST_F(TrainerTest, InitModelDrawsWithTheGivenInitializerRange) {
  for (double range : {0.02, 0.2}) {
    const fs::path out_dir = dir_ / ("model-" + std::to_string(range));
    std::string out;
    ASSERT_EQ(Shell(Train() + " init-model --arch llama --hidden 64 --layers 1 --heads 4 --intermediate 96 " +
                        "--vocab-size 128 --dtype float32 --initializer-range " + std::to_string(range) +
                        " --out " + out_dir.string(), &out), 0) << out;
    std::ifstream config(out_dir / "config.json");
    EXPECT_DOUBLE_EQ(json::parse(config)["initializer_range"].get<double>(), range);
    auto weights = trainer::SafetensorsFile::Open((out_dir / "model.safetensors").string());
    ASSERT_TRUE(weights.ok()) << weights.status().message();
    auto up = (*weights)->Load("model.layers.0.mlp.up_proj.weight", at::kFloat);
    ASSERT_TRUE(up.ok()) << up.status().message();
    EXPECT_NEAR(up->std().item<double>(), range, 0.03 * range);
  }
  std::string out;
  EXPECT_NE(Shell(Train() + " init-model --arch llama --hidden 64 --layers 1 --heads 4 --intermediate 96 " +
                      "--vocab-size 128 --initializer-range -1 --out " + (dir_ / "bad").string(), &out), 0);
  EXPECT_NE(out.find("--initializer-range"), std::string::npos) << out;
}

}  // namespace
// --profile-steps (trainer/train/step_profiler.h): two ranks each write a Chrome trace of exactly the
// asked steps, and bench/gpu/profile_summary.py sums it by kernel family, matrix products first.
TEST_F(TrainerTest, ProfileStepsWritesATraceTheSummaryReads) {
  InitModel();
  WriteData(16);
  const std::string traces = (dir_ / "traces").string();
  Run r = TrainRun("profiled", 2, WriteSpec(8, 2, 1e-3, "fp32"), 4, "--profile-steps 2:3 --profile-dir " + traces);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.losses.size(), 4u);
  EXPECT_NE(r.output.find("profile of steps 2-3 written to"), std::string::npos) << r.output;
  for (int rank : {0, 1}) {
    const std::string trace = traces + "/trace.rank" + std::to_string(rank) + ".json";
    ASSERT_TRUE(fs::exists(trace)) << r.output;
    const std::string summary = (dir_ / ("summary" + std::to_string(rank) + ".json")).string();
    std::string out;
    ASSERT_EQ(Shell("python3 " + std::string(EFT_SOURCE_DIR_DEFAULT) + "/bench/gpu/profile_summary.py " + trace +
                        " --json " + summary, &out), 0) << out;
    std::ifstream in(summary);
    const json s = json::parse(in);
    EXPECT_EQ(s["steps"], 2) << out;
    EXPECT_EQ(s["source"], "CPU ops (self time, all threads)") << out;
    std::map<std::string, double> share;
    double sum = 0;
    for (const json& f : s["families"]) sum += share[f["family"]] = f["share"];
    EXPECT_NEAR(sum, 1.0, 1e-6) << out;
    // The tiny model's step is dominated by overheads, not by its few small matrix products: only
    // that every part of a step is found is checked here.
    for (const char* family : {"gemm", "elementwise", "norm", "loss", "optimizer", "autograd engine",
                               "outside ops (collective waits, eft code)"}) {
      EXPECT_GT(share[family], 0) << family << "\n" << out;
    }
  }
  Run bad = TrainRun("bad", 1, WriteSpec(8, 2, 1e-3), 1, "--profile-steps 3:2");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--profile-steps \"3:2\": give A:B"), std::string::npos) << bad.output;
}

}  // namespace eft::testing
