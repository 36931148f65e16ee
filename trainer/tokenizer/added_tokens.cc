#include "trainer/tokenizer/added_tokens.h"

#include <algorithm>
#include <map>
#include <memory>

#include <utf8proc.h>

#include "common/utf8.h"

namespace eft::trainer::tok {
namespace {

// A regex \w character (Alphabetic, marks, decimal digits, connector punctuation, joiners):
// what Hugging Face tests on either side of a single_word token.
bool IsWordChar(char32_t cp) {
  if (cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9)) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point ending at text[end] (exclusive).
char32_t LastCodePoint(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t len = 0;
  return DecodeUtf8(text, start, &len);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  // Build a trie with std::map children, then flatten it into sorted edge ranges.
  struct Build {
    std::map<unsigned char, std::unique_ptr<Build>> children;
    int32_t token = -1;
  };
  Build root;
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& s = tokens_[t].content;
    if (s.empty()) continue;
    first_byte_[static_cast<unsigned char>(s[0])] = true;
    Build* node = &root;
    for (unsigned char c : s) {
      auto& child = node->children[c];
      if (!child) child = std::make_unique<Build>();
      node = child.get();
    }
    if (node->token < 0) node->token = static_cast<int32_t>(t);
  }
  // Breadth-first so each node's children are contiguous.
  std::vector<const Build*> order{&root};
  nodes_.push_back({});
  for (size_t i = 0; i < order.size(); ++i) {
    const Build* b = order[i];
    nodes_[i].token = b->token;
    nodes_[i].children_begin = static_cast<int32_t>(edges_.size());
    for (const auto& [byte, child] : b->children) {
      edges_.push_back({byte, static_cast<int32_t>(order.size())});
      order.push_back(child.get());
      nodes_.push_back({});
    }
    nodes_[i].children_end = static_cast<int32_t>(edges_.size());
  }
}

std::optional<std::pair<size_t, size_t>> AddedTokenMatcher::LongestAt(std::string_view text, size_t at) const {
  std::optional<std::pair<size_t, size_t>> best;
  int32_t node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    const Node& n = nodes_[node];
    auto first = edges_.begin() + n.children_begin, last = edges_.begin() + n.children_end;
    auto it = std::lower_bound(first, last, c, [](const Edge& e, unsigned char b) { return e.byte < b; });
    if (it == last || it->byte != c) break;
    node = it->node;
    if (nodes_[node].token >= 0) best = std::make_pair(static_cast<size_t>(nodes_[node].token), i + 1 - at);
  }
  return best;
}

std::vector<AddedTokenMatcher::Piece> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<Piece> pieces;
  size_t start_offset = 0;  // end of the previous added token
  for (size_t at = 0; at < text.size();) {
    if (!first_byte_[static_cast<unsigned char>(text[at])]) {
      ++at;
      continue;
    }
    auto hit = LongestAt(text, at);
    if (!hit) {
      ++at;
      continue;
    }
    const AddedToken& token = tokens_[hit->first];
    size_t start = at, stop = at + hit->second;
    at = stop;  // matches never overlap, whether or not this one is kept
    if (token.single_word) {
      bool start_space = start == 0 || !IsWordChar(LastCodePoint(text, start));
      size_t len = 0;
      bool stop_space = stop == text.size() || !IsWordChar(DecodeUtf8(text, stop, &len));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > start_offset && IsUnicodeWhitespace(LastCodePoint(text, s))) {
        size_t b = s - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        s = b;
      }
      start = s;
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t len = 0;
        if (!IsUnicodeWhitespace(DecodeUtf8(text, stop, &len))) break;
        stop += len;
      }
      at = stop;
    }
    if (start_offset < start) pieces.push_back({start_offset, start, std::nullopt});
    pieces.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) pieces.push_back({start_offset, text.size(), std::nullopt});
  return pieces;
}

}  // namespace eft::trainer::tok
