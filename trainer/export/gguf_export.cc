#include "trainer/export/gguf_export.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "trainer/export/gguf_tokenizer.h"
#include "trainer/io/safetensors.h"
#include "trainer/model/llama.h"
#include "trainer/model/model_config.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

constexpr double kHalfMax = 65504.0;

// HF's names (after "model.layers.N.") and llama.cpp's (after "blk.N.").
const std::map<std::string, std::string> kLayerNames = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};
const std::map<std::string, std::string> kRootNames = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

Result<std::string> GgufName(const std::string& hf) {
  if (auto it = kRootNames.find(hf); it != kRootNames.end()) return it->second;
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) == 0) {
    const size_t dot = hf.find('.', prefix.size());
    if (dot != std::string::npos) {
      if (auto it = kLayerNames.find(hf.substr(dot + 1)); it != kLayerNames.end()) {
        return "blk." + hf.substr(prefix.size(), dot - prefix.size()) + "." + it->second;
      }
    }
  }
  return Status::InvalidArgument("no GGUF name for tensor " + hf);
}

struct PlannedTensor {
  std::string hf_name;  // "" for rope_freqs
  std::string gguf_name;
  GgmlType type;
  std::vector<int64_t> shape;
  int64_t permute_heads = 0;  // > 0: PermuteForGgmlRope with this many heads
};

GgmlType MatrixType(GgufFileType t) {
  switch (t) {
    case GgufFileType::kF32: return GgmlType::kF32;
    case GgufFileType::kF16: return GgmlType::kF16;
    case GgufFileType::kBF16: return GgmlType::kBF16;
    case GgufFileType::kQ8_0: return GgmlType::kQ8_0;
  }
  return GgmlType::kF32;
}

// llama.cpp's general.file_type (llama.h: enum llama_ftype).
uint32_t LlamaFileType(GgufFileType t) {
  switch (t) {
    case GgufFileType::kF32: return 0;   // ALL_F32
    case GgufFileType::kF16: return 1;   // MOSTLY_F16
    case GgufFileType::kQ8_0: return 7;  // MOSTLY_Q8_0
    case GgufFileType::kBF16: return 32; // MOSTLY_BF16
  }
  return 0;
}

// Per-frequency factors of Llama 3's RoPE scaling, as transformers' _compute_llama3_parameters
// divides the inverse frequencies (llama.cpp multiplies the wavelengths by them).
at::Tensor Llama3RopeFactors(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  const int64_t n = c.head_dim / 2;
  std::vector<float> factors(n);
  const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (int64_t i = 0; i < n; ++i) {
    const double freq = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim));
    const double wavelen = 2 * M_PI / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1;
    } else if (wavelen > low_wavelen) {
      f = s.factor;
    } else {
      const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      f = 1 / ((1 - smooth) / s.factor + smooth);
    }
    factors[i] = static_cast<float>(f);
  }
  return at::tensor(factors, at::kFloat);
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

Result<std::string> Encode(const at::Tensor& x, GgmlType type, const std::string& name) {
  switch (type) {
    case GgmlType::kF32: return Bytes(x.to(at::kFloat));
    case GgmlType::kBF16: return Bytes(x.to(at::kBFloat16));
    case GgmlType::kF16: {
      const double amax = x.numel() ? x.abs().max().item<double>() : 0;
      if (amax > kHalfMax) {
        return Status::InvalidArgument(name + " has values up to " + std::to_string(amax) +
                                       ", beyond fp16's range: export with --type bf16 or f32");
      }
      return Bytes(x.to(at::kHalf));
    }
    case GgmlType::kQ8_0: return QuantizeQ8_0(x, name);
  }
  return Status::Internal("unknown GGML type");
}

// The directory's name: a fine-tuned model's output directory names it better than config.json's
// _name_or_path, which is usually the base model's.
std::string ModelName(const std::string& model_dir) {
  fs::path p = fs::path(model_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

void AddHyperParameters(GgufWriter& w, const std::string& arch, const ModelConfig& c) {
  const std::string a = arch + ".";
  w.AddUint32(a + "vocab_size", static_cast<uint32_t>(c.vocab_size));
  w.AddUint32(a + "context_length", static_cast<uint32_t>(c.max_position_embeddings));
  w.AddUint32(a + "embedding_length", static_cast<uint32_t>(c.hidden_size));
  w.AddUint32(a + "block_count", static_cast<uint32_t>(c.num_hidden_layers));
  w.AddUint32(a + "feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  w.AddUint32(a + "attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  w.AddUint32(a + "attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads));
  w.AddFloat32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w.AddFloat32(a + "rope.freq_base", static_cast<float>(c.rope_theta));
  w.AddUint32(a + "rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  // llama.cpp takes n_embd / n_head as the head size unless told (Qwen3's head_dim differs).
  if (c.head_dim * c.num_attention_heads != c.hidden_size) {
    w.AddUint32(a + "attention.key_length", static_cast<uint32_t>(c.head_dim));
    w.AddUint32(a + "attention.value_length", static_cast<uint32_t>(c.head_dim));
  }
  // "llama3" scaling travels as rope_freqs.weight (the converter writes no scaling keys for it); the
  // original context length is carried for tools that show it.
  if (c.rope_scaling.type == "llama3") {
    w.AddUint32(a + "rope.scaling.original_context_length",
                static_cast<uint32_t>(c.rope_scaling.original_max_position_embeddings));
  }
}

}  // namespace

Result<GgufFileType> ParseGgufFileType(const std::string& name) {
  if (name == "f32") return GgufFileType::kF32;
  if (name == "f16") return GgufFileType::kF16;
  if (name == "bf16") return GgufFileType::kBF16;
  if (name == "q8_0") return GgufFileType::kQ8_0;
  return Status::InvalidArgument("--type: expected f32, f16, bf16 or q8_0, got '" + name + "'");
}

const char* GgufFileTypeName(GgufFileType type) { return GgmlTypeName(MatrixType(type)); }

at::Tensor PermuteForGgmlRope(const at::Tensor& w, int64_t n_head) {
  std::vector<int64_t> shape{n_head, 2, w.size(0) / n_head / 2};
  for (int64_t d = 1; d < w.dim(); ++d) shape.push_back(w.size(d));
  return w.reshape(shape).transpose(1, 2).reshape(w.sizes()).contiguous();
}

Result<std::string> QuantizeQ8_0(const at::Tensor& x, const std::string& name) {
  const at::Tensor blocks = x.to(at::kFloat).contiguous().view({-1, 32});
  const at::Tensor amax = std::get<0>(blocks.abs().max(1));
  if (amax.numel() > 0 && amax.max().item<double>() / 127 > kHalfMax) {
    return Status::InvalidArgument(name + " has values beyond what q8_0's fp16 scales can hold: export with "
                                   "--type bf16 or f32");
  }
  at::Tensor d = (amax / 127).to(at::kHalf);
  // A block of tiny values whose scale rounds to 0: the smallest fp16 instead, so q * d still bounds x.
  const at::Tensor smallest = at::full({}, 5.9604644775390625e-08, d.options());
  d = at::where(d.eq(0).logical_and(amax.gt(0)), smallest, d);
  const at::Tensor df = d.to(at::kFloat).unsqueeze(1);
  const at::Tensor safe = at::where(df.gt(0), df, at::ones_like(df));
  const at::Tensor q = at::round(blocks / safe).clamp(-127, 127).to(at::kChar);
  const at::Tensor packed = at::cat({d.view(at::kByte).view({-1, 2}), q.view(at::kByte)}, 1);
  return Bytes(packed);
}

Result<GgufExportSummary> ExportGguf(const std::string& model_dir, const std::string& out_path, GgufFileType type,
                                     const std::function<void(size_t, size_t)>& progress, const std::string& name) {
  if (!fs::is_directory(model_dir)) return Status::NotFound(model_dir + ": no such model directory");
  EFT_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromHfDir(model_dir));
  const std::string arch = config.model_type == "mistral" ? "llama" : config.model_type;
  const bool permute_qk = arch == "llama";  // ggml's normal RoPE (qwen2/qwen3 use NEOX: HF's layout)
  EFT_ASSIGN_OR_RETURN(GgufTokenizer tokenizer, ReadGgufTokenizer(model_dir, config.vocab_size));
  EFT_ASSIGN_OR_RETURN(auto weights, SafetensorsDir::Open(model_dir));

  // The tensors eft's model has, each checked against the directory; anything else there is refused
  // (except what HF leaves that a model does not use: a tied lm_head, RoPE's cached inv_freq).
  std::vector<ParamSpec> specs = RootParamSpecs(config);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    auto layer = LayerParamSpecs(config, static_cast<int>(i));
    specs.insert(specs.end(), layer.begin(), layer.end());
  }
  std::set<std::string> expected;
  std::vector<PlannedTensor> plan;
  for (const auto& spec : specs) {
    const SafetensorsEntry* e = weights->Find(spec.name);
    if (!e) return Status::DataLoss(model_dir + ": tensor " + spec.name + " is missing");
    if (e->shape != spec.shape) {
      return Status::DataLoss(model_dir + ": tensor " + spec.name + " has shape " + ShapeString(e->shape) +
                              ", config.json gives " + ShapeString(spec.shape));
    }
    expected.insert(spec.name);
    EFT_ASSIGN_OR_RETURN(std::string gguf_name, GgufName(spec.name));
    PlannedTensor p{spec.name, gguf_name, GgmlType::kF32, spec.shape, 0};
    if (spec.shape.size() >= 2) {
      p.type = MatrixType(type);
      if (p.type == GgmlType::kQ8_0 && spec.shape.back() % 32 != 0) p.type = GgmlType::kF16;
    }
    if (permute_qk && gguf_name.find(".attn_q.") != std::string::npos) p.permute_heads = config.num_attention_heads;
    if (permute_qk && gguf_name.find(".attn_k.") != std::string::npos) p.permute_heads = config.num_key_value_heads;
    plan.push_back(std::move(p));
  }
  for (const auto& name : weights->names()) {
    if (expected.count(name)) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;
    const std::string inv_freq = "rotary_emb.inv_freq";
    if (name.size() > inv_freq.size() && name.compare(name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0) {
      continue;
    }
    return Status::InvalidArgument(model_dir + ": tensor " + name + " is not part of a " + config.model_type +
                                   " model eft can export");
  }
  if (config.rope_scaling.type == "llama3") {
    plan.insert(plan.begin() + 1, PlannedTensor{"", "rope_freqs.weight", GgmlType::kF32, {config.head_dim / 2}, 0});
  }

  GgufWriter w;
  w.AddString("general.architecture", arch);
  w.AddString("general.type", "model");
  w.AddString("general.name", name.empty() ? ModelName(model_dir) : name);
  w.AddUint32("general.alignment", GgufWriter::kAlignment);
  w.AddUint32("general.file_type", LlamaFileType(type));
  w.AddUint32("general.quantization_version", 2);  // ggml's GGML_QNT_VERSION, written by every converter
  AddHyperParameters(w, arch, config);
  tokenizer.AddTo(w);
  for (const auto& p : plan) EFT_RETURN_IF_ERROR(w.DeclareTensor(p.gguf_name, p.type, p.shape));

  auto written = w.Write(out_path, [&](size_t i) -> Result<std::string> {
    const PlannedTensor& p = plan[i];
    at::Tensor x;
    if (p.hf_name.empty()) {
      x = Llama3RopeFactors(config);
    } else {
      EFT_ASSIGN_OR_RETURN(x, weights->Load(p.hf_name, at::kFloat));
    }
    if (p.permute_heads > 0) x = PermuteForGgmlRope(x, p.permute_heads);
    auto bytes = Encode(x, p.type, p.hf_name.empty() ? p.gguf_name : p.hf_name);
    if (progress) progress(i + 1, plan.size());
    return bytes;
  });
  if (!written.ok()) return written.status();
  return GgufExportSummary{arch, plan.size(), *written};
}

}  // namespace eft::trainer
