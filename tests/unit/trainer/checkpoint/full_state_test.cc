// WriteFullState with real c10d Gloo process groups (ranks as threads, rank_threads.h), both ways
// (checkpoint.full_write, docs/checkpoints.md, "Write path"): the parallel save (every rank writes
// its slices into the final files) and the rank0 save (a unit's gathers to the writer overlap the
// previous unit's write) write the same bytes at every world size as the world-size-1 rank0 save,
// which gathers nothing, and the files hold exactly the state; the manifest's CRCs are those of
// the files; a write error in the middle of the save, or rank 0 failing to create the files, fails
// it at once and leaves no rank waiting in a collective.
#include "trainer/checkpoint/full_state.h"

#include <sys/resource.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "tests/unit/trainer/parallel/rank_threads.h"
#include "trainer/checkpoint/parallel_full_write.h"
#include "trainer/checkpoint/peft_adapter.h"
#include "trainer/io/safetensors.h"
#include "trainer/io/safetensors_writer.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

// vocab 61: every unit's size is odd, so rank boundaries fall mid-element-run and mid-page.
ModelConfig TinyBf16Config(int64_t vocab = 61, int64_t hidden = 32) {
  nlohmann::json j = {{"model_type", "qwen2"},       {"hidden_size", hidden},    {"intermediate_size", 48},
                      {"num_hidden_layers", 3},      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"vocab_size", vocab},         {"max_position_embeddings", 128},
                      {"tie_word_embeddings", true}, {"rms_norm_eps", 1e-6},     {"hidden_act", "silu"},
                      {"torch_dtype", "bfloat16"}};
  auto c = ModelConfig::FromHfJson(j);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// A moment's whole value for a parameter, the same at every world size and different per name.
at::Tensor Moment(const ParamSpec& spec, double scale) {
  const double salt = static_cast<double>(std::hash<std::string>()(spec.name) % 97);
  return (at::arange(spec.numel(), at::kFloat) * 1e-3 + salt).mul(scale).reshape(spec.shape);
}

class FullStateTest : public ::testing::TestWithParam<FullWriteMode> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-full-state-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Saves the model (random init, seed 7) with deterministic moments at `world` ranks into `out`;
  // returns each rank's result status, and the writer's files.
  std::vector<Status> Save(int world, const std::string& out, std::vector<ManifestFile>* files = nullptr,
                           std::optional<FullWriteMode> mode = std::nullopt, const ModelConfig& config = TinyBf16Config()) {
    std::vector<Status> statuses(world);
    auto body = [&](Communicator& comm) {
      ShardingOptions options(ShardingStrategy::kFull, true);
      options.compute_dtype = at::kBFloat16;
      ShardedLlama model(config, &comm, options);
      ASSERT_TRUE(model.InitRandom(7).ok());
      std::vector<UnitState> units;
      for (FlatParamUnit* u : model.trainable_units()) {
        UnitState s{u, at::empty_like(u->shard()), at::empty_like(u->shard())};
        ASSERT_TRUE(u->FillSlice(s.exp_avg, [](const ParamSpec& p) { return Moment(p, 1.0); }).ok());
        ASSERT_TRUE(u->FillSlice(s.exp_avg_sq, [](const ParamSpec& p) { return Moment(p, 0.5); }).ok());
        units.push_back(s);
      }
      auto written = WriteFullState(model, units, out, {}, comm.rank() == 0, true, nullptr, mode.value_or(GetParam()));
      statuses[comm.rank()] = written.status();
      if (written.ok() && comm.rank() == 0 && files != nullptr) *files = *written;
      // Every rank comes back from the save; a collective after it proves none is still inside one.
      at::Tensor one = at::ones({1});
      comm.AllReduceSum(one);
      EXPECT_EQ(one.item<float>(), world);
    };
    if (world == 1) {
      auto comm = CreateCpuCommunicator(RendezvousOptions{});
      EXPECT_TRUE(comm.ok());
      body(**comm);
    } else {
      RunRanks(world, body);
    }
    return statuses;
  }

  static std::string Bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_;
};

TEST_P(FullStateTest, EveryWorldSizeWritesTheSameBytesAsOneRank) {
  std::vector<ManifestFile> files1;
  for (const Status& s : Save(1, (dir_ / "w1").string(), &files1, FullWriteMode::kRank0)) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(files1.size(), 3u);  // model.safetensors, optimizer.safetensors, config.json
  for (int world : {1, 2, 3}) {
    const fs::path out = dir_ / ("x" + std::to_string(world));
    std::vector<ManifestFile> files;
    for (const Status& s : Save(world, out.string(), &files)) ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(files.size(), files1.size());
    for (size_t i = 0; i < files.size(); ++i) {
      EXPECT_EQ(files[i].path, files1[i].path);
      EXPECT_EQ(files[i].crc32c, files1[i].crc32c) << files[i].path << " at world size " << world;
      EXPECT_TRUE(Bytes(out / files[i].path) == Bytes(dir_ / "w1" / files[i].path)) << files[i].path;
    }
  }
}

TEST_P(FullStateTest, TheFilesHoldTheWholeStateAtTheirDtypes) {
  for (const Status& s : Save(2, (dir_ / "out").string())) ASSERT_TRUE(s.ok()) << s;
  // The reference: the same model whole, at world size 1, without any checkpoint code.
  auto comm = CreateCpuCommunicator(RendezvousOptions{});
  ASSERT_TRUE(comm.ok());
  ShardedLlama model(TinyBf16Config(), comm->get(), ShardingOptions(ShardingStrategy::kFull, true));
  ASSERT_TRUE(model.InitRandom(7).ok());
  auto weights = SafetensorsDir::Open((dir_ / "out").string());
  ASSERT_TRUE(weights.ok()) << weights.status();
  auto optimizer = SafetensorsFile::Open((dir_ / "out" / "optimizer.safetensors").string());
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  int checked = 0;
  for (FlatParamUnit* u : model.trainable_units()) {
    auto views = u->Views(u->shard());
    for (size_t i = 0; i < views.size(); ++i) {
      const ParamSpec& spec = u->specs()[i];
      EXPECT_EQ((*weights)->Find(spec.name)->scalar_type, at::kBFloat16);
      auto w = (*weights)->Load(spec.name, at::kBFloat16);
      ASSERT_TRUE(w.ok()) << w.status();
      EXPECT_TRUE(at::equal(*w, views[i].to(at::kBFloat16))) << spec.name;
      auto master = (*optimizer)->Load("master." + spec.name, at::kFloat);
      ASSERT_TRUE(master.ok()) << master.status();
      EXPECT_TRUE(at::equal(*master, views[i])) << spec.name;
      auto m = (*optimizer)->Load("exp_avg." + spec.name, at::kFloat);
      auto v = (*optimizer)->Load("exp_avg_sq." + spec.name, at::kFloat);
      ASSERT_TRUE(m.ok() && v.ok());
      EXPECT_TRUE(at::equal(*m, Moment(spec, 1.0))) << spec.name;
      EXPECT_TRUE(at::equal(*v, Moment(spec, 0.5))) << spec.name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

// The disk fills in the middle of the save (a file size limit: write() fails with EFBIG once the
// optimizer file passes it). rank0: the writer reports the error, the other ranks finish the
// gathers they are in and return. parallel: every rank that writes past the limit reports it, the
// others learn at their next failure check that one did; all fail. Nothing is left behind.
TEST_P(FullStateTest, AWriteErrorMidSaveFailsAndReleasesEveryRank) {
  std::vector<ManifestFile> files;
  for (const Status& s : Save(1, (dir_ / "probe").string(), &files)) ASSERT_TRUE(s.ok()) << s;
  const int64_t optimizer_bytes = files[1].bytes;
  ASSERT_GT(optimizer_bytes, 64 << 10);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // an error from write() instead of the signal
  rlimit limit = old;
  limit.rlim_cur = static_cast<rlim_t>(optimizer_bytes / 2);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Status> statuses = Save(2, (dir_ / "out").string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(statuses[0].code(), StatusCode::kInternal) << statuses[0];  // Status::IoError
  if (GetParam() == FullWriteMode::kRank0) {
    EXPECT_NE(statuses[0].ToString().find("File too large"), std::string::npos) << statuses[0];
    EXPECT_TRUE(statuses[1].ok()) << statuses[1];
  } else {
    int too_large = 0;
    for (const Status& s : statuses) {
      EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
      if (s.ToString().find("File too large") != std::string::npos) ++too_large;
    }
    EXPECT_GE(too_large, 1);
  }
  EXPECT_LT(seconds, 20) << "no rank waited for a collective that never came (Gloo's timeout here: 60 s)";
  for (const auto& e : fs::directory_iterator(dir_ / "out")) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.find("optimizer") == std::string::npos && name.find(".tmp.") == std::string::npos &&
                name.find(".partial") == std::string::npos)
        << e.path() << " left behind";
  }
}

// parallel: only the rank writing the optimizer file's last pages (rank 1: the end of the last
// unit) passes the size limit. It reports the error; rank 0, which wrote all its pages, learns at
// the failure check that rank 1 failed and fails too, and rank 0 removes the partial files.
TEST(FullStateParallelTest, OneRanksWriteErrorFailsTheOthers) {
  const fs::path dir = fs::temp_directory_path() / ("eft-full-state-one-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const ModelConfig config = TinyBf16Config(/*vocab=*/1021, /*hidden=*/64);
  auto save = [&](const fs::path& out, FullWriteMode mode, std::vector<Status>* statuses, int64_t* optimizer_bytes) {
    RunRanks(2, [&](Communicator& comm) {
      ShardedLlama model(config, &comm, ShardingOptions(ShardingStrategy::kFull, true));
      ASSERT_TRUE(model.InitRandom(7).ok());
      std::vector<UnitState> units;
      for (FlatParamUnit* u : model.trainable_units()) {
        units.push_back(UnitState{u, at::zeros_like(u->shard()), at::zeros_like(u->shard())});
      }
      auto written = WriteFullState(model, units, out.string(), {}, comm.rank() == 0, true, nullptr, mode);
      (*statuses)[comm.rank()] = written.status();
      if (written.ok() && comm.rank() == 0) *optimizer_bytes = (*written)[1].bytes;
    });
  };
  std::vector<Status> statuses(2);
  int64_t optimizer_bytes = 0;
  save(dir / "probe", FullWriteMode::kParallel, &statuses, &optimizer_bytes);
  ASSERT_TRUE(statuses[0].ok() && statuses[1].ok());
  ASSERT_GT(optimizer_bytes, 256 << 10);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit limit = old;
  limit.rlim_cur = static_cast<rlim_t>(optimizer_bytes - (16 << 10));
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  const auto start = std::chrono::steady_clock::now();
  save(dir / "out", FullWriteMode::kParallel, &statuses, &optimizer_bytes);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(statuses[1].ToString().find("File too large"), std::string::npos) << statuses[1];
  EXPECT_NE(statuses[0].ToString().find("another rank failed"), std::string::npos) << statuses[0];
  EXPECT_LT(seconds, 20);
  for (const auto& e : fs::directory_iterator(dir / "out")) {
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path() << " left behind";
  }
  fs::remove_all(dir);
}

// The manifest's CRC-32C of each file (combined from the writers' pieces in the parallel save) is
// the CRC of the file as read back.
TEST_P(FullStateTest, TheManifestCrcsAreThoseOfTheFilesOnDisk) {
  for (int world : {2, 3}) {
    const fs::path out = dir_ / ("w" + std::to_string(world));
    std::vector<ManifestFile> files;
    for (const Status& s : Save(world, out.string(), &files)) ASSERT_TRUE(s.ok()) << s;
    ASSERT_FALSE(files.empty());
    for (const ManifestFile& f : files) {
      auto read = Crc32cFile((out / f.path).string());
      ASSERT_TRUE(read.ok()) << read.status();
      EXPECT_EQ(read->first, f.crc32c) << f.path << " at world size " << world;
      EXPECT_EQ(read->second, f.bytes) << f.path;
    }
  }
}

// A larger odd-sized model: units of many pages, split by 3 ranks in the middle of pages of every
// file, where the page rule moves boundary bytes to the page's owner. Same bytes as one rank.
TEST_P(FullStateTest, RankBoundariesInsidePagesWriteTheSameBytes) {
  const ModelConfig config = TinyBf16Config(/*vocab=*/1021, /*hidden=*/64);
  std::vector<ManifestFile> files1, files3;
  for (const Status& s : Save(1, (dir_ / "w1").string(), &files1, FullWriteMode::kRank0, config)) ASSERT_TRUE(s.ok()) << s;
  for (const Status& s : Save(3, (dir_ / "w3").string(), &files3, std::nullopt, config)) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(files1.size(), files3.size());
  ASSERT_GT(files1[0].bytes, 64 << 10);
  for (size_t i = 0; i < files1.size(); ++i) {
    EXPECT_EQ(files3[i].crc32c, files1[i].crc32c) << files1[i].path;
    EXPECT_TRUE(Bytes(dir_ / "w3" / files3[i].path) == Bytes(dir_ / "w1" / files1[i].path)) << files1[i].path;
  }
}

// A model directory split into shards (made small here) with its index: the same files and bytes.
TEST_P(FullStateTest, AShardedModelDirectoryWritesTheSameBytes) {
  const ModelConfig config = TinyBf16Config(/*vocab=*/1021, /*hidden=*/64);
  SetMaxModelShardBytesForTesting(64 << 10);
  std::vector<ManifestFile> files1, files3;
  for (const Status& s : Save(1, (dir_ / "w1").string(), &files1, FullWriteMode::kRank0, config)) EXPECT_TRUE(s.ok()) << s;
  for (const Status& s : Save(3, (dir_ / "w3").string(), &files3, std::nullopt, config)) EXPECT_TRUE(s.ok()) << s;
  SetMaxModelShardBytesForTesting(5ull << 30);
  ASSERT_EQ(files1.size(), files3.size());
  ASSERT_GT(files1.size(), 4u);
  EXPECT_EQ(files3[0].path, "model-00001-of-0000" + std::to_string(files1.size() - 3) + ".safetensors");
  EXPECT_TRUE(fs::exists(dir_ / "w3" / "model.safetensors.index.json"));
  for (size_t i = 0; i < files1.size(); ++i) {
    EXPECT_EQ(files3[i].path, files1[i].path);
    EXPECT_EQ(files3[i].crc32c, files1[i].crc32c) << files1[i].path;
    EXPECT_TRUE(Bytes(dir_ / "w3" / files3[i].path) == Bytes(dir_ / "w1" / files1[i].path)) << files1[i].path;
  }
  auto weights = SafetensorsDir::Open((dir_ / "w3").string());
  ASSERT_TRUE(weights.ok()) << weights.status();
}

// Rank 0 cannot create the files (here: a directory where a file must go). Every rank returns at
// once with an error; nothing is written.
TEST_P(FullStateTest, RankZeroFailingToCreateTheFilesFailsEveryRankAtOnce) {
  const fs::path out = dir_ / "out";
  fs::create_directories(out / "optimizer.safetensors.partial");  // parallel: open() fails, EISDIR
  fs::create_directories(out / ("optimizer.safetensors.tmp." + std::to_string(::getpid())));  // rank0: the same
  const auto start = std::chrono::steady_clock::now();
  std::vector<Status> statuses = Save(3, out.string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(statuses[0].code(), StatusCode::kInternal) << statuses[0];
  EXPECT_NE(statuses[0].ToString().find("optimizer.safetensors"), std::string::npos) << statuses[0];
  if (GetParam() == FullWriteMode::kParallel) {
    for (int r = 1; r < 3; ++r) EXPECT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_FALSE(fs::exists(out / "model.safetensors.partial"));
  }
  EXPECT_LT(seconds, 20) << "no rank waited for a collective that never came (Gloo's timeout here: 60 s)";
}

// The small files of a save on a full disk: their error carries the system's reason, so the save
// counts as "storage full" (exit 77, no pointless restarts). Found by the fault soak: config.json
// failed with a bare "writing ..." and the job was restarted 10 times.
TEST(FullStateSidecars, AFullDiskFailsTheSmallFilesWithTheSystemsReason) {
  const fs::path dir = fs::temp_directory_path() / ("eft-sidecar-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_symlink("/dev/full", dir / "config.json");
  auto files = WriteHfSidecarFiles(dir.string(), TinyBf16Config(), {});
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.status().message().find(std::strerror(ENOSPC)), std::string::npos) << files.status();
  fs::create_symlink("/dev/full", dir / "trainer_state.json.tmp");
  Status durable = WriteFileDurably((dir / "trainer_state.json").string(), "{}");
  EXPECT_NE(durable.message().find(std::strerror(ENOSPC)), std::string::npos) << durable;
  fs::create_symlink("/dev/full", dir / kAdapterConfigFile);
  Status adapter = WriteAdapterConfig(dir.string(), AdapterConfig{8, 16, 0, {"q_proj"}, "base"});
  EXPECT_NE(adapter.message().find(std::strerror(ENOSPC)), std::string::npos) << adapter;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Modes, FullStateTest, ::testing::Values(FullWriteMode::kParallel, FullWriteMode::kRank0),
                         [](const ::testing::TestParamInfo<FullWriteMode>& p) {
                           return std::string(p.param == FullWriteMode::kParallel ? "Parallel" : "Rank0");
                         });

// WriteFilesInParallel itself, in chunks of one page (many failure-check rounds), against the
// streaming writer: 3 ranks write one unit's moments (an odd number of elements) as two tensors.
TEST(WriteFilesInParallel, SmallChunksWriteWhatTheStreamingWriterWrites) {
  const fs::path dir = fs::temp_directory_path() / ("eft-parallel-write-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::vector<ParamSpec> specs = {{"a", {4001, 7}}, {"b", {3}}, {"c", {2049}}};  // ~60 KB a rank: paced, 2+ rounds
  auto value = [](const ParamSpec& p) { return Moment(p, 1.0); };
  FullWriteFile file{"m.safetensors", {}, {{"k", "v"}}, {}};
  for (size_t i = 0; i < specs.size(); ++i) {
    file.tensors.push_back({"exp_avg." + specs[i].name, at::kFloat, specs[i].shape});
    file.sources.push_back({0, i, FullWriteTensor::Source::kExpAvg});
    file.tensors.push_back({"half." + specs[i].name, at::kHalf, specs[i].shape});  // fp32 and fp16 side by side
    file.sources.push_back({0, i, FullWriteTensor::Source::kParams});
  }
  std::vector<ManifestFile> sealed;
  std::vector<Status> statuses(3);
  std::vector<ParallelWriteTimes> times(3);
  RunRanks(3, [&](Communicator& comm) {
    FlatParamUnit unit("u", specs, &comm);
    ASSERT_TRUE(unit.InitShard([](const ParamSpec& p) { return Moment(p, 0.25); }).ok());
    UnitState s{&unit, at::empty_like(unit.shard()), at::empty_like(unit.shard())};
    ASSERT_TRUE(unit.FillSlice(s.exp_avg, value).ok());
    times[comm.rank()].record_writes = true;
    auto written = WriteFilesInParallel(comm, {s}, dir.string(), {file}, &times[comm.rank()], 4096);
    statuses[comm.rank()] = written.status();
    if (written.ok() && comm.rank() == 0) sealed = *written;
  });
  for (const Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  auto ref = SafetensorsWriter::Create((dir / "ref.safetensors").string(), file.tensors, file.metadata);
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (const ParamSpec& p : specs) {
    ASSERT_TRUE((*ref)->Append(value(p)).ok());
    ASSERT_TRUE((*ref)->Append(Moment(p, 0.25)).ok());
  }
  auto ref_file = (*ref)->Finish();
  ASSERT_TRUE(ref_file.ok()) << ref_file.status();
  ASSERT_EQ(sealed.size(), 1u);
  EXPECT_EQ(sealed[0].bytes, ref_file->bytes);
  EXPECT_EQ(sealed[0].crc32c, ref_file->crc32c);
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_TRUE(bytes(dir / "m.safetensors") == bytes(dir / "ref.safetensors"));
  // The page rule: every write covers whole pages (the last one may end at the file's end), and no
  // page is written by two ranks; together the ranks wrote every byte once.
  std::map<uint64_t, int> page_writer;
  int64_t total = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_GT(times[r].bytes, 0) << "rank " << r;
    for (const auto& [f, offset, n] : times[r].writes) {
      total += static_cast<int64_t>(n);
      EXPECT_EQ(offset % 4096, 0u);
      EXPECT_TRUE((offset + n) % 4096 == 0 || static_cast<int64_t>(offset + n) == sealed[0].bytes) << offset << "+" << n;
      for (uint64_t p = offset / 4096; p * 4096 < offset + n; ++p) {
        auto [it, fresh] = page_writer.emplace(p, r);
        EXPECT_TRUE(fresh) << "page " << p << " written by ranks " << it->second << " and " << r;
      }
    }
  }
  EXPECT_EQ(total, sealed[0].bytes);
  EXPECT_GT(page_writer.size(), 10u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace eft::trainer
