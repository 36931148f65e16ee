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

namespace {

// Protocol-buffer wire format, just enough to find one field: Debian installs no
// sentencepiece_model.pb.h, so the model's proto is read from its serialized bytes.
bool ReadVarint(const std::string& b, size_t* at, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *at < b.size(); shift += 7) {
    const auto c = static_cast<unsigned char>(b[(*at)++]);
    *v |= static_cast<uint64_t>(c & 0x7F) << shift;
    if (!(c & 0x80)) return true;
  }
  return false;
}

// Calls `on(field, wire_type, value, bytes)` for each field of `message`; false when malformed.
template <typename F>
bool ForEachField(const std::string& message, F on) {
  size_t at = 0;
  while (at < message.size()) {
    uint64_t key = 0, value = 0;
    if (!ReadVarint(message, &at, &key)) return false;
    const auto wire = static_cast<int>(key & 7);
    std::string bytes;
    if (wire == 0) {
      if (!ReadVarint(message, &at, &value)) return false;
    } else if (wire == 1 || wire == 5) {
      const size_t n = wire == 1 ? 8 : 4;
      if (message.size() - at < n) return false;
      at += n;
    } else if (wire == 2) {
      if (!ReadVarint(message, &at, &value) || value > message.size() - at) return false;
      bytes.assign(message, at, value);
      at += value;
    } else {
      return false;
    }
    on(key >> 3, wire, value, bytes);
  }
  return true;
}

}  // namespace

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

float eft_spm_score(void* handle, int32_t id) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->GetScore(id);
}

int32_t eft_spm_piece_kind(void* handle, int32_t id) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
  // In the order llama.cpp's converter tests them: the first that holds.
  if (sp->IsUnknown(id)) return 2;
  if (sp->IsControl(id)) return 3;
  if (sp->IsUnused(id)) return 5;
  if (sp->IsByte(id)) return 6;
  return 1;
}

int32_t eft_spm_add_dummy_prefix(void* handle) {
  try {
    // ModelProto.normalizer_spec = 3; NormalizerSpec.add_dummy_prefix = 3 [default = true].
    const std::string model = static_cast<sentencepiece::SentencePieceProcessor*>(handle)->serialized_model_proto();
    int32_t add = 1;
    ForEachField(model, [&](uint64_t field, int wire, uint64_t, const std::string& spec) {
      if (field != 3 || wire != 2) return;
      ForEachField(spec, [&](uint64_t f, int w, uint64_t value, const std::string&) {
        if (f == 3 && w == 0) add = value != 0;
      });
    });
    return add;
  } catch (...) {
    return 1;
  }
}

}  // extern "C"
