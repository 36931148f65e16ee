// libeft_spm.so: see spm_shim.h.
#include "trainer/tokenizer/spm_shim.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <cstring>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

extern "C" {

// libsentencepiece reports most bad models with a Status, but some throw (its double-array trie
// builder throws Darts::Details::Exception for a model with an empty piece: found by
// fuzz/sentencepiece_model_fuzz.cc). No exception may cross this C interface (it would end the
// program), so every entry point catches them: a load fails with the message, the rest report failure.
void* eft_spm_load(const char* model_file, char* err, size_t err_size) {
  try {
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    auto st = sp->Load(model_file);
    if (!st.ok()) {
      std::snprintf(err, err_size, "%s", st.error_message());
      return nullptr;
    }
    return sp.release();
  } catch (const std::exception& e) {
    std::snprintf(err, err_size, "not a SentencePiece model libsentencepiece can load (%s)", e.what());
  } catch (...) {
    std::snprintf(err, err_size, "not a SentencePiece model libsentencepiece can load (an unknown exception)");
  }
  return nullptr;
}

void eft_spm_free(void* handle) { delete static_cast<sentencepiece::SentencePieceProcessor*>(handle); }

int eft_spm_encode(void* handle, const char* text, size_t size, int32_t** ids, uint32_t** begins, uint32_t** ends,
                   size_t* count) {
  *ids = nullptr, *begins = nullptr, *ends = nullptr, *count = 0;
  try {
    auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
    auto encoded = sp->EncodeAsImmutableProto(std::string(text, size));
    const size_t n = encoded.pieces_size();
    *ids = static_cast<int32_t*>(std::malloc(sizeof(int32_t) * (n ? n : 1)));
    *begins = static_cast<uint32_t*>(std::malloc(sizeof(uint32_t) * (n ? n : 1)));
    *ends = static_cast<uint32_t*>(std::malloc(sizeof(uint32_t) * (n ? n : 1)));
    if (!*ids || !*begins || !*ends) throw std::bad_alloc();
    for (size_t i = 0; i < n; ++i) {
      auto p = encoded.pieces(static_cast<int>(i));
      (*ids)[i] = static_cast<int32_t>(p.id());
      (*begins)[i] = p.begin();
      (*ends)[i] = p.end();
    }
    *count = n;
    return 0;
  } catch (...) {
    std::free(*ids), std::free(*begins), std::free(*ends);
    *ids = nullptr, *begins = nullptr, *ends = nullptr;
    return -1;
  }
}

char* eft_spm_decode(void* handle, const int32_t* ids, size_t count) {
  try {
    auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
    std::string text = sp->DecodeIds(std::vector<int>(ids, ids + count));
    char* out = static_cast<char*>(std::malloc(text.size() + 1));
    if (out) std::memcpy(out, text.c_str(), text.size() + 1);
    return out;
  } catch (...) {
    return nullptr;
  }
}

int32_t eft_spm_piece_size(void* handle) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->GetPieceSize();
}

const char* eft_spm_id_to_piece(void* handle, int32_t id) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->IdToPiece(id).c_str();
}

int32_t eft_spm_piece_to_id(void* handle, const char* piece, size_t size) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->PieceToId(std::string(piece, size));
}

int32_t eft_spm_special_id(void* handle, int which) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
  return which == 0 ? sp->bos_id() : which == 1 ? sp->eos_id() : sp->unk_id();
}

}  // extern "C"
