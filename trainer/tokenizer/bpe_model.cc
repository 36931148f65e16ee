#include "trainer/tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "trainer/tokenizer/byte_level.h"
#include "common/utf8.h"

namespace eft::trainer::tok {
namespace {

using nlohmann::json;

constexpr size_t kCacheableWord = 64;
constexpr size_t kCacheCapacity = 1 << 18;
constexpr size_t kScanLimit = 48;  // words longer than this merge with a heap

Status Bad(const std::string& what) { return Status::InvalidArgument("tokenizer.json: model: " + what); }
// "tokenizer.json: model.vocab: ...": the path of the offending field.
Status BadField(const std::string& field, const std::string& what) {
  return Status::InvalidArgument("tokenizer.json: model." + field + ": " + what);
}

uint64_t Mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

void BpeModel::MergeTable::Reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  keys_.assign(cap, ~uint64_t{0});
  values_.assign(cap, {});
  mask_ = cap - 1;
}

void BpeModel::MergeTable::Insert(int32_t left, int32_t right, BpeModel::Merge merge) {
  uint64_t key = Key(left, right);
  for (uint64_t i = Mix(key) & mask_;; i = (i + 1) & mask_) {
    if (keys_[i] == key) return;  // a repeated merge keeps its first (lowest) rank
    if (keys_[i] == ~uint64_t{0}) {
      keys_[i] = key;
      values_[i] = merge;
      return;
    }
  }
}

BpeModel::Merge BpeModel::MergeTable::Find(int32_t left, int32_t right) const {
  uint64_t key = Key(left, right);
  for (uint64_t i = Mix(key) & mask_;; i = (i + 1) & mask_) {
    if (keys_[i] == key) return values_[i];
    if (keys_[i] == ~uint64_t{0}) return {};
  }
}

Result<std::unique_ptr<BpeModel>> BpeModel::FromJson(const json& model, bool byte_level) {
  if (!model.is_object()) return Bad("not an object");
  std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") return Bad("unsupported model type " + type + " (only BPE)");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() > 0)
    return Bad("dropout is not supported (it makes tokenization random)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(affix) && model[affix].is_string() && !model[affix].get<std::string>().empty())
      return Bad(std::string("unsupported ") + affix);
  }
  const json& vocab = model.value("vocab", json());
  const json& merges = model.value("merges", json());
  if (!vocab.is_object()) return BadField("vocab", "expected a mapping of token -> id, got " + std::string(vocab.type_name()));
  if (!merges.is_array()) return BadField("merges", "expected a list, got " + std::string(merges.type_name()));

  std::unique_ptr<BpeModel> m(new BpeModel());
  m->byte_level_ = byte_level;
  m->ignore_merges_ = model.value("ignore_merges", false);
  m->byte_fallback_ = model.value("byte_fallback", false);
  m->fuse_unk_ = model.value("fuse_unk", false);
  std::fill(std::begin(m->byte_ids_), std::end(m->byte_ids_), -1);
  std::fill(std::begin(m->fallback_ids_), std::end(m->fallback_ids_), -1);

  // The id -> token table is sized by the largest id: one far past the vocabulary's size (or past
  // int32, which used to wrap) would allocate gigabytes for a few entries. Real vocabularies are
  // dense; gaps up to kMaxIdGap are tolerated.
  constexpr int64_t kMaxIdGap = 1 << 20;
  const int64_t id_limit = static_cast<int64_t>(vocab.size()) + kMaxIdGap;
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
      return BadField("vocab", "entry " + it.key() + " has no valid id (a non-negative integer)");
    const int64_t id = it.value().get<int64_t>();
    if (id >= id_limit) {
      return BadField("vocab", "id " + std::to_string(id) + " (of " + it.key() + ") is far past the vocabulary's " +
                 std::to_string(vocab.size()) + " entries");
    }
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  m->spelled_.assign(static_cast<size_t>(max_id + 1), std::string());
  m->lookup_.reserve(vocab.size());
  m->spelled_lookup_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    int32_t id = it.value().get<int32_t>();
    const std::string& token = it.key();
    m->spelled_[id] = token;
    m->spelled_lookup_.emplace(token, id);
    if (byte_level) {
      // Tokens outside the alphabet can never come out of a byte-level word; keep them for
      // spelling lookups only.
      if (auto raw = ByteLevelToBytes(token)) {
        m->lookup_.emplace(*raw, id);
        if (raw->size() == 1) m->byte_ids_[static_cast<unsigned char>((*raw)[0])] = id;
      }
    } else {
      m->lookup_.emplace(token, id);
    }
  }
  if (m->byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = m->spelled_lookup_.find(name);
      if (it != m->spelled_lookup_.end()) m->fallback_ids_[b] = it->second;
    }
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = m->spelled_lookup_.find(model["unk_token"].get<std::string>());
    if (it == m->spelled_lookup_.end()) return Bad("unk_token " + model["unk_token"].get<std::string>() + " is not in the vocab");
    m->unk_id_ = it->second;
  }

  m->merges_.Reserve(merges.size());
  int32_t rank = 0;
  for (const json& merge : merges) {
    std::string left, right;
    if (merge.is_string()) {
      const std::string& s = merge.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos) return Bad("merge \"" + s + "\" is not two tokens");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return BadField("merges[" + std::to_string(rank) + "]", "expected \"a b\" or [a, b], got " +
                 std::string(merge.type_name()));
    }
    auto l = m->spelled_lookup_.find(left), r = m->spelled_lookup_.find(right),
         joined = m->spelled_lookup_.find(left + right);
    if (l == m->spelled_lookup_.end() || r == m->spelled_lookup_.end())
      return Bad("merge \"" + left + " " + right + "\" uses a token not in the vocab");
    if (joined == m->spelled_lookup_.end())
      return Bad("merge \"" + left + " " + right + "\" makes a token not in the vocab");
    m->merges_.Insert(l->second, r->second, {rank, joined->second});
    ++rank;
  }
  return m;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = spelled_lookup_.find(std::string(token));
  if (it == spelled_lookup_.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeModel::IdToToken(int32_t id) const {
  static const std::string kNone;
  if (id < 0 || id >= vocab_size()) return kNone;
  return spelled_[id];
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>* ids, std::vector<uint32_t>* lengths) const {
  if (byte_level_) {
    for (unsigned char c : word) {
      int32_t id = byte_ids_[c];
      if (id >= 0) {
        ids->push_back(id);
        lengths->push_back(1);
      } else if (unk_id_) {
        ids->push_back(*unk_id_);
        lengths->push_back(1);
      } else if (!lengths->empty()) {
        lengths->back() += 1;  // dropped, as Hugging Face drops it; its byte joins the neighbour
      }
    }
    return;
  }
  bool previous_unk = false;
  for (size_t i = 0; i < word.size();) {
    size_t len = Utf8SequenceLength(word, i);
    if (len == 0) len = 1;
    std::string ch(word.substr(i, len));
    auto it = lookup_.find(ch);
    if (it != lookup_.end()) {
      ids->push_back(it->second);
      lengths->push_back(static_cast<uint32_t>(len));
      previous_unk = false;
    } else if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char c) {
                 return fallback_ids_[static_cast<unsigned char>(c)] >= 0;
               })) {
      for (size_t k = 0; k < len; ++k) {
        ids->push_back(fallback_ids_[static_cast<unsigned char>(ch[k])]);
        lengths->push_back(k == 0 ? static_cast<uint32_t>(len) : 0);
      }
      previous_unk = false;
    } else if (unk_id_) {
      if (fuse_unk_ && previous_unk) {
        lengths->back() += static_cast<uint32_t>(len);
      } else {
        ids->push_back(*unk_id_);
        lengths->push_back(static_cast<uint32_t>(len));
      }
      previous_unk = true;
    } else if (!lengths->empty()) {
      lengths->back() += static_cast<uint32_t>(len);
    }
    i += len;
  }
}

void BpeModel::ApplyMerges(std::vector<int32_t>* ids, std::vector<uint32_t>* lengths) const {
  const size_t n = ids->size();
  if (n < 2) return;
  if (n <= kScanLimit) {
    // Short words: rescan for the lowest-ranked pair, leftmost on ties.
    while (ids->size() >= 2) {
      int32_t best_rank = INT32_MAX, best_id = -1;
      size_t best_at = 0;
      for (size_t i = 0; i + 1 < ids->size(); ++i) {
        Merge m = merges_.Find((*ids)[i], (*ids)[i + 1]);
        if (m.rank >= 0 && m.rank < best_rank) {
          best_rank = m.rank;
          best_id = m.id;
          best_at = i;
        }
      }
      if (best_id < 0) break;
      (*ids)[best_at] = best_id;
      (*lengths)[best_at] += (*lengths)[best_at + 1];
      ids->erase(ids->begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
      lengths->erase(lengths->begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
    return;
  }
  // Long words: a heap of candidate merges ordered by (rank, position); stale entries skipped.
  struct Sym {
    int32_t id;
    int32_t prev, next;
    uint32_t length;
    bool alive;
  };
  std::vector<Sym> syms(n);
  for (size_t i = 0; i < n; ++i)
    syms[i] = {(*ids)[i], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1, (*lengths)[i], true};
  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || syms[pos].next < 0) return;
    Merge m = merges_.Find(syms[pos].id, syms[syms[pos].next].id);
    if (m.rank >= 0) heap.push({m.rank, pos, m.id});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(static_cast<int32_t>(i));
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Sym& left = syms[c.pos];
    if (!left.alive || left.next < 0) continue;
    Sym& right = syms[left.next];
    Merge m = merges_.Find(left.id, right.id);
    if (m.id != c.id || m.rank != c.rank) continue;
    left.id = c.id;
    left.length += right.length;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  ids->clear();
  lengths->clear();
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    ids->push_back(syms[i].id);
    lengths->push_back(syms[i].length);
  }
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids, std::vector<uint32_t>* lengths) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = lookup_.find(std::string(word));
    if (it != lookup_.end()) {
      ids->push_back(it->second);
      lengths->push_back(static_cast<uint32_t>(word.size()));
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheableWord;
  std::string key;
  if (cacheable) {
    key.assign(word);
    MutexLock lock(&cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.ids.begin(), it->second.ids.end());
      lengths->insert(lengths->end(), it->second.lengths.begin(), it->second.lengths.end());
      return;
    }
  }
  CachedWord w;
  InitialSymbols(word, &w.ids, &w.lengths);
  ApplyMerges(&w.ids, &w.lengths);
  ids->insert(ids->end(), w.ids.begin(), w.ids.end());
  lengths->insert(lengths->end(), w.lengths.begin(), w.lengths.end());
  if (cacheable) {
    MutexLock lock(&cache_mu_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::move(key), std::move(w));
  }
}

}  // namespace eft::trainer::tok
