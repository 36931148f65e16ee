// Added tokens (tokenizer.json "added_tokens"): strings such as "<|im_start|>" that are never
// split, found in the text before anything else runs. Matching is leftmost-longest, as Hugging
// Face's Aho-Corasick matcher does, with the tokens' single_word, lstrip and rstrip rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace eft::trainer::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool normalized = false;  // matched in normalized text rather than the input
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);
  bool empty() const { return tokens_.empty(); }

  struct Piece {
    size_t begin, end;
    std::optional<int32_t> id;  // set: an added token
  };
  // `text` cut into added tokens and the text between them (never empty pieces).
  std::vector<Piece> Split(std::string_view text) const;

 private:
  struct Node {
    int32_t children_begin = 0, children_end = 0;  // into edges_, sorted by byte
    int32_t token = -1;                             // index into tokens_ ending here
  };
  struct Edge {
    unsigned char byte;
    int32_t node;
  };
  // Longest token starting at text[at], as an index into tokens_, and its length.
  std::optional<std::pair<size_t, size_t>> LongestAt(std::string_view text, size_t at) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  bool first_byte_[256] = {};
};

}  // namespace eft::trainer::tok
