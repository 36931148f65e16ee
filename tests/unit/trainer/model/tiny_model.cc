#include "tiny_model.h"

#include "tests/util/torch_python.h"
#include "trainer/io/safetensors.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>

namespace eft::trainer::testing {
namespace {

using json = nlohmann::json;

// The files are raw little-endian, and this writes host-order bytes.
static_assert(std::endian::native == std::endian::little, "raw tensor files assume a little-endian host");

std::string DtypeName(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kLong: return "int64";
    default: throw std::runtime_error(std::string("no raw file dtype for ") + c10::toString(t));
  }
}

void WriteRaw(const std::string& path, const at::Tensor& t) {
  at::Tensor c = t.detach().contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

at::Tensor ReadRaw(const std::string& path, std::vector<int64_t> shape, at::ScalarType dtype) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype));
  std::ifstream in(path, std::ios::binary);
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (!in || in.gcount() != static_cast<std::streamsize>(t.nbytes()))
    throw std::runtime_error("cannot read " + std::to_string(t.nbytes()) + " bytes from " + path);
  return t;
}

std::string SourceDir() {
  if (const char* env = std::getenv("EFT_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
#ifdef EFT_SOURCE_DIR_DEFAULT
  return EFT_SOURCE_DIR_DEFAULT;
#else
  throw std::runtime_error("EFT_SOURCE_DIR is not set (the build defines EFT_SOURCE_DIR_DEFAULT for this)");
#endif
}

// Runs `command`, returning (exit status, combined output).
std::pair<int, std::string> Run(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) output.append(buf.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

}  // namespace

json TinyConfigJson(const std::string& arch) {
  json j = {{"model_type", arch},      {"vocab_size", 97},         {"hidden_size", 64},
            {"intermediate_size", 96}, {"num_hidden_layers", 2},   {"num_attention_heads", 4},
            {"num_key_value_heads", 2}, {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-5},
            {"rope_theta", 10000.0},   {"tie_word_embeddings", false}, {"hidden_act", "silu"},
            {"torch_dtype", "float32"}, {"bos_token_id", 1},      {"eos_token_id", 2},
            {"pad_token_id", 0}};
  if (arch == "llama") {
    j["rope_theta"] = 500.0;  // with head_dim 16, wavelengths from 6 to ~1400 positions
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}};
  } else if (arch == "qwen2") {
    j["tie_word_embeddings"] = true;
    j["rope_theta"] = 1000000.0;
    j["pad_token_id"] = 96;
    j["use_sliding_window"] = false;
    j["sliding_window"] = 4096;
  } else if (arch == "qwen3") {
    j["tie_word_embeddings"] = true;
    j["head_dim"] = 32;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  } else if (arch == "mistral") {
    j["num_key_value_heads"] = 1;
    j["sliding_window"] = nullptr;
    j["pad_token_id"] = nullptr;
  } else {
    throw std::runtime_error("unknown arch " + arch);
  }
  return j;
}

ModelConfig TinyConfig(const std::string& arch) {
  auto r = ModelConfig::FromHfJson(TinyConfigJson(arch));
  if (!r.ok()) throw std::runtime_error(r.status().ToString());
  return r.value();
}

TinyModel TinyModel::Random(const ModelConfig& config, uint64_t seed, at::ScalarType dtype) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto make = [&](const ParamSpec& spec) {
    at::Tensor t = at::empty(spec.shape, at::TensorOptions().dtype(at::kDouble));
    const std::string& n = spec.name;
    if (n.ends_with("norm.weight")) {
      t.normal_(1.0, 0.2, gen);
    } else if (n.ends_with(".bias")) {
      t.normal_(0.0, 0.3, gen);
    } else {
      t.normal_(0.0, 0.15, gen);
    }
    return t.to(dtype);
  };
  TinyModel m;
  m.config = config;
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    m.layers.emplace_back();
    for (const ParamSpec& s : LayerParamSpecs(config, l)) m.layers.back().push_back(make(s));
  }
  for (const ParamSpec& s : RootParamSpecs(config)) m.root.push_back(make(s));
  return m;
}

TinyModel TinyModel::To(at::ScalarType dtype) const {
  TinyModel m;
  m.config = config;
  for (const auto& layer : layers) {
    m.layers.emplace_back();
    for (const auto& t : layer) m.layers.back().push_back(t.detach().to(dtype).clone());
  }
  for (const auto& t : root) m.root.push_back(t.detach().to(dtype).clone());
  return m;
}

void TinyModel::RequireGrad() {
  for (auto& layer : layers)
    for (auto& t : layer) t.requires_grad_(true);
  for (auto& t : root) t.requires_grad_(true);
}

std::vector<std::pair<std::string, at::Tensor>> TinyModel::Named() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t l = 0; l < layers.size(); ++l) {
    auto specs = LayerParamSpecs(config, static_cast<int>(l));
    for (size_t i = 0; i < specs.size(); ++i) out.emplace_back(specs[i].name, layers[l][i]);
  }
  auto specs = RootParamSpecs(config);
  for (size_t i = 0; i < specs.size(); ++i) out.emplace_back(specs[i].name, root[i]);
  return out;
}

at::Tensor RunHidden(const TinyModel& m, const Batch& batch) {
  const at::ScalarType dtype = m.root[0].scalar_type();
  AttentionContext ctx = MakeAttentionContext(m.config, batch, dtype);
  at::Tensor h = Embed(BindRoot(m.config, m.root), batch.input_ids);
  for (const auto& layer : m.layers) h = DecoderLayer(m.config, BindLayer(m.config, layer), h, ctx);
  return h;
}

Output RunModel(const TinyModel& m, const Batch& batch, int64_t chunk_rows) {
  RootWeights root = BindRoot(m.config, m.root);
  at::Tensor h = RunHidden(m, batch);
  return {Logits(m.config, root, h), LossSum(m.config, root, h, batch.labels, chunk_rows)};
}

Batch MakeBatch(const std::vector<RowSpec>& rows, int64_t pad_id) {
  int64_t T = 0;
  for (const RowSpec& r : rows) {
    int64_t n = r.padding;
    for (const auto& d : r.documents) n += static_cast<int64_t>(d.size());
    T = std::max(T, n);
  }
  const int64_t B = static_cast<int64_t>(rows.size());
  Batch b;
  b.input_ids = at::full({B, T}, pad_id, at::kLong);
  b.labels = at::full({B, T}, -100, at::kLong);
  b.position_ids = at::zeros({B, T}, at::kLong);
  b.segment_ids = at::zeros({B, T}, at::kLong);
  auto ids = b.input_ids.accessor<int64_t, 2>(), labels = b.labels.accessor<int64_t, 2>();
  auto pos = b.position_ids.accessor<int64_t, 2>(), seg = b.segment_ids.accessor<int64_t, 2>();
  for (int64_t r = 0; r < B; ++r) {
    int64_t t = 0;
    for (size_t d = 0; d < rows[r].documents.size(); ++d) {
      const auto& doc = rows[r].documents[d];
      for (size_t i = 0; i < doc.size(); ++i, ++t) {
        ids[r][t] = doc[i];
        pos[r][t] = rows[r].first_position + static_cast<int64_t>(i);
        seg[r][t] = static_cast<int64_t>(d) + 1;
        if (i + 1 < doc.size() && static_cast<int64_t>(i) >= rows[r].prompt) labels[r][t] = doc[i + 1];
      }
    }
    // Padding continues positions from 0, like a pipeline padding with fresh positions would.
    for (int64_t p = 0; t < T; ++t, ++p) pos[r][t] = p;
  }
  b.trained_tokens = b.labels.ne(-100).sum().item<int64_t>();
  b.tokens = b.segment_ids.ne(0).sum().item<int64_t>();
  return b;
}

std::vector<int64_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor t = at::randint(vocab, {n}, gen, at::TensorOptions().dtype(at::kLong));
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

std::string ReferenceUnavailableReason() {
  auto [rc, out] = Run(eft::testing::TorchPython() + " -c 'import torch, numpy'");
  if (rc != 0) return eft::testing::TorchPython() + " cannot import torch and numpy (run scripts/install-deps.sh): " + out;
  return "";
}

namespace {

// Writes the batch (and `params`) beside `manifest` in a temp dir, runs the reference, reads back.
ReferenceResult RunReferenceWith(json manifest, const std::vector<std::pair<std::string, at::Tensor>>& params,
                                 const Batch& batch, int64_t vocab, at::ScalarType dtype) {
  char tmpl[] = "/tmp/eft_llama_ref_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  const std::string dir = tmpl;
  manifest["tensors"] = json::object();
  int index = 0;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    const std::string file = "t" + std::to_string(index++) + ".bin";
    WriteRaw(dir + "/" + file, t);
    manifest["tensors"][name] = {{"file", file}, {"dtype", DtypeName(t.scalar_type())}, {"shape", t.sizes().vec()}};
  };
  for (const auto& [name, t] : params) add(name, t);
  add("input_ids", batch.input_ids);
  add("labels", batch.labels);
  add("position_ids", batch.position_ids);
  add("segment_ids", batch.segment_ids);
  std::ofstream(dir + "/manifest.json") << manifest.dump(1);

  const std::string script = SourceDir() + "/tests/reference/llama_reference.py";
  auto [rc, output] = Run("OMP_NUM_THREADS=1 " + eft::testing::TorchPython() + " " + script + " " + dir);
  if (rc != 0) throw std::runtime_error("reference failed (exit " + std::to_string(rc) + "):\n" + output);

  std::ifstream in(dir + "/result.json");
  json result = json::parse(in);
  ReferenceResult r;
  r.logits = ReadRaw(dir + "/logits.bin", {batch.input_ids.size(0), batch.input_ids.size(1), vocab}, dtype);
  r.loss_sum = result["loss_sum"].get<double>();
  r.trained_tokens = result["trained_tokens"].get<int64_t>();
  for (auto& [name, e] : result["grads"].items())
    r.grads.emplace_back(name, ReadRaw(dir + "/" + e["file"].get<std::string>(), e["shape"].get<std::vector<int64_t>>(), dtype));
  std::filesystem::remove_all(dir);
  return r;
}

}  // namespace

ReferenceResult RunReference(const TinyModel& m, const Batch& batch, bool want_grads) {
  json manifest = {{"config", m.config.ToHfJson()}, {"want_grads", want_grads}};
  return RunReferenceWith(manifest, m.Named(), batch, m.config.vocab_size, m.root[0].scalar_type());
}

ReferenceResult RunLoraReference(const ModelConfig& config, const std::vector<std::pair<std::string, at::Tensor>>& params,
                                 int64_t r, double alpha, const Batch& batch) {
  json manifest = {{"config", config.ToHfJson()}, {"want_grads", true}, {"lora", {{"r", r}, {"alpha", alpha}}}};
  return RunReferenceWith(manifest, params, batch, config.vocab_size, at::kFloat);
}

ReferenceResult RunReferenceOnHfDir(const std::string& hf_dir, const ModelConfig& config, const Batch& batch) {
  json manifest = {{"hf_dir", hf_dir}, {"want_grads", false}};
  return RunReferenceWith(manifest, {}, batch, config.vocab_size, at::kFloat);
}

Result<TinyModel> LoadModelDir(const std::string& dir) {
  EFT_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromHfDir(dir));
  EFT_ASSIGN_OR_RETURN(auto weights, SafetensorsDir::Open(dir));
  TinyModel m;
  m.config = config;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    m.layers.emplace_back();
    for (const auto& spec : LayerParamSpecs(config, static_cast<int>(i))) {
      EFT_ASSIGN_OR_RETURN(at::Tensor t, weights->Load(spec.name, at::kFloat));
      m.layers.back().push_back(t);
    }
  }
  for (const auto& spec : RootParamSpecs(config)) {
    EFT_ASSIGN_OR_RETURN(at::Tensor t, weights->Load(spec.name, at::kFloat));
    m.root.push_back(t);
  }
  return m;
}

Batch BatchFromHf(const at::Tensor& input_ids, const at::Tensor& hf_labels) {
  Batch b;
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  b.input_ids = input_ids.to(at::kLong);
  b.labels = at::full({B, T}, -100, at::kLong);
  b.labels.narrow(1, 0, T - 1).copy_(hf_labels.to(at::kLong).narrow(1, 1, T - 1));
  b.position_ids = at::arange(T, at::kLong).unsqueeze(0).repeat({B, 1});
  b.segment_ids = at::ones({B, T}, at::kLong);
  b.trained_tokens = b.labels.ne(-100).sum().item<int64_t>();
  b.tokens = B * T;
  return b;
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.detach().to(at::kDouble) - b.detach().to(at::kDouble)).abs().max().item<double>();
}

}  // namespace eft::trainer::testing
