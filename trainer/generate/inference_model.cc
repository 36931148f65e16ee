#include "trainer/generate/inference_model.h"

#include <c10/core/GradMode.h>
#include <cmath>
#include <limits>

#include "trainer/io/safetensors.h"
#include "trainer/model/llama_internal.h"

namespace eft::trainer {

Result<std::unique_ptr<InferenceModel>> InferenceModel::Load(const std::string& dir, at::ScalarType dtype) {
  if (dtype != at::kFloat && dtype != at::kBFloat16)
    return Status::InvalidArgument(std::string("InferenceModel: dtype must be float32 or bfloat16, not ") +
                                   c10::toString(dtype));
  EFT_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromHfDir(dir));
  EFT_ASSIGN_OR_RETURN(auto weights, SafetensorsDir::Open(dir));
  auto load = [&](const ParamSpec& spec) -> Result<at::Tensor> {
    auto t = weights->Load(spec.name, dtype);
    if (!t.ok()) return t.status().WithContext(dir);
    if (t->sizes() != at::IntArrayRef(spec.shape))
      return Status::InvalidArgument(dir + ": " + spec.name + " has shape " + c10::str(t->sizes()) +
                                     ", config.json implies " + c10::str(at::IntArrayRef(spec.shape)));
    return t;
  };
  std::vector<std::vector<at::Tensor>> layers(static_cast<size_t>(config.num_hidden_layers));
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    for (const ParamSpec& spec : LayerParamSpecs(config, static_cast<int>(l))) {
      EFT_ASSIGN_OR_RETURN(at::Tensor t, load(spec));
      layers[static_cast<size_t>(l)].push_back(std::move(t));
    }
  }
  std::vector<at::Tensor> root;
  for (const ParamSpec& spec : RootParamSpecs(config)) {
    EFT_ASSIGN_OR_RETURN(at::Tensor t, load(spec));
    root.push_back(std::move(t));
  }
  return FromTensors(config, std::move(layers), std::move(root));
}

Result<std::unique_ptr<InferenceModel>> InferenceModel::FromTensors(const ModelConfig& config,
                                                                    std::vector<std::vector<at::Tensor>> layers,
                                                                    std::vector<at::Tensor> root) {
  if (static_cast<int64_t>(layers.size()) != config.num_hidden_layers || root.empty())
    return Status::InvalidArgument("InferenceModel: expected " + std::to_string(config.num_hidden_layers) +
                                   " layers and the root weights");
  if (config.max_position_embeddings <= 0)
    return Status::InvalidArgument("InferenceModel: config.json has no max_position_embeddings");
  std::unique_ptr<InferenceModel> m(new InferenceModel());
  m->config_ = config;
  m->dtype_ = root[0].scalar_type();
  m->layer_tensors_ = std::move(layers);
  m->root_tensors_ = std::move(root);
  try {
    for (const auto& tensors : m->layer_tensors_) m->layers_.push_back(BindLayer(config, tensors));
    m->root_ = BindRoot(config, m->root_tensors_);
  } catch (const c10::Error& e) {
    return Status::InvalidArgument(std::string("InferenceModel: ") + e.what_without_backtrace());
  }
  m->inv_freq_ = internal::RopeInverseFrequencies(config).to(m->root_.embed.device());
  return m;
}

KvCache InferenceModel::NewCache() const {
  return KvCache(config_.num_hidden_layers, config_.num_key_value_heads, config_.head_dim, max_positions(),
                 at::TensorOptions().dtype(dtype_).device(root_.embed.device()));
}

namespace {

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

// llama.h's Attention (math path) for new queries against cached keys, computed per KV head group
// instead of repeating each cached key/value for every query head that shares it: q [1, H, n, D],
// k/v [1, KV, L, D] (views into the cache), mask [1, 1, n, L]. The same products, softmax in fp32
// and cast back, as MathAttention; what is saved is copying the whole cache H/KV times per token.
at::Tensor GroupedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
  const int64_t H = q.size(1), n = q.size(2), D = q.size(3), KV = k.size(1), L = k.size(2), G = H / KV;
  // Query head h uses KV head h / G, so consecutive heads form a group.
  at::Tensor qg = q.reshape({KV, G * n, D});
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  at::Tensor scores = at::matmul(qg, k[0].transpose(-2, -1)) * scale;  // [KV, G * n, L]
  scores = (scores.view({KV, G, n, L}) + mask.view({1, 1, n, L})).view({KV, G * n, L});
  at::Tensor probs = at::softmax(scores, -1, at::promote_types(q.scalar_type(), at::kFloat)).to(q.scalar_type());
  at::Tensor out = at::matmul(probs, v[0]);  // [KV, G * n, D]
  return out.view({1, H, n, D}).transpose(1, 2).reshape({1, n, H * D});
}

}  // namespace

// DecoderLayer of llama.cc with the cache between the projections and attention: the new
// positions' keys (after RoPE) and values join the cached ones, and only the new queries attend.
at::Tensor InferenceModel::CachedLayer(int64_t layer, const at::Tensor& hidden, const AttentionContext& ctx,
                                       KvCache* cache) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_[static_cast<size_t>(layer)];
  const int64_t T = hidden.size(1), D = c.head_dim;
  at::Tensor x = RmsNorm(hidden, w.input_norm, c.rms_norm_eps);
  at::Tensor q = Linear(x, w.q_proj, w.q_bias).view({1, T, c.num_attention_heads, D});
  at::Tensor k = Linear(x, w.k_proj, w.k_bias).view({1, T, c.num_key_value_heads, D});
  at::Tensor v = Linear(x, w.v_proj, w.v_bias).view({1, T, c.num_key_value_heads, D});
  if (c.qk_norm) {
    q = RmsNorm(q, w.q_norm, c.rms_norm_eps);
    k = RmsNorm(k, w.k_norm, c.rms_norm_eps);
  }
  q = internal::ApplyRope(q.transpose(1, 2), ctx);
  k = internal::ApplyRope(k.transpose(1, 2), ctx);
  auto [keys, values] = cache->Append(layer, k, v.transpose(1, 2));
  at::Tensor h = hidden + at::linear(GroupedAttention(q, keys, values, ctx.additive_mask), w.o_proj);
  x = RmsNorm(h, w.post_norm, c.rms_norm_eps);
  return h + at::linear(at::silu(at::linear(x, w.gate_proj)) * at::linear(x, w.up_proj), w.down_proj);
}

Result<at::Tensor> InferenceModel::Forward(const std::vector<int32_t>& tokens, KvCache* cache, LogitsFor which) const {
  const int64_t n = static_cast<int64_t>(tokens.size()), past = cache->length();
  if (n == 0) return Status::InvalidArgument("Forward: no tokens");
  if (past + n > max_positions())
    return Status::InvalidArgument("the sequence would hold " + std::to_string(past + n) +
                                   " positions; the model's max_position_embeddings is " +
                                   std::to_string(max_positions()));
  for (int32_t id : tokens) {
    if (id < 0 || id >= config_.vocab_size)
      return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                     std::to_string(config_.vocab_size) + ")");
  }
  c10::NoGradGuard no_grad;
  const auto device = root_.embed.device();
  const auto long_options = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor ids = at::tensor(at::ArrayRef<int32_t>(tokens), at::kInt).to(long_options).view({1, n});

  AttentionContext ctx;
  // The same RoPE tables as MakeAttentionContext builds for these positions (fp32 angles, then the
  // compute dtype), so the cached path rotates exactly as training does.
  at::Tensor freqs = at::arange(past, past + n, long_options).to(at::kFloat).view({1, n, 1}) * inv_freq_;
  at::Tensor angles = at::cat({freqs, freqs}, -1);
  ctx.cos = angles.cos().to(dtype_);
  ctx.sin = angles.sin().to(dtype_);
  // New query i sits at position past + i and may see keys 0 .. past + i. With one new token that is
  // every key (an all-zero mask); a prompt chunk needs the causal triangle over its own part.
  ctx.causal_only = false;
  at::Tensor key_pos = at::arange(past + n, long_options).view({1, past + n});
  at::Tensor query_pos = at::arange(past, past + n, long_options).view({n, 1});
  ctx.additive_mask = at::zeros({1, 1, n, past + n}, at::TensorOptions().dtype(dtype_).device(device))
                          .masked_fill_(key_pos > query_pos, -std::numeric_limits<double>::infinity());

  cache->Reserve(n);
  at::Tensor h = Embed(root_, ids);
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) h = CachedLayer(l, h, ctx, cache);
  cache->Commit(n);
  if (which == LogitsFor::kLastPosition) h = h.narrow(1, n - 1, 1);
  return Logits(config_, root_, h)[0].to(at::kFloat);
}

}  // namespace eft::trainer
