// tokenizer.model through libsentencepiece (loaded from the libeft_spm.so module, see
// spm_shim.h), with the special tokens of tokenizer_config.json cut out first and each piece
// between them encoded on its own, which is what Hugging Face's slow (SentencePiece) tokenizers
// such as LlamaTokenizer do.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <unordered_map>

#include "common/mutex.h"
#include "common/sanitizers.h"
#include "common/thread_annotations.h"
#include "trainer/tokenizer/added_tokens.h"
#include "trainer/tokenizer/tokenizer.h"

// The sanitizers' runtimes refuse RTLD_DEEPBIND (it would let a library bypass their interceptors of
// malloc and friends) and end the process at the dlopen. Under them the module is loaded without it:
// that is safe where no other protobuf is in the process (the fuzz targets, the tokenizer's tests);
// in eft-train, which has LibTorch's, the two would collide, so a sanitizer build's eft-train cannot
// read tokenizer.model (tests/sanitizers/skip-address.txt lists the tests left out for it).
constexpr int kSpmDeepBind = eft::kUnderSanitizer ? 0 : RTLD_DEEPBIND;

namespace eft::trainer {
namespace {

// The module's functions, resolved once per process.
struct SpmApi {
  void* (*load)(const char*, char*, size_t) = nullptr;
  void (*free_handle)(void*) = nullptr;
  int (*encode)(void*, const char*, size_t, int32_t**, uint32_t**, uint32_t**, size_t*) = nullptr;
  char* (*decode)(void*, const int32_t*, size_t) = nullptr;
  int32_t (*piece_size)(void*) = nullptr;
  const char* (*id_to_piece)(void*, int32_t) = nullptr;
  int32_t (*piece_to_id)(void*, const char*, size_t) = nullptr;
  int32_t (*special_id)(void*, int) = nullptr;
  float (*score)(void*, int32_t) = nullptr;
  int32_t (*piece_kind)(void*, int32_t) = nullptr;
  int32_t (*add_dummy_prefix)(void*) = nullptr;
};

Result<const SpmApi*> LoadSpmApi() {
  static Mutex mu;
  static SpmApi api GUARDED_BY(mu);  // read-only once `tried`: callers keep the pointer
  static std::string error GUARDED_BY(mu);
  static bool tried GUARDED_BY(mu) = false;
  MutexLock lock(&mu);
  if (!tried) {
    tried = true;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("EFT_SPM_MODULE"); env && *env) candidates.push_back(env);
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back((exe.parent_path() / "libeft_spm.so").string());
      candidates.push_back((exe.parent_path() / ".." / "lib" / "eft" / "libeft_spm.so").string());
    }
#ifdef EFT_SPM_MODULE_BUILD_PATH
    candidates.push_back(EFT_SPM_MODULE_BUILD_PATH);
#endif
    void* lib = nullptr;
    std::string tried_list;
    for (const std::string& path : candidates) {
      if (!std::filesystem::exists(path)) {
        tried_list += " " + path;
        continue;
      }
      lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | kSpmDeepBind);
      if (lib) break;
      tried_list += " " + path + " (" + dlerror() + ")";
    }
    if (!lib) {
      error = "tokenizer.model needs eft's SentencePiece module libeft_spm.so, installed next to eft-train; tried:" +
              tried_list;
    } else {
      auto sym = [&](const char* name) { return dlsym(lib, name); };
      api.load = reinterpret_cast<decltype(api.load)>(sym("eft_spm_load"));
      api.free_handle = reinterpret_cast<decltype(api.free_handle)>(sym("eft_spm_free"));
      api.encode = reinterpret_cast<decltype(api.encode)>(sym("eft_spm_encode"));
      api.decode = reinterpret_cast<decltype(api.decode)>(sym("eft_spm_decode"));
      api.piece_size = reinterpret_cast<decltype(api.piece_size)>(sym("eft_spm_piece_size"));
      api.id_to_piece = reinterpret_cast<decltype(api.id_to_piece)>(sym("eft_spm_id_to_piece"));
      api.piece_to_id = reinterpret_cast<decltype(api.piece_to_id)>(sym("eft_spm_piece_to_id"));
      api.special_id = reinterpret_cast<decltype(api.special_id)>(sym("eft_spm_special_id"));
      api.score = reinterpret_cast<decltype(api.score)>(sym("eft_spm_score"));
      api.piece_kind = reinterpret_cast<decltype(api.piece_kind)>(sym("eft_spm_piece_kind"));
      api.add_dummy_prefix = reinterpret_cast<decltype(api.add_dummy_prefix)>(sym("eft_spm_add_dummy_prefix"));
      if (!api.load || !api.free_handle || !api.encode || !api.decode || !api.piece_size || !api.id_to_piece ||
          !api.piece_to_id || !api.special_id || !api.score || !api.piece_kind || !api.add_dummy_prefix)
        error = "libeft_spm.so lacks a function eft-train needs (a module from another eft version?)";
    }
  }
  if (!error.empty()) return Status::FailedPrecondition(error);
  return &api;
}

// The pieces of one SentencePiece model.
class SpModel {
 public:
  SpModel(const SpmApi* api, void* handle) : api_(api), handle_(handle) {}
  ~SpModel() { api_->free_handle(handle_); }
  SpModel(const SpModel&) = delete;
  SpModel& operator=(const SpModel&) = delete;

  void Encode(std::string_view text, size_t base, Tokenizer::Encoding* e) const {
    int32_t* ids = nullptr;
    uint32_t *begins = nullptr, *ends = nullptr;
    size_t n = 0;
    if (api_->encode(handle_, text.data(), text.size(), &ids, &begins, &ends, &n) == 0) {
      for (size_t i = 0; i < n; ++i) {
        e->ids.push_back(ids[i]);
        e->offsets.push_back({base + begins[i], base + ends[i]});
      }
    } else if (unk_id() >= 0) {
      // libsentencepiece failed on this text (the module caught what it threw): the text becomes one
      // unknown token rather than nothing, so it is not silently left out of a training sequence.
      e->ids.push_back(unk_id());
      e->offsets.push_back({base, base + text.size()});
    }
    std::free(ids);
    std::free(begins);
    std::free(ends);
  }
  std::string DecodeIds(const std::vector<int>& ids) const {
    std::vector<int32_t> v(ids.begin(), ids.end());
    char* text = api_->decode(handle_, v.data(), v.size());
    std::string out = text ? text : "";
    std::free(text);
    return out;
  }
  int GetPieceSize() const { return api_->piece_size(handle_); }
  std::string IdToPiece(int id) const { return api_->id_to_piece(handle_, id); }
  int PieceToId(std::string_view piece) const { return api_->piece_to_id(handle_, piece.data(), piece.size()); }
  int bos_id() const { return api_->special_id(handle_, 0); }
  int eos_id() const { return api_->special_id(handle_, 1); }
  int unk_id() const { return api_->special_id(handle_, 2); }

 private:
  const SpmApi* api_;
  void* handle_;
};

class SpTokenizer : public Tokenizer {
 public:
  Status Init(const std::string& file, const std::vector<std::pair<std::string, int32_t>>& added) {
    kind_ = "sentencepiece";
    EFT_ASSIGN_OR_RETURN(const SpmApi* api, LoadSpmApi());
    char error[512] = "";
    void* handle = api->load(file.c_str(), error, sizeof(error));
    if (!handle) return Status::InvalidArgument("tokenizer.model " + file + ": " + error);
    model_ = std::make_unique<SpModel>(api, handle);
    SpModel& sp_ = *model_;
    std::vector<tok::AddedToken> tokens;
    for (const auto& [content, id] : added) {
      tok::AddedToken t;
      t.content = content;
      t.id = id;
      t.special = true;
      tokens.push_back(t);
      added_by_id_[id] = content;
      special_tokens_.push_back(content);
    }
    for (int id : {sp_.bos_id(), sp_.eos_id(), sp_.unk_id()}) {
      if (id < 0) continue;
      const std::string& piece = sp_.IdToPiece(id);
      if (added_by_id_.emplace(id, piece).second) {
        tok::AddedToken t;
        t.content = piece;
        t.id = id;
        t.special = true;
        tokens.push_back(t);
        special_tokens_.push_back(piece);
      }
    }
    matcher_ = tok::AddedTokenMatcher(std::move(tokens));
    vocab_size_ = sp_.GetPieceSize();
    for (const auto& [id, content] : added_by_id_) vocab_size_ = std::max(vocab_size_, id + 1);
    if (sp_.bos_id() >= 0) bos_id_ = sp_.bos_id();
    if (sp_.eos_id() >= 0) eos_id_ = sp_.eos_id();
    return Status::Ok();
  }

  Encoding Encode(std::string_view text, bool add_special_tokens) const override {
    Encoding e;
    if (add_special_tokens && bos_id_) {
      e.ids.push_back(*bos_id_);
      e.offsets.push_back({0, 0});
    }
    for (const auto& piece : matcher_.Split(text)) {
      if (piece.id) {
        e.ids.push_back(*piece.id);
        e.offsets.push_back({piece.begin, piece.end});
        continue;
      }
      model_->Encode(text.substr(piece.begin, piece.end - piece.begin), piece.begin, &e);
    }
    return e;
  }

  // Special tokens skipped: the rest decodes as one run, as Hugging Face's slow tokenizers do.
  // Kept: each run between them decodes on its own, keeping the space its first piece starts
  // with when it follows a special token (SentencePiece drops a leading space of a whole text).
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::string out;
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      if (!out.empty() && model_->IdToPiece(run.front()).rfind("\xE2\x96\x81", 0) == 0) out += " ";
      out += model_->DecodeIds(run);
      run.clear();
    };
    for (int32_t id : ids) {
      auto added = added_by_id_.find(id);
      if (added != added_by_id_.end()) {
        if (skip_special_tokens) continue;
        flush();
        out += added->second;
      } else if (id >= 0 && id < model_->GetPieceSize()) {
        run.push_back(id);
      }
    }
    flush();
    return out;
  }

  std::optional<int32_t> TokenToId(std::string_view token) const override {
    for (const auto& [id, content] : added_by_id_)
      if (content == token) return id;
    int id = model_->PieceToId(token);
    if (id == model_->unk_id() && model_->IdToPiece(id) != token) return std::nullopt;
    return id;
  }
  std::string IdToToken(int32_t id) const override {
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) return it->second;
    if (id < 0 || id >= model_->GetPieceSize()) return "";
    return model_->IdToPiece(id);
  }
  int32_t vocab_size() const override { return vocab_size_; }
  const std::vector<std::string>& special_tokens() const override { return special_tokens_; }

 private:
  std::unique_ptr<SpModel> model_;
  tok::AddedTokenMatcher matcher_;
  std::unordered_map<int32_t, std::string> added_by_id_;
  std::vector<std::string> special_tokens_;
  int32_t vocab_size_ = 0;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> SentencePieceTokenizer(const std::string& model_file,
                                                          const std::vector<std::pair<std::string, int32_t>>& added) {
  auto t = std::make_unique<SpTokenizer>();
  EFT_RETURN_IF_ERROR(t->Init(model_file, added));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Result<SentencePieceVocab> ReadSentencePieceVocab(const std::string& model_file) {
  EFT_ASSIGN_OR_RETURN(const SpmApi* api, LoadSpmApi());
  char error[512] = "";
  void* handle = api->load(model_file.c_str(), error, sizeof(error));
  if (!handle) return Status::InvalidArgument("tokenizer.model " + model_file + ": " + error);
  SpModel model(api, handle);  // frees the handle
  SentencePieceVocab v;
  const int32_t n = model.GetPieceSize();
  v.pieces.reserve(n);
  for (int32_t id = 0; id < n; ++id) {
    v.pieces.push_back(model.IdToPiece(id));
    v.scores.push_back(api->score(handle, id));
    v.kinds.push_back(api->piece_kind(handle, id));
  }
  v.bos_id = model.bos_id();
  v.eos_id = model.eos_id();
  v.unk_id = model.unk_id();
  v.add_dummy_prefix = api->add_dummy_prefix(handle) != 0;
  return v;
}

}  // namespace eft::trainer
