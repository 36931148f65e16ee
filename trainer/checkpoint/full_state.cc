#include "trainer/checkpoint/full_state.h"

#include <atomic>
#include <algorithm>
#include <filesystem>
#include <set>

#include "common/crc32c.h"
#include "common/file_util.h"
#include "common/stopwatch.h"

#include "trainer/checkpoint/parallel_full_write.h"
#include "trainer/checkpoint/peft_adapter.h"
#include "trainer/io/safetensors.h"
#include "trainer/io/safetensors_layout.h"
#include "trainer/io/safetensors_writer.h"

namespace eft::trainer {

namespace fs = std::filesystem;

namespace {

// What save_pretrained writes for a tokenizer and a causal LM besides weights and config.json
// (transformers 4.x and 5), and what a model's repository ships with them.
bool IsHfModelFile(const std::string& name) {
  static const std::set<std::string> kNames = {
      "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
      "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model",
      "chat_template.jinja", "chat_template.json", "generation_config.json"};
  if (kNames.count(name) != 0) return true;
  if (name.size() > 9 && name.compare(name.size() - 9, 9, ".tiktoken") == 0) return true;
  // The licence travels with a model derived from it (Apache-2.0 section 4; Llama's and Gemma's
  // terms too); the base's README does not: it describes another model.
  for (const char* prefix : {"LICENSE", "LICENCE", "NOTICE", "USE_POLICY"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> HfModelFiles(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file(ec) && IsHfModelFile(name)) files.push_back(name);
  }
  // transformers >= 4.52 keeps named templates (e.g. tool_use) there, one Jinja file each.
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "additional_chat_templates", ec)) {
    if (e.is_regular_file(ec) && e.path().extension() == ".jinja")
      files.push_back("additional_chat_templates/" + e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::optional<FullWriteMode> FullWriteModeFromName(const std::string& name) {
  if (name == "parallel") return FullWriteMode::kParallel;
  if (name == "rank0") return FullWriteMode::kRank0;
  return std::nullopt;
}

at::ScalarType HfDtype(const ModelConfig& config) {
  if (config.torch_dtype == "float32") return at::kFloat;
  if (config.torch_dtype == "float16") return at::kHalf;
  return at::kBFloat16;
}

Result<std::vector<std::string>> WriteHfSidecarFiles(const std::string& dir, const ModelConfig& config,
                                                     const HfFileSources& sources) {
  std::vector<std::string> files;
  EFT_RETURN_IF_ERROR(WriteStringToFile(dir + "/config.json", config.ToHfJson().dump(2) + "\n"));
  files.push_back("config.json");
  auto copy = [&](const fs::path& src, const std::string& name) -> Status {
    std::error_code ec;
    const fs::path dst = fs::path(dir) / name;
    fs::create_directories(dst.parent_path(), ec);
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::IoError("copying " + src.string() + " to " + dst.string() + ": " + ec.message());
    if (std::find(files.begin(), files.end(), name) == files.end()) files.push_back(name);
    return Status::Ok();
  };
  for (const std::string& model_dir : sources.model_dirs) {
    if (model_dir.empty()) continue;
    for (const std::string& name : HfModelFiles(model_dir)) {
      EFT_RETURN_IF_ERROR(copy(fs::path(model_dir) / name, name));
    }
  }
  if (!sources.chat_template.empty()) EFT_RETURN_IF_ERROR(copy(sources.chat_template, "chat_template.jinja"));
  return files;
}

namespace {

std::atomic<uint64_t> max_model_shard_bytes{5ull << 30};  // as save_pretrained's default

// One unit's gathers in flight: the whole flat vectors (on the writer; undefined elsewhere) and the
// waits for them.
struct Gathering {
  at::Tensor params, exp_avg, exp_avg_sq;
  std::vector<std::function<void()>> waits;
};

std::string Relative(const std::string& dir, const std::string& path) {
  return fs::path(path).lexically_relative(dir).string();
}

// The tensors of a full save in file order, each with where its values come from: the model's
// (`dtype`) and, `with_optimizer`, optimizer.safetensors' (fp32 moments, and the fp32 masters when
// `dtype` is not fp32: the HF weights are rounded to it, and resuming exactly needs the masters).
// Both write paths declare exactly these, so both write the same bytes.
struct FullStateTensors {
  std::vector<TensorDecl> model, optimizer;
  std::vector<FullWriteTensor> model_sources, optimizer_sources;
};

FullStateTensors DeclareFullState(const std::vector<UnitState>& units, at::ScalarType dtype, bool with_optimizer) {
  using Source = FullWriteTensor::Source;
  const bool with_master = with_optimizer && dtype != at::kFloat;
  FullStateTensors out;
  for (size_t u = 0; u < units.size(); ++u) {
    const auto& specs = units[u].unit->specs();
    for (size_t i = 0; i < specs.size(); ++i) {
      out.model.push_back({specs[i].name, dtype, specs[i].shape});
      out.model_sources.push_back({u, i, Source::kParams});
      if (!with_optimizer) continue;
      for (auto [prefix, source] : {std::pair{"exp_avg.", Source::kExpAvg}, std::pair{"exp_avg_sq.", Source::kExpAvgSq},
                                    std::pair{"master.", Source::kParams}}) {
        if (source == Source::kParams && !with_master) continue;
        out.optimizer.push_back({prefix + specs[i].name, at::kFloat, specs[i].shape});
        out.optimizer_sources.push_back({u, i, source});
      }
    }
  }
  return out;
}

// The parallel path (parallel_full_write.h): the same files, tensors and order as the rank0 path,
// so both write the same bytes.
Result<std::vector<ManifestFile>> WriteModelAndOptimizerInParallel(ShardedLlama& model,
                                                                   const std::vector<UnitState>& units,
                                                                   const std::string& dir, bool with_optimizer,
                                                                   FullSaveTimes* t) {
  FullStateTensors decl = DeclareFullState(units, HfDtype(model.config()), with_optimizer);
  const std::vector<FullWriteTensor>& w_sources = decl.model_sources;
  FullWriteFile optimizer{"optimizer.safetensors", std::move(decl.optimizer), {{"format", "eft-optimizer"}},
                          std::move(decl.optimizer_sources)};
  EFT_ASSIGN_OR_RETURN(std::vector<ModelShard> shards, PlanModelShards(dir, std::move(decl.model), max_model_shard_bytes.load()));
  std::vector<FullWriteFile> files;
  size_t next = 0;
  for (ModelShard& shard : shards) {
    FullWriteFile f{shard.name, std::move(shard.tensors), {{"format", "pt"}}, {}};
    f.sources.assign(w_sources.begin() + next, w_sources.begin() + next + f.tensors.size());
    next += f.tensors.size();
    shard.tensors = f.tensors;  // kept for the index
    files.push_back(std::move(f));
  }
  if (with_optimizer) files.push_back(std::move(optimizer));
  ParallelWriteTimes pt;
  auto written = WriteFilesInParallel(*model.comm(), units, dir, files, &pt);
  t->gather = pt.exchange;
  t->convert = pt.convert;
  t->write = pt.write;
  t->wait = pt.wait;
  t->bytes = pt.bytes;
  EFT_ASSIGN_OR_RETURN(std::vector<ManifestFile> sealed, std::move(written));
  if (model.comm()->rank() != 0) return sealed;
  // Rank 0 finishes the directory as SafetensorsDirWriter::Finish does: the index after the shards.
  if (shards.size() > 1) {
    const std::string text = ModelIndexJson(shards);
    EFT_RETURN_IF_ERROR(WriteFileDurably(dir + "/" + kModelIndexName, text));
    sealed.insert(sealed.begin() + static_cast<std::ptrdiff_t>(shards.size()),
                  ManifestFile{kModelIndexName, static_cast<int64_t>(text.size()), Crc32c(text.data(), text.size())});
  }
  EFT_RETURN_IF_ERROR(RemoveStaleModelFiles(dir, shards));
  EFT_RETURN_IF_ERROR(FsyncDir(dir));
  return sealed;
}

}  // namespace

void SetMaxModelShardBytesForTesting(uint64_t bytes) { max_model_shard_bytes = bytes; }

Result<std::vector<std::string>> WriteHfModel(const std::string& dir,
                                              const std::vector<std::pair<std::string, at::Tensor>>& params,
                                              const ModelConfig& config, at::ScalarType dtype,
                                              const HfFileSources& sources) {
  std::vector<TensorDecl> decls;
  for (const auto& [name, t] : params) decls.push_back({name, dtype, t.sizes().vec()});
  EFT_ASSIGN_OR_RETURN(auto weights, SafetensorsDirWriter::Create(dir, std::move(decls), max_model_shard_bytes.load()));
  for (const auto& [name, t] : params) EFT_RETURN_IF_ERROR(weights->Append(t));  // converted one at a time
  EFT_ASSIGN_OR_RETURN(std::vector<WrittenFile> written, weights->Finish());
  std::vector<std::string> files;
  for (const WrittenFile& f : written) files.push_back(Relative(dir, f.path));
  EFT_ASSIGN_OR_RETURN(std::vector<std::string> sidecar, WriteHfSidecarFiles(dir, config, sources));
  files.insert(files.end(), sidecar.begin(), sidecar.end());
  return files;
}

Result<std::vector<ManifestFile>> WriteFullState(ShardedLlama& model, const std::vector<UnitState>& units,
                                                 const std::string& dir, const HfFileSources& sources,
                                                 bool writer, bool with_optimizer, FullSaveTimes* times,
                                                 FullWriteMode mode) {
  TORCH_CHECK(units.empty() || units.front().unit->is_rank(0) == writer, "WriteFullState: the writer is rank 0");
  FullSaveTimes t;
  const Stopwatch total;
  if (mode == FullWriteMode::kParallel && !model.lora().enabled) {
    auto written = WriteModelAndOptimizerInParallel(model, units, dir, with_optimizer, &t);
    t.total = total.Seconds();
    if (times != nullptr) *times = t;
    EFT_ASSIGN_OR_RETURN(std::vector<ManifestFile> files, std::move(written));
    if (!writer) return files;
    EFT_ASSIGN_OR_RETURN(std::vector<std::string> sidecar, WriteHfSidecarFiles(dir, model.config(), sources));
    for (const std::string& name : sidecar) {
      EFT_ASSIGN_OR_RETURN(ManifestFile f, SealFile(dir, name));
      files.push_back(std::move(f));
    }
    return files;
  }
  // Declared up front, so both files stream: each unit is gathered to the writer (every rank takes
  // part), written and freed, and no rank ever holds the whole model or its moments.
  // LoRA: a PEFT adapter directory (fp32 adapters, as PEFT keeps them) instead of a model.
  const bool lora = model.lora().enabled;
  const at::ScalarType dtype = lora ? at::kFloat : HfDtype(model.config());
  const bool with_master = with_optimizer && dtype != at::kFloat;
  std::unique_ptr<SafetensorsDirWriter> weights;
  std::unique_ptr<SafetensorsWriter> adapters;
  std::unique_ptr<SafetensorsWriter> optimizer;
  // A writer's error (here, or in the loop below) is reported after the loop: the other ranks are in
  // the same gathers and must not be left waiting for one that never comes (they would hang until
  // the process group's timeout, 300 s on Gloo).
  Status status;
  if (writer) status = [&]() -> Status {
    FullStateTensors decl = DeclareFullState(units, dtype, with_optimizer);
    std::vector<TensorDecl> w = std::move(decl.model), o = std::move(decl.optimizer);
    if (lora) {
      std::error_code ec;
      fs::create_directories(dir, ec);  // SafetensorsDirWriter does this for a model
      EFT_ASSIGN_OR_RETURN(adapters, SafetensorsWriter::Create(dir + "/" + kAdapterWeightsFile, std::move(w),
                                                               {{"format", "pt"}}));
    } else {
      EFT_ASSIGN_OR_RETURN(weights, SafetensorsDirWriter::Create(dir, std::move(w), max_model_shard_bytes.load()));
    }
    if (with_optimizer) {
      EFT_ASSIGN_OR_RETURN(optimizer, SafetensorsWriter::Create(dir + "/optimizer.safetensors", std::move(o),
                                                                {{"format", "eft-optimizer"}}));
    }
    return Status::Ok();
  }();
  // Pipelined: while the writer writes unit i, unit i+1's gathers run in the communicator's threads,
  // so the network and the disk work at the same time. The gathers go to the writer only (nobody
  // else needs the whole unit), and every rank issues them in the same order. The writer holds at
  // most two units: the one it writes and the one arriving.
  const int root = 0;
  auto start = [&](const UnitState& s) {
    Gathering g;
    g.waits.push_back(s.unit->GatherSlicesToAsync(s.unit->shard(), root, &g.params));
    if (with_optimizer) {
      g.waits.push_back(s.unit->GatherSlicesToAsync(s.exp_avg, root, &g.exp_avg));
      g.waits.push_back(s.unit->GatherSlicesToAsync(s.exp_avg_sq, root, &g.exp_avg_sq));
    }
    return g;
  };
  Gathering next;
  if (!units.empty()) next = start(units.front());
  for (size_t u = 0; u < units.size(); ++u) {
    Gathering g = std::move(next);
    const Stopwatch gather;
    for (auto& wait : g.waits) wait();
    t.gather += gather.Seconds();
    if (u + 1 < units.size()) next = start(units[u + 1]);
    if (!writer || !status.ok()) continue;
    const FlatParamUnit& unit = *units[u].unit;
    auto views_p = unit.Views(g.params);
    std::vector<at::Tensor> views_m, views_v;
    if (with_optimizer) views_m = unit.Views(g.exp_avg), views_v = unit.Views(g.exp_avg_sq);
    for (size_t i = 0; i < views_p.size() && status.ok(); ++i) {
      const Stopwatch convert;
      at::Tensor p = views_p[i].to(dtype);
      t.convert += convert.Seconds();
      const Stopwatch write;
      status = lora ? adapters->Append(p) : weights->Append(p);
      t.bytes += static_cast<int64_t>(p.numel() * p.element_size());
      if (status.ok() && with_optimizer) {
        status = optimizer->Append(views_m[i]);
        if (status.ok()) status = optimizer->Append(views_v[i]);
        if (status.ok() && with_master) status = optimizer->Append(views_p[i]);
        t.bytes += static_cast<int64_t>(views_m[i].numel() * (with_master ? 12 : 8));
      }
      t.write += write.Seconds();
    }
  }
  t.total = total.Seconds();
  if (times != nullptr) *times = t;
  if (!writer) return std::vector<ManifestFile>{};
  EFT_RETURN_IF_ERROR(status);
  std::vector<WrittenFile> written;
  if (lora) {
    EFT_ASSIGN_OR_RETURN(WrittenFile f, adapters->Finish());
    written.push_back(f);
  } else {
    EFT_ASSIGN_OR_RETURN(written, weights->Finish());
  }
  if (with_optimizer) {
    EFT_ASSIGN_OR_RETURN(WrittenFile f, optimizer->Finish());
    written.push_back(f);
  }
  std::vector<ManifestFile> files;
  for (const WrittenFile& f : written) files.push_back({Relative(dir, f.path), f.bytes, f.crc32c});
  std::vector<std::string> sidecar;
  if (lora) {
    // No config.json: PEFT reads the base model's; the tokenizer files travel with the adapter.
    const LoraOptions& l = model.lora();
    // The base model is the directory training started from: the first the files come from.
    const std::string base = sources.model_dirs.empty() ? "" : sources.model_dirs.front();
    EFT_RETURN_IF_ERROR(WriteAdapterConfig(dir, {l.r, l.scale * static_cast<double>(l.r), l.dropout, l.modules, base}));
    EFT_ASSIGN_OR_RETURN(sidecar, WriteHfSidecarFiles(dir, model.config(), sources));
    std::error_code ec;
    fs::remove(dir + "/config.json", ec);
    sidecar.erase(sidecar.begin());  // config.json is always first
    sidecar.insert(sidecar.begin(), kAdapterConfigFile);
  } else {
    EFT_ASSIGN_OR_RETURN(sidecar, WriteHfSidecarFiles(dir, model.config(), sources));
  }
  for (const std::string& name : sidecar) {
    EFT_ASSIGN_OR_RETURN(ManifestFile f, SealFile(dir, name));
    files.push_back(std::move(f));
  }
  return files;
}

Status LoadFullState(const std::string& dir, const std::vector<UnitState>& units) {
  EFT_ASSIGN_OR_RETURN(auto optimizer, SafetensorsFile::Open(dir + "/optimizer.safetensors"));
  if (fs::exists(dir + "/" + kAdapterWeightsFile)) {  // LoRA: the adapters are the whole trained state
    EFT_ASSIGN_OR_RETURN(auto adapters, SafetensorsFile::Open(dir + "/" + kAdapterWeightsFile));
    for (const UnitState& s : units) {
      EFT_RETURN_IF_ERROR(s.unit->InitShard([&](const ParamSpec& spec) { return adapters->Load(spec.name, at::kFloat); }));
      at::Tensor m = s.exp_avg, v = s.exp_avg_sq;
      EFT_RETURN_IF_ERROR(s.unit->FillSlice(m, [&](const ParamSpec& spec) { return optimizer->Load("exp_avg." + spec.name, at::kFloat); }));
      EFT_RETURN_IF_ERROR(s.unit->FillSlice(v, [&](const ParamSpec& spec) { return optimizer->Load("exp_avg_sq." + spec.name, at::kFloat); }));
    }
    return Status::Ok();
  }
  EFT_ASSIGN_OR_RETURN(auto weights, SafetensorsDir::Open(dir));
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
