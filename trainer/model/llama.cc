// Parameter layout, the decoder layer, the head and initialisation. Attention and RoPE live in
// attention.cc, the chunked loss in loss.cc.
#include "trainer/model/llama.h"
#include "trainer/kernels/kernels.h"
#include "trainer/model/llama_internal.h"

#include <cmath>
#include <functional>
#include <map>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

namespace eft::trainer {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ParamSpec> LayerParamSpecs(const ModelConfig& c, int layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  std::vector<ParamSpec> specs;
  specs.push_back({p + "input_layernorm.weight", {h}, false});
  specs.push_back({p + "self_attn.q_proj.weight", {q, h}, true});
  if (c.attention_bias) specs.push_back({p + "self_attn.q_proj.bias", {q}, false});
  specs.push_back({p + "self_attn.k_proj.weight", {kv, h}, true});
  if (c.attention_bias) specs.push_back({p + "self_attn.k_proj.bias", {kv}, false});
  specs.push_back({p + "self_attn.v_proj.weight", {kv, h}, true});
  if (c.attention_bias) specs.push_back({p + "self_attn.v_proj.bias", {kv}, false});
  if (c.qk_norm) {
    specs.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, false});
    specs.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, false});
  }
  specs.push_back({p + "self_attn.o_proj.weight", {h, q}, true});
  specs.push_back({p + "post_attention_layernorm.weight", {h}, false});
  specs.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, h}, true});
  specs.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, h}, true});
  specs.push_back({p + "mlp.down_proj.weight", {h, c.intermediate_size}, true});
  return specs;
}

std::vector<ParamSpec> RootParamSpecs(const ModelConfig& c) {
  std::vector<ParamSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, true});
  specs.push_back({"model.norm.weight", {c.hidden_size}, false});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}, true});
  return specs;
}

namespace {

void CheckShapes(const std::vector<ParamSpec>& specs, const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == specs.size(), what, ": expected ", specs.size(), " tensors, got ", tensors.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    TORCH_CHECK(tensors[i].defined() && tensors[i].sizes() == at::IntArrayRef(specs[i].shape), what, ": ",
                specs[i].name, " must have shape ", at::IntArrayRef(specs[i].shape), ", got ",
                tensors[i].defined() ? tensors[i].sizes() : at::IntArrayRef{});
  }
}

// The part of a layer parameter's name after "model.layers.<i>.".
std::string LayerSuffix(const std::string& name) {
  size_t dot = name.find('.', std::string("model.layers.").size());
  return name.substr(dot + 1);
}

}  // namespace

namespace {

// Where each LoRA target sits in a layer and its [out, in] shape.
struct LoraTarget {
  const char* block;  // "self_attn" or "mlp"
  LoraAdapter LayerLora::*slot;
};
const std::map<std::string, LoraTarget>& LoraTargets() {
  static const auto* kTargets = new std::map<std::string, LoraTarget>{
      {"q_proj", {"self_attn", &LayerLora::q}},  {"k_proj", {"self_attn", &LayerLora::k}},
      {"v_proj", {"self_attn", &LayerLora::v}},  {"o_proj", {"self_attn", &LayerLora::o}},
      {"gate_proj", {"mlp", &LayerLora::gate}}, {"up_proj", {"mlp", &LayerLora::up}},
      {"down_proj", {"mlp", &LayerLora::down}},
  };
  return *kTargets;
}

}  // namespace

std::vector<ParamSpec> LoraParamSpecs(const ModelConfig& c, int layer, const std::vector<std::string>& modules,
                                      int64_t r) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const std::map<std::string, std::pair<int64_t, int64_t>> shape = {
      {"q_proj", {q, h}},  {"k_proj", {kv, h}}, {"v_proj", {kv, h}},
      {"o_proj", {h, q}},  {"gate_proj", {c.intermediate_size, h}},
      {"up_proj", {c.intermediate_size, h}}, {"down_proj", {h, c.intermediate_size}},
  };
  std::vector<ParamSpec> specs;
  for (const std::string& m : modules) {
    TORCH_CHECK(LoraTargets().count(m), "LoRA: unknown target module ", m);
    const std::string p = "base_model.model.model.layers." + std::to_string(layer) + "." +
                          LoraTargets().at(m).block + "." + m + ".";
    const auto [out, in] = shape.at(m);
    specs.push_back({p + "lora_A.weight", {r, in}, true});
    specs.push_back({p + "lora_B.weight", {out, r}, true});
  }
  return specs;
}

LayerLora BindLora(const std::vector<std::string>& modules, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 2 * modules.size(), "BindLora: expected ", 2 * modules.size(), " tensors, got ",
              tensors.size());
  LayerLora l;
  for (size_t i = 0; i < modules.size(); ++i) l.*(LoraTargets().at(modules[i]).slot) = {tensors[2 * i], tensors[2 * i + 1]};
  return l;
}

LayerWeights BindLayer(const ModelConfig& c, const std::vector<at::Tensor>& tensors) {
  const std::vector<ParamSpec> specs = LayerParamSpecs(c, 0);
  CheckShapes(specs, tensors, "BindLayer");
  LayerWeights w;
  const std::map<std::string, at::Tensor LayerWeights::*> slot = {
      {"input_layernorm.weight", &LayerWeights::input_norm},
      {"self_attn.q_proj.weight", &LayerWeights::q_proj},
      {"self_attn.q_proj.bias", &LayerWeights::q_bias},
      {"self_attn.k_proj.weight", &LayerWeights::k_proj},
      {"self_attn.k_proj.bias", &LayerWeights::k_bias},
      {"self_attn.v_proj.weight", &LayerWeights::v_proj},
      {"self_attn.v_proj.bias", &LayerWeights::v_bias},
      {"self_attn.q_norm.weight", &LayerWeights::q_norm},
      {"self_attn.k_norm.weight", &LayerWeights::k_norm},
      {"self_attn.o_proj.weight", &LayerWeights::o_proj},
      {"post_attention_layernorm.weight", &LayerWeights::post_norm},
      {"mlp.gate_proj.weight", &LayerWeights::gate_proj},
      {"mlp.up_proj.weight", &LayerWeights::up_proj},
      {"mlp.down_proj.weight", &LayerWeights::down_proj},
  };
  for (size_t i = 0; i < specs.size(); ++i) w.*(slot.at(LayerSuffix(specs[i].name))) = tensors[i];
  return w;
}

RootWeights BindRoot(const ModelConfig& c, const std::vector<at::Tensor>& tensors) {
  CheckShapes(RootParamSpecs(c), tensors, "BindRoot");
  RootWeights r;
  r.embed = tensors[0];
  r.final_norm = tensors[1];
  r.lm_head = c.tie_word_embeddings ? tensors[0] : tensors[2];
  r.padding_idx = (c.pad_token_id >= 0 && c.pad_token_id < c.vocab_size) ? c.pad_token_id : -1;
  return r;
}

namespace internal {

std::array<at::Tensor, 3> QkvProjections(const LayerWeights& w, const at::Tensor& x, bool merged) {
  auto linear = [](const at::Tensor& in, const at::Tensor& weight, const at::Tensor& bias) {
    return bias.defined() ? at::linear(in, weight, bias) : at::linear(in, weight);
  };
  if (!merged) return {linear(x, w.q_proj, w.q_bias), linear(x, w.k_proj, w.k_bias), linear(x, w.v_proj, w.v_bias)};
  // The weights (and biases) concatenated: a copy the size of the weights, small beside the
  // activations; each output is a view of the one product.
  const int64_t q_width = w.q_proj.size(0), kv_width = w.k_proj.size(0);
  std::vector<at::Tensor> parts =
      linear(x, at::cat({w.q_proj, w.k_proj, w.v_proj}),
             w.q_bias.defined() ? at::cat({w.q_bias, w.k_bias, w.v_bias}) : at::Tensor())
          .split_with_sizes({q_width, kv_width, kv_width}, -1);
  return {parts[0], parts[1], parts[2]};
}

at::Tensor MergedGateUpProjection(const LayerWeights& w, const at::Tensor& x) {
  return at::linear(x, at::cat({w.gate_proj, w.up_proj}));
}

std::array<at::Tensor, 2> GateUpProjections(const LayerWeights& w, const at::Tensor& x, bool merged) {
  if (!merged) return {at::linear(x, w.gate_proj), at::linear(x, w.up_proj)};
  std::vector<at::Tensor> parts = MergedGateUpProjection(w, x).chunk(2, -1);
  return {parts[0], parts[1]};
}

at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return std::get<0>(at::_fused_rms_norm(x, {x.size(-1)}, weight, eps));
}

}  // namespace internal

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  // On a GPU, ATen's fused kernel: one pass where the composite below launches six. On the CPU the
  // composite was as fast (docs/benchmarks.md), and it is HF's arithmetic exactly.
  if (x.is_cuda() && weight.scalar_type() == x.scalar_type()) return internal::FusedRmsNorm(x, weight, eps);
  // Statistics in fp32 whatever the compute dtype; the weight multiplies the value cast back, as HF does.
  // (fp64 stays fp64, so gradient checks in double are not limited by float rounding.)
  at::Tensor x32 = x.to(at::promote_types(x.scalar_type(), at::kFloat));
  at::Tensor y = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * y.to(x.scalar_type());
}

at::Tensor Embed(const RootWeights& root, const at::Tensor& input_ids) {
  return at::embedding(root.embed, input_ids, root.padding_idx);
}

namespace {

uint64_t Mix(uint64_t h, uint64_t v) {  // splitmix64 step: distinct (seed, module) pairs, distinct streams
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

}  // namespace

at::Tensor LoraDropoutMask(const at::Tensor& row_seeds, uint64_t module, int64_t T, int64_t features, double p) {
  TORCH_CHECK(row_seeds.defined() && row_seeds.dim() == 1 && row_seeds.scalar_type() == at::kLong,
              "LoRA dropout needs one int64 seed per row (LayerLora::dropout_row_seeds)");
  const int64_t B = row_seeds.size(0);
  const at::Tensor seeds = row_seeds.cpu().contiguous();
  const int64_t* seed = seeds.data_ptr<int64_t>();
  at::Tensor keep = at::empty({B, T, features}, at::TensorOptions().dtype(at::kFloat));
  float* out = keep.data_ptr<float>();
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // SplitMix64's increment
  at::parallel_for(0, B * T, 64, [&](int64_t begin, int64_t end) {
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / T, t = bt % T;
      // One SplitMix64 stream per (row, module, position); its j-th output decides feature j.
      const uint64_t state = Mix(Mix(static_cast<uint64_t>(seed[b]), module), static_cast<uint64_t>(t));
      float* row = out + bt * features;
      for (int64_t j = 0; j < features; ++j) {
        uint64_t z = state + static_cast<uint64_t>(j + 1) * kGolden;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        const double u = static_cast<double>(z >> 11) * 0x1.0p-53;  // uniform in [0, 1)
        row[j] = u >= p ? 1.0f : 0.0f;
      }
    }
  });
  return keep;
}

// The fp32 adapters are cast to the compute dtype as the base weights are (mixed precision, as PEFT
// under autocast): in bf16 the adapter matmuls then run in oneDNN like the base's, where fp32 ones
// would go to the single-threaded BLAS, which made a LoRA layer slower than a fully fine-tuned one
// (docs/benchmarks.md, "LoRA against full fine-tuning"). Dropout's 1 / (1 - p) goes into the scale,
// so the mask stays exact (0 or 1) in bf16.
at::Tensor LoraUpdate(const at::Tensor& x, const LoraAdapter& adapter, const LayerLora& lora, uint64_t module,
                      at::ScalarType dtype) {
  at::Tensor in = x.to(dtype);
  double scale = lora.scale;
  if (lora.dropout > 0) {
    // Computed on the CPU: the same mask on every device and in the activation-checkpointing recompute.
    at::Tensor keep = LoraDropoutMask(lora.dropout_row_seeds, module, in.size(1), in.size(2), lora.dropout);
    in = in * keep.to(in.device(), dtype);
    scale /= 1.0 - lora.dropout;
  }
  return at::linear(at::linear(in, adapter.a.to(dtype)), (adapter.b * scale).to(dtype));
}

namespace {

// y plus module `module`'s adapter applied to x (LoraUpdate), or y when it has none.
at::Tensor WithLora(const at::Tensor& y, const at::Tensor& x, const LayerLora* lora, LoraAdapter LayerLora::*slot,
                    uint64_t module) {
  if (lora == nullptr || !(lora->*slot).a.defined()) return y;
  return y + LoraUpdate(x, lora->*slot, *lora, module, y.scalar_type());
}

}  // namespace

at::Tensor DecoderLayer(const ModelConfig& c, const LayerWeights& w, const at::Tensor& hidden,
                        const AttentionContext& ctx, const LayerLora* lora) {
  const int64_t B = hidden.size(0), T = hidden.size(1), D = c.head_dim;
  // GPUs get fewer, larger matrix products; on the CPU separate ones were as fast (docs/benchmarks.md).
  // eft's fused kernels for RoPE and SwiGLU on a GPU (kernels.h); the composites elsewhere.
  const bool fused = UseFusedKernels(hidden);
  const bool merged = hidden.is_cuda() || fused;
  at::Tensor x = RmsNorm(hidden, w.input_norm, c.rms_norm_eps);
  const std::array<at::Tensor, 3> qkv = internal::QkvProjections(w, x, merged);
  at::Tensor q = WithLora(qkv[0], x, lora, &LayerLora::q, 0).view({B, T, c.num_attention_heads, D});
  at::Tensor k = WithLora(qkv[1], x, lora, &LayerLora::k, 1).view({B, T, c.num_key_value_heads, D});
  at::Tensor v = WithLora(qkv[2], x, lora, &LayerLora::v, 2).view({B, T, c.num_key_value_heads, D});
  if (c.qk_norm) {  // Qwen3 normalises each head before RoPE
    q = RmsNorm(q, w.q_norm, c.rms_norm_eps);
    k = RmsNorm(k, w.k_norm, c.rms_norm_eps);
  }
  if (fused) {
    q = FusedRope(q, ctx.cos, ctx.sin).transpose(1, 2);
    k = FusedRope(k, ctx.cos, ctx.sin).transpose(1, 2);
  } else {
    q = internal::ApplyRope(q.transpose(1, 2), ctx);
    k = internal::ApplyRope(k.transpose(1, 2), ctx);
  }
  v = v.transpose(1, 2);
  at::Tensor attn = Attention(q, k, v, ctx);
  at::Tensor h = hidden + WithLora(at::linear(attn, w.o_proj), attn, lora, &LayerLora::o, 3);
  x = RmsNorm(h, w.post_norm, c.rms_norm_eps);
  at::Tensor act;
  const bool gate_up_lora = lora != nullptr && (lora->gate.a.defined() || lora->up.a.defined());
  if (fused && !gate_up_lora) {
    // One product, one kernel, and in backward one [.., 2I] gradient with no concatenation.
    act = FusedSwiGlu(internal::MergedGateUpProjection(w, x));
  } else {
    const std::array<at::Tensor, 2> gate_up = internal::GateUpProjections(w, x, merged);
    at::Tensor gate = WithLora(gate_up[0], x, lora, &LayerLora::gate, 4);
    at::Tensor up = WithLora(gate_up[1], x, lora, &LayerLora::up, 5);
    act = fused ? FusedSwiGlu(gate, up) : at::silu(gate) * up;
  }
  return h + WithLora(at::linear(act, w.down_proj), act, lora, &LayerLora::down, 6);
}

at::Tensor Logits(const ModelConfig& c, const RootWeights& root, const at::Tensor& hidden) {
  return at::linear(RmsNorm(hidden, root.final_norm, c.rms_norm_eps), root.lm_head);
}

namespace {

// FNV-1a, 64 bit: tiny, stable across platforms and library versions (std::hash is neither).
uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

at::Tensor InitParameter(const ModelConfig& c, const ParamSpec& spec, uint64_t seed) {
  const auto options = at::TensorOptions().dtype(at::kFloat);
  if (EndsWith(spec.name, "norm.weight")) return at::ones(spec.shape, options);
  if (EndsWith(spec.name, ".bias") || EndsWith(spec.name, ".lora_B.weight")) return at::zeros(spec.shape, options);
  unsigned char seed_bytes[8];
  for (int i = 0; i < 8; ++i) seed_bytes[i] = static_cast<unsigned char>(seed >> (8 * i));  // little-endian
  uint64_t h = Fnv1a(0xcbf29ce484222325ULL, seed_bytes, sizeof(seed_bytes));
  h = Fnv1a(h, spec.name.data(), spec.name.size());
  // A private generator per parameter: the values depend on nothing but (seed, name), so every
  // rank, world size and initialisation order produces the same bits.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(h);
  at::Tensor t = at::empty(spec.shape, options);
  if (EndsWith(spec.name, ".lora_A.weight")) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(spec.shape[1]));
    return t.uniform_(-bound, bound, gen);
  }
  t.normal_(0.0, c.initializer_range, gen);
  // HF's embedding has padding_idx = pad_token_id, and its _init_weights zeroes that row.
  if (spec.name == "model.embed_tokens.weight" && c.pad_token_id >= 0 && c.pad_token_id < c.vocab_size)
    t[c.pad_token_id].zero_();
  return t;
}

}  // namespace eft::trainer
