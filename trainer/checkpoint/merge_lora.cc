#include "trainer/checkpoint/merge_lora.h"

#include <filesystem>
#include <set>

#include "trainer/checkpoint/full_state.h"
#include "trainer/checkpoint/peft_adapter.h"
#include "trainer/io/safetensors.h"
#include "trainer/io/safetensors_writer.h"
#include "trainer/model/model_config.h"

namespace eft::trainer {

namespace fs = std::filesystem;

Status MergeLoraAdapter(const std::string& base_dir, const std::string& adapter_dir, const std::string& out_dir) {
  EFT_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromHfDir(base_dir));
  EFT_ASSIGN_OR_RETURN(auto base, SafetensorsDir::Open(base_dir));
  EFT_ASSIGN_OR_RETURN(AdapterConfig adapter_config, ReadAdapterConfig(adapter_dir));
  const std::string adapter_path = adapter_dir + "/" + kAdapterWeightsFile;
  EFT_ASSIGN_OR_RETURN(auto adapter, SafetensorsFile::Open(adapter_path));
  const double scale = adapter_config.alpha / static_cast<double>(adapter_config.r);
  const at::ScalarType dtype = HfDtype(config);

  // Every adapter pair must land on a base weight: an adapter for another model must not be half applied.
  const std::string prefix = "base_model.model.";
  std::set<std::string> applied;
  for (const SafetensorsEntry& e : adapter->entries()) {
    const std::string& n = e.name;
    const size_t at = n.find(".lora_A.weight");
    const bool is_a = at != std::string::npos && at + 14 == n.size();
    const bool is_b = n.size() > 14 && n.compare(n.size() - 14, 14, ".lora_B.weight") == 0;
    if (n.rfind(prefix, 0) != 0 || (!is_a && !is_b)) {
      return Status::InvalidArgument(adapter_path + ": tensor '" + n + "' is not a PEFT LoRA weight (" + prefix +
                                     "<module>.lora_A.weight / lora_B.weight)");
    }
    applied.insert(n.substr(prefix.size(), n.size() - prefix.size() - 14) + ".weight");
  }
  for (const std::string& w : applied) {
    const SafetensorsEntry* weight = base->Find(w);
    if (weight == nullptr) {
      return Status::InvalidArgument(adapter_path + ": adapts '" + w + "', which " + base_dir + " does not have");
    }
    const std::string stem = prefix + w.substr(0, w.size() - 7);  // without ".weight"
    const SafetensorsEntry* a = adapter->Find(stem + ".lora_A.weight");
    const SafetensorsEntry* b = adapter->Find(stem + ".lora_B.weight");
    const int64_t r = adapter_config.r;
    if (a == nullptr || b == nullptr || weight->shape.size() != 2 ||
        a->shape != std::vector<int64_t>{r, weight->shape[1]} || b->shape != std::vector<int64_t>{weight->shape[0], r}) {
      auto shape = [](const SafetensorsEntry* e) { return e ? c10::str(at::IntArrayRef(e->shape)) : std::string("missing"); };
      return Status::InvalidArgument(adapter_path + ": " + stem + ": A " + shape(a) + " and B " + shape(b) +
                                     " do not fit r " + std::to_string(r) + " and the base weight " + shape(weight));
    }
  }
  // Checked: from here on only I/O can fail.
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::IoError("creating " + out_dir + ": " + ec.message());
  std::vector<TensorDecl> decls;
  for (const std::string& name : base->names()) decls.push_back({name, dtype, base->Find(name)->shape});
  EFT_ASSIGN_OR_RETURN(auto writer, SafetensorsDirWriter::Create(out_dir, decls, 5ull << 30));
  for (const std::string& name : base->names()) {
    EFT_ASSIGN_OR_RETURN(at::Tensor w, base->Load(name, at::kFloat));
    if (applied.count(name)) {
      const std::string stem = prefix + name.substr(0, name.size() - 7);  // without ".weight"
      EFT_ASSIGN_OR_RETURN(at::Tensor a, adapter->Load(stem + ".lora_A.weight", at::kFloat));
      EFT_ASSIGN_OR_RETURN(at::Tensor b, adapter->Load(stem + ".lora_B.weight", at::kFloat));
      w.add_(at::mm(b, a), scale);
    }
    EFT_RETURN_IF_ERROR(writer->Append(w));
  }
  EFT_RETURN_IF_ERROR(writer->Finish().status());
  // The adapter's own tokenizer and template files (eft writes them beside every adapter) win over
  // the base's: they are what training rendered its data with.
  return WriteHfSidecarFiles(out_dir, config, {{base_dir, adapter_dir}, ""}).status();
}

}  // namespace eft::trainer
