#include "trainer/io/safetensors_layout.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "trainer/io/safetensors_internal.h"

namespace eft::trainer {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace safetensors_internal;

const char* const kModelIndexName = "model.safetensors.index.json";
const char* const kModelSingleName = "model.safetensors";

namespace {

uint64_t Bytes(const TensorDecl& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n * DtypeByType(t.dtype)->size;
}

Status RemoveIfExists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::IoError("removing stale " + path + ": " + ErrnoString(errno));
  }
  return Status::Ok();
}

}  // namespace

Result<SafetensorsLayout> LayOutSafetensors(const std::string& what, const std::vector<TensorDecl>& tensors,
                                            const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const TensorDecl& t : tensors) {
    if (t.name == "__metadata__") return Status::InvalidArgument(what + ": '__metadata__' cannot name a tensor");
    if (!names.insert(t.name).second) return Status::InvalidArgument(what + ": tensor '" + t.name + "' given twice");
    if (DtypeByType(t.dtype) == nullptr) {
      return Status::InvalidArgument(what + ": tensor '" + t.name + "' has dtype " + std::string(c10::toString(t.dtype)) +
                                     ", which safetensors cannot hold");
    }
    for (int64_t d : t.shape) {
      if (d < 0) return Status::InvalidArgument(what + ": tensor '" + t.name + "' has a negative dimension");
    }
  }
  // Header keys in data order with __metadata__ first, as Hugging Face writes them.
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  SafetensorsLayout layout;
  uint64_t offset = 0;
  for (const TensorDecl& t : tensors) {
    const uint64_t n = Bytes(t);
    h[t.name] = {{"dtype", DtypeByType(t.dtype)->name}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    layout.offsets.push_back(offset);
    layout.bytes.push_back(n);
    offset += n;
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const json::exception& e) {  // names or metadata that are not valid UTF-8
    return Status::InvalidArgument(what + ": header cannot be encoded: " + e.what());
  }
  // Pad so the data section starts 8-byte aligned: View() then hands out aligned tensors.
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();
  layout.header.assign(reinterpret_cast<const char*>(&header_len), 8);  // little-endian, as the format says
  layout.header += text;
  for (uint64_t& o : layout.offsets) o += layout.header.size();
  layout.file_bytes = layout.header.size() + offset;
  return layout;
}

Result<std::vector<ModelShard>> PlanModelShards(const std::string& dir, std::vector<TensorDecl> tensors,
                                                uint64_t max_shard_bytes) {
  // Greedy in the caller's order (layers stay together); an oversized tensor gets a shard of its own.
  std::set<std::string> names;
  std::vector<ModelShard> shards(1);
  uint64_t shard_bytes = 0;
  for (TensorDecl& t : tensors) {
    if (!names.insert(t.name).second) return Status::InvalidArgument(dir + ": tensor '" + t.name + "' given twice");
    if (DtypeByType(t.dtype) == nullptr) {
      return Status::InvalidArgument(dir + ": tensor '" + t.name + "' has dtype " + std::string(c10::toString(t.dtype)) +
                                     ", which safetensors cannot hold");
    }
    const uint64_t n = Bytes(t);
    if (!shards.back().tensors.empty() && shard_bytes + n > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().tensors.push_back(std::move(t));
    shard_bytes += n;
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    char file[64];
    std::snprintf(file, sizeof(file), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    shards[i].name = shards.size() == 1 ? kModelSingleName : file;
  }
  return shards;
}

std::string ModelIndexJson(const std::vector<ModelShard>& shards) {
  json weight_map = json::object();
  uint64_t total_bytes = 0;
  for (const ModelShard& s : shards) {
    for (const TensorDecl& t : s.tensors) {
      weight_map[t.name] = s.name;
      total_bytes += Bytes(t);
    }
  }
  json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  return index.dump(2) + "\n";
}

Status RemoveStaleModelFiles(const std::string& dir, const std::vector<ModelShard>& shards) {
  const fs::path root(dir);
  // A leftover index would win over a single new file in our reader; transformers looks for
  // model.safetensors before the index, so a leftover one would shadow new shards.
  EFT_RETURN_IF_ERROR(RemoveIfExists((root / (shards.size() == 1 ? kModelIndexName : kModelSingleName)).string()));
  // Shards of an earlier, differently-split write are dead weight (and confusing); Hugging Face's
  // save_pretrained removes them too.
  std::error_code ec;
  for (const auto& ent : fs::directory_iterator(root, ec)) {
    const std::string n = ent.path().filename().string();
    if (n.rfind("model-", 0) == 0 && n.find("-of-") != std::string::npos && n.size() > 12 &&
        n.compare(n.size() - 12, 12, ".safetensors") == 0 &&
        std::none_of(shards.begin(), shards.end(), [&](const ModelShard& s) { return s.name == n; })) {
      EFT_RETURN_IF_ERROR(RemoveIfExists(ent.path().string()));
    }
  }
  return Status::Ok();
}

}  // namespace eft::trainer
