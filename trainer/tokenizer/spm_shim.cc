// libeft_spm.so: see spm_shim.h.
#include "trainer/tokenizer/spm_shim.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

extern "C" {

void* eft_spm_load(const char* model_file, char* err, size_t err_size) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  auto st = sp->Load(model_file);
  if (!st.ok()) {
    std::snprintf(err, err_size, "%s", st.error_message());
    delete sp;
    return nullptr;
  }
  return sp;
}

void eft_spm_free(void* handle) { delete static_cast<sentencepiece::SentencePieceProcessor*>(handle); }

int eft_spm_encode(void* handle, const char* text, size_t size, int32_t** ids, uint32_t** begins, uint32_t** ends,
                   size_t* count) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
  auto encoded = sp->EncodeAsImmutableProto(std::string(text, size));
  const size_t n = encoded.pieces_size();
  *count = n;
  *ids = static_cast<int32_t*>(std::malloc(sizeof(int32_t) * (n ? n : 1)));
  *begins = static_cast<uint32_t*>(std::malloc(sizeof(uint32_t) * (n ? n : 1)));
  *ends = static_cast<uint32_t*>(std::malloc(sizeof(uint32_t) * (n ? n : 1)));
  if (!*ids || !*begins || !*ends) return -1;
  for (size_t i = 0; i < n; ++i) {
    auto p = encoded.pieces(static_cast<int>(i));
    (*ids)[i] = static_cast<int32_t>(p.id());
    (*begins)[i] = p.begin();
    (*ends)[i] = p.end();
  }
  return 0;
}

char* eft_spm_decode(void* handle, const int32_t* ids, size_t count) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
  std::string text = sp->DecodeIds(std::vector<int>(ids, ids + count));
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out) std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
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
