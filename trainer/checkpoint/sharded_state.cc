#include "trainer/checkpoint/sharded_state.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "common/memory_snapshot.h"
#include "trainer/io/safetensors.h"

namespace eft::trainer {
namespace {

using nlohmann::json;

// Names and shapes of a unit's parameters: a checkpoint of another architecture must not load.
std::string Layout(const FlatParamUnit& u) {
  std::string out;
  for (const auto& s : u.specs()) {
    out += s.name + "[";
    for (size_t i = 0; i < s.shape.size(); ++i) out += (i ? "," : "") + std::to_string(s.shape[i]);
    out += "];";
  }
  return out;
}

}  // namespace

std::string ShardFileName(int rank, int world) { return snapshot::ShardFileName(rank, world); }

std::vector<UnitState> TrainableUnitStates(ShardedLlama& model, AdamW& optimizer) {
  std::vector<UnitState> out;
  auto& params = optimizer.params();
  std::vector<FlatParamUnit*> units = model.trainable_units();
  for (size_t i = 0; i < units.size(); ++i) out.push_back(UnitState{units[i], params[i].exp_avg, params[i].exp_avg_sq});
  return out;
}

int64_t StagedShard::bytes() const {
  int64_t n = 0;
  for (const auto& [name, t] : tensors) n += t.numel() * static_cast<int64_t>(t.element_size());
  return n;
}

StagedShard StageShard(const std::vector<UnitState>& units, bool copy) {
  StagedShard staged;
  for (const UnitState& s : units) {
    const auto [begin, end] = s.unit->OwnedRange();
    const int64_t length = end - begin;  // padding is never saved
    const std::string& name = s.unit->name();
    // A copy in host memory (on a GPU it must not cost device memory), or a view of the original.
    auto saved = [&](const at::Tensor& t) {
      at::Tensor owned = t.slice(0, 0, length);
      return copy ? owned.to(at::kCPU, t.scalar_type(), false, true) : owned;
    };
    staged.tensors.emplace_back(name + ".param", saved(s.unit->shard()));
    staged.tensors.emplace_back(name + ".exp_avg", saved(s.exp_avg));
    staged.tensors.emplace_back(name + ".exp_avg_sq", saved(s.exp_avg_sq));
    staged.metadata[name] =
        json{{"offset", begin}, {"length", length}, {"numel", s.unit->numel()}, {"layout", Layout(*s.unit)}}.dump();
  }
  return staged;
}

Status LoadShards(const std::vector<std::string>& files, const std::vector<UnitState>& units) {
  std::vector<std::unique_ptr<SafetensorsFile>> opened;
  for (const auto& f : files) {
    EFT_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(f));
    opened.push_back(std::move(file));
  }
  for (const UnitState& s : units) {
    const std::string& name = s.unit->name();
    const auto [want_begin, want_end] = s.unit->OwnedRange();
    const int64_t base = s.unit->shard_offset();
    std::vector<std::pair<int64_t, int64_t>> covered;
    s.unit->shard().zero_();
    s.exp_avg.zero_();
    s.exp_avg_sq.zero_();
    for (const auto& file : opened) {
      auto meta_it = file->metadata().find(name);
      if (meta_it == file->metadata().end()) continue;
      json meta = json::parse(meta_it->second, nullptr, false);
      if (!meta.is_object() || !meta.contains("offset") || !meta.contains("length") || !meta.contains("numel")) {
        return Status::DataLoss(file->path() + ": bad metadata for unit " + name);
      }
      if (meta["numel"].get<int64_t>() != s.unit->numel() || meta.value("layout", "") != Layout(*s.unit)) {
        return Status::FailedPrecondition(file->path() + ": unit " + name +
                                          " has a different parameter layout than this model (another architecture?)");
      }
      const int64_t offset = meta["offset"].get<int64_t>(), length = meta["length"].get<int64_t>();
      const int64_t a = std::max(want_begin, offset), b = std::min(want_end, offset + length);
      if (a >= b) continue;
      for (const char* part : {".param", ".exp_avg", ".exp_avg_sq"}) {
        const SafetensorsEntry* e = file->Find(name + part);
        if (e == nullptr || e->scalar_type != at::kFloat || e->shape != std::vector<int64_t>{length}) {
          return Status::DataLoss(file->path() + ": " + name + part + " is missing or malformed");
        }
        at::Tensor dst = std::string(part) == ".param" ? s.unit->shard() : std::string(part) == ".exp_avg" ? s.exp_avg : s.exp_avg_sq;
        dst.slice(0, a - base, b - base).copy_(file->View(*e).slice(0, a - offset, b - offset));
      }
      covered.emplace_back(a, b);
    }
    std::sort(covered.begin(), covered.end());
    int64_t reached = want_begin;
    for (const auto& [a, b] : covered) {
      if (a > reached) break;
      reached = std::max(reached, b);
    }
    if (reached < want_end) {
      return Status::DataLoss("the checkpoint's shard files do not hold elements [" + std::to_string(reached) + ", " +
                              std::to_string(want_end) + ") of unit " + name);
    }
  }
  return Status::Ok();
}

}  // namespace eft::trainer
