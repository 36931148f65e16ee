// The C interface of libeft_spm.so, a small module around libsentencepiece.
//
// Why a module: Debian's libsentencepiece exports its bundled copy of protobuf-lite, and LibTorch
// loads the system libprotobuf; linked into one program the two collide at start-up (protobuf's
// static initialisers crash). eft-train therefore loads libeft_spm.so only when a model ships a
// tokenizer.model, with dlopen(RTLD_LOCAL | RTLD_DEEPBIND), so SentencePiece binds to its own
// protobuf and nothing else sees it.
#pragma once

#include <stddef.h>
#include <stdint.h>

extern "C" {

// Returns a handle, or null with a message in err.
void* eft_spm_load(const char* model_file, char* err, size_t err_size);
void eft_spm_free(void* handle);
// Encodes text; *ids, *begins, *ends are malloc'd arrays of *count entries (free with free()).
int eft_spm_encode(void* handle, const char* text, size_t size, int32_t** ids, uint32_t** begins, uint32_t** ends,
                   size_t* count);
// The text of ids, malloc'd (free with free()).
char* eft_spm_decode(void* handle, const int32_t* ids, size_t count);
int32_t eft_spm_piece_size(void* handle);
// The piece of id, valid while the handle lives.
const char* eft_spm_id_to_piece(void* handle, int32_t id);
int32_t eft_spm_piece_to_id(void* handle, const char* piece, size_t size);
int32_t eft_spm_special_id(void* handle, int which);  // 0 bos, 1 eos, 2 unk; -1 when none
// For GGUF export (trainer/export/gguf_tokenizer.h): the piece's score, and its kind as llama.cpp's
// token types number them (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
float eft_spm_score(void* handle, int32_t id);
int32_t eft_spm_piece_kind(void* handle, int32_t id);
// The model's normalizer_spec.add_dummy_prefix (whether a space is put before the text): 1 or 0.
int32_t eft_spm_add_dummy_prefix(void* handle);

}  // extern "C"
