#include "trainer/checkpoint/full_state.h"

#include <filesystem>
#include <fstream>

#include "trainer/io/safetensors.h"

namespace eft::trainer {

namespace fs = std::filesystem;

const std::vector<std::string>& TokenizerFiles() {
  static const std::vector<std::string> kFiles = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                                  "generation_config.json", "vocab.json", "merges.txt",
                                                  "tokenizer.model", "added_tokens.json"};
  return kFiles;
}

at::ScalarType HfDtype(const ModelConfig& config) {
  if (config.torch_dtype == "float32") return at::kFloat;
  if (config.torch_dtype == "float16") return at::kHalf;
  return at::kBFloat16;
}

Result<std::vector<std::string>> WriteHfModel(const std::string& dir,
                                              const std::vector<std::pair<std::string, at::Tensor>>& params,
                                              const ModelConfig& config, at::ScalarType dtype,
                                              const std::string& tokenizer_dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("creating " + dir + ": " + ec.message());
  std::vector<std::pair<std::string, at::Tensor>> converted;
  for (const auto& [name, t] : params) converted.emplace_back(name, t.to(dtype));
  EFT_RETURN_IF_ERROR(WriteSafetensorsDir(dir, converted, 5ull << 30, {{"format", "pt"}}));
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("model", 0) == 0 && (entry.path().extension() == ".safetensors" || name == "model.safetensors.index.json")) {
      files.push_back(name);
    }
  }
  {
    std::ofstream out(dir + "/config.json");
    out << config.ToHfJson().dump(2) << "\n";
    out.flush();
    if (!out) return Status::IoError("writing " + dir + "/config.json");
  }
  files.push_back("config.json");
  if (!tokenizer_dir.empty()) {
    for (const auto& f : TokenizerFiles()) {
      fs::path src = fs::path(tokenizer_dir) / f;
      if (!fs::exists(src)) continue;
      fs::copy_file(src, fs::path(dir) / f, fs::copy_options::overwrite_existing, ec);
      if (ec) return Status::IoError("copying " + src.string() + ": " + ec.message());
      files.push_back(f);
    }
  }
  return files;
}

Result<std::vector<std::string>> WriteFullState(ShardedLlama& model, const std::vector<UnitState>& units,
                                                const std::string& dir, const std::string& tokenizer_dir,
                                                bool writer) {
  // Every rank takes part in the gathers; only the writer keeps and writes the results.
  std::vector<std::pair<std::string, at::Tensor>> params, optimizer;
  const at::ScalarType dtype = HfDtype(model.config());
  for (const UnitState& s : units) {
    at::Tensor master = s.unit->GatherSlices(s.unit->shard());
    at::Tensor m = s.unit->GatherSlices(s.exp_avg);
    at::Tensor v = s.unit->GatherSlices(s.exp_avg_sq);
    if (!writer) continue;
    auto views_p = s.unit->Views(master), views_m = s.unit->Views(m), views_v = s.unit->Views(v);
    for (size_t i = 0; i < views_p.size(); ++i) {
      const std::string& name = s.unit->specs()[i].name;
      params.emplace_back(name, views_p[i]);
      optimizer.emplace_back("exp_avg." + name, views_m[i]);
      optimizer.emplace_back("exp_avg_sq." + name, views_v[i]);
      // The HF weights are rounded to the model's dtype; resuming exactly needs the fp32 masters.
      if (dtype != at::kFloat) optimizer.emplace_back("master." + name, views_p[i]);
    }
  }
  if (!writer) return std::vector<std::string>{};
  EFT_ASSIGN_OR_RETURN(std::vector<std::string> files, WriteHfModel(dir, params, model.config(), dtype, tokenizer_dir));
  EFT_RETURN_IF_ERROR(WriteSafetensors(dir + "/optimizer.safetensors", optimizer, {{"format", "eft-optimizer"}}));
  files.push_back("optimizer.safetensors");
  return files;
}

Status LoadFullState(const std::string& dir, const std::vector<UnitState>& units) {
  EFT_ASSIGN_OR_RETURN(auto weights, SafetensorsDir::Open(dir));
  EFT_ASSIGN_OR_RETURN(auto optimizer, SafetensorsFile::Open(dir + "/optimizer.safetensors"));
  auto from = [&](const std::string& prefix) {
    return [&, prefix](const ParamSpec& spec) -> Result<at::Tensor> {
      return optimizer->Load(prefix + spec.name, at::kFloat);
    };
  };
  for (const UnitState& s : units) {
    const bool has_master = optimizer->Find("master." + s.unit->specs().front().name) != nullptr;
    if (has_master) {
      EFT_RETURN_IF_ERROR(s.unit->InitShard(from("master.")));
    } else {
      EFT_RETURN_IF_ERROR(s.unit->InitShard([&](const ParamSpec& spec) { return weights->Load(spec.name, at::kFloat); }));
    }
    at::Tensor m = s.exp_avg, v = s.exp_avg_sq;
    EFT_RETURN_IF_ERROR(s.unit->FillSlice(m, from("exp_avg.")));
    EFT_RETURN_IF_ERROR(s.unit->FillSlice(v, from("exp_avg_sq.")));
  }
  return Status::Ok();
}

}  // namespace eft::trainer
