// WriteFullState with real c10d Gloo process groups (ranks as threads, rank_threads.h): the
// pipelined save (a unit's gathers to the writer overlap the previous unit's write) writes the same
// bytes at every world size as the world-size-1 save, which gathers nothing, and the files hold
// exactly the state; a write error in the middle of the save fails it on the writer at once and
// leaves no rank waiting in a collective (docs/checkpoints.md, "Write path").
#include "trainer/checkpoint/full_state.h"

#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "tests/unit/trainer/parallel/rank_threads.h"
#include "trainer/io/safetensors.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

ModelConfig TinyBf16Config() {
  nlohmann::json j = {{"model_type", "qwen2"},       {"hidden_size", 32},        {"intermediate_size", 48},
                      {"num_hidden_layers", 3},      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"vocab_size", 61},            {"max_position_embeddings", 128},
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

class FullStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eft-full-state-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Saves the model (random init, seed 7) with deterministic moments at `world` ranks into `out`;
  // returns each rank's result status, and the writer's files.
  std::vector<Status> Save(int world, const std::string& out, std::vector<ManifestFile>* files = nullptr) {
    std::vector<Status> statuses(world);
    auto body = [&](Communicator& comm) {
      ShardingOptions options;
      options.compute_dtype = at::kBFloat16;
      ShardedLlama model(TinyBf16Config(), &comm, options);
      ASSERT_TRUE(model.InitRandom(7).ok());
      std::vector<UnitState> units;
      for (FlatParamUnit* u : model.trainable_units()) {
        UnitState s{u, at::empty_like(u->shard()), at::empty_like(u->shard())};
        ASSERT_TRUE(u->FillSlice(s.exp_avg, [](const ParamSpec& p) { return Moment(p, 1.0); }).ok());
        ASSERT_TRUE(u->FillSlice(s.exp_avg_sq, [](const ParamSpec& p) { return Moment(p, 0.5); }).ok());
        units.push_back(s);
      }
      auto written = WriteFullState(model, units, out, "", comm.rank() == 0);
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

TEST_F(FullStateTest, EveryWorldSizeWritesTheSameBytesAsOneRank) {
  std::vector<ManifestFile> files1;
  for (const Status& s : Save(1, (dir_ / "w1").string(), &files1)) ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(files1.size(), 3u);  // model.safetensors, optimizer.safetensors, config.json
  for (int world : {2, 3}) {
    const fs::path out = dir_ / ("w" + std::to_string(world));
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

TEST_F(FullStateTest, TheFilesHoldTheWholeStateAtTheirDtypes) {
  for (const Status& s : Save(2, (dir_ / "out").string())) ASSERT_TRUE(s.ok()) << s;
  // The reference: the same model whole, at world size 1, without any checkpoint code.
  auto comm = CreateCpuCommunicator(RendezvousOptions{});
  ASSERT_TRUE(comm.ok());
  ShardedLlama model(TinyBf16Config(), comm->get(), ShardingOptions{});
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

// The writer's disk fills in the middle of the save (a file size limit: write() fails with EFBIG
// once the optimizer file passes it). The writer reports the error, the other ranks finish the
// gathers they are in and return, and nothing is left behind.
TEST_F(FullStateTest, AWriteErrorMidSaveFailsOnTheWriterAndReleasesEveryRank) {
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
  EXPECT_NE(statuses[0].ToString().find("File too large"), std::string::npos) << statuses[0];
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_LT(seconds, 20) << "no rank waited for a collective that never came (Gloo's timeout here: 60 s)";
  for (const auto& e : fs::directory_iterator(dir_ / "out")) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.find("optimizer") == std::string::npos && name.find(".tmp.") == std::string::npos)
        << e.path() << " left behind";
  }
}

}  // namespace
}  // namespace eft::trainer
