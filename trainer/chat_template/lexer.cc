#include "trainer/chat_template/lexer.h"

#include <cctype>
#include <cstring>

#include "common/utf8.h"

namespace eft::trainer::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(std::move(source)) {
    // Jinja reads templates with universal newlines and, without keep_trailing_newline, drops
    // one newline at the very end.
    std::string normalized;
    for (size_t i = 0; i < s_.size(); ++i) {
      if (s_[i] == '\r') {
        normalized += '\n';
        if (i + 1 < s_.size() && s_[i + 1] == '\n') ++i;
      } else {
        normalized += s_[i];
      }
    }
    if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
    s_ = std::move(normalized);
  }

  Result<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      size_t open = FindOpen(pos);
      std::string text = s_.substr(pos, open - pos);
      if (open == s_.size()) {
        Emit(TokenKind::kText, text, pos);
        break;
      }
      char kind = s_[open + 1];  // '{', '%' or '#'
      size_t after = open + 2;
      char sign = after < s_.size() && (s_[after] == '-' || s_[after] == '+') ? s_[after] : 0;
      if (sign == '-') {
        size_t keep = text.size();
        while (keep > 0 && IsSpace(text[keep - 1])) --keep;
        text.resize(keep);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: blocks and comments
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = l_pos < text.size();
          for (size_t i = l_pos; i < text.size() && blank; ++i) blank = IsSpace(text[i]);
          if (blank) text.resize(l_pos);
        }
      }
      Emit(TokenKind::kText, text, pos);
      if (sign) ++after;
      if (kind == '#') {
        EFT_ASSIGN_OR_RETURN(pos, SkipComment(open, after));
      } else if (kind == '%' && IsRaw(after)) {
        EFT_ASSIGN_OR_RETURN(pos, Raw(open, after));
      } else {
        EFT_ASSIGN_OR_RETURN(pos, Tag(open, after, kind == '%'));
      }
      line_starting = pos > 0 && s_[pos - 1] == '\n';
    }
    Emit(TokenKind::kEnd, "", s_.size());
    return std::move(tokens_);
  }

 private:
  size_t FindOpen(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return s_.size();
  }

  void Emit(TokenKind kind, std::string text, size_t offset) {
    if (kind == TokenKind::kText && text.empty()) return;
    Token t{kind, std::move(text), 1, 1};
    Position(offset, &t.line, &t.column);
    tokens_.push_back(std::move(t));
  }

  // Tokens come in source order, so the scan resumes where the last one stopped: rescanning from
  // the start for every token made a long template (hostile or not) quadratic to lex.
  void Position(size_t offset, int* line, int* column) const {
    if (offset < scanned_) {
      scanned_ = 0;
      scanned_line_ = 1;
      scanned_line_start_ = 0;
    }
    for (; scanned_ < offset && scanned_ < s_.size(); ++scanned_) {
      if (s_[scanned_] == '\n') {
        ++scanned_line_;
        scanned_line_start_ = scanned_ + 1;
      }
    }
    *line = scanned_line_;
    *column = static_cast<int>(offset - scanned_line_start_) + 1;
  }
  mutable size_t scanned_ = 0, scanned_line_start_ = 0;
  mutable int scanned_line_ = 1;

  Status Error(size_t offset, const std::string& what) const {
    int line = 0, column = 0;
    Position(offset, &line, &column);
    return Status::InvalidArgument("line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what);
  }

  // After a closing marker: "-" strips following whitespace; trim_blocks drops one newline after
  // a block or comment ("+" keeps it).
  size_t AfterClose(size_t end, char sign, bool block) const {
    if (sign == '-') {
      while (end < s_.size() && IsSpace(s_[end])) ++end;
    } else if (sign != '+' && block && end < s_.size() && s_[end] == '\n') {
      ++end;
    }
    return end;
  }

  Result<size_t> SkipComment(size_t open, size_t from) {
    size_t close = s_.find("#}", from);
    if (close == std::string::npos) return Error(open, "missing end of comment tag");
    char sign = close > from && (s_[close - 1] == '-' || s_[close - 1] == '+') ? s_[close - 1] : 0;
    return AfterClose(close + 2, sign, true);
  }

  bool IsRaw(size_t at) const {
    while (at < s_.size() && IsSpace(s_[at])) ++at;
    if (s_.compare(at, 3, "raw") != 0) return false;
    at += 3;
    while (at < s_.size() && IsSpace(s_[at])) ++at;
    if (at < s_.size() && s_[at] == '-') ++at;
    return s_.compare(at, 2, "%}") == 0;
  }

  Result<size_t> Raw(size_t open, size_t at) {
    size_t close = s_.find("%}", at);
    char sign = s_[close - 1] == '-' ? '-' : 0;
    size_t body = AfterClose(close + 2, sign, true);
    for (size_t i = body; (i = s_.find("{%", i)) != std::string::npos; ++i) {
      size_t k = i + 2;
      char esign = k < s_.size() && (s_[k] == '-' || s_[k] == '+') ? s_[k] : 0;
      if (esign) ++k;
      while (k < s_.size() && IsSpace(s_[k])) ++k;
      if (s_.compare(k, 6, "endraw") != 0) continue;
      k += 6;
      while (k < s_.size() && IsSpace(s_[k])) ++k;
      char csign = k < s_.size() && (s_[k] == '-' || s_[k] == '+') ? s_[k] : 0;
      if (csign) ++k;
      if (s_.compare(k, 2, "%}") != 0) continue;
      std::string text = s_.substr(body, i - body);
      if (esign == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      }
      Emit(TokenKind::kText, text, body);
      return AfterClose(k + 2, csign, true);
    }
    return Error(open, "missing end of raw directive");
  }

  Result<size_t> Tag(size_t open, size_t at, bool block) {
    Emit(block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", open);
    int depth = 0;
    const char close_char = block ? '%' : '}';
    while (true) {
      while (at < s_.size() && IsSpace(s_[at])) ++at;
      if (at >= s_.size()) return Error(open, block ? "unexpected end of template: missing %}" : "unexpected end of template: missing }}");
      // The closing marker, when not inside brackets.
      if (depth == 0) {
        char sign = (s_[at] == '-' || (block && s_[at] == '+')) ? s_[at] : 0;
        size_t k = at + (sign ? 1 : 0);
        if (k + 1 < s_.size() && s_[k] == close_char && s_[k + 1] == '}') {
          Emit(block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", at);
          return AfterClose(k + 2, sign, block);
        }
      }
      char c = s_[at];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t b = at;
        while (at < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[at])) || s_[at] == '_')) ++at;
        Emit(TokenKind::kName, s_.substr(b, at - b), b);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t b = at;
        bool is_float = false;
        while (at < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[at])) || s_[at] == '_')) ++at;
        if (at + 1 < s_.size() && s_[at] == '.' && std::isdigit(static_cast<unsigned char>(s_[at + 1]))) {
          is_float = true;
          ++at;
          while (at < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[at])) || s_[at] == '_')) ++at;
        }
        if (at < s_.size() && (s_[at] == 'e' || s_[at] == 'E')) {
          size_t k = at + 1;
          if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
          if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
            is_float = true;
            at = k;
            while (at < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at]))) ++at;
          }
        }
        std::string number;
        for (size_t i = b; i < at; ++i)
          if (s_[i] != '_') number += s_[i];
        Emit(is_float ? TokenKind::kFloat : TokenKind::kInt, number, b);
      } else if (c == '\'' || c == '"') {
        size_t b = at;
        EFT_ASSIGN_OR_RETURN(std::string value, StringLiteral(&at));
        Emit(TokenKind::kString, std::move(value), b);
      } else {
        static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                     "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
        const char* op = nullptr;
        for (const char* o : kOps) {
          if (s_.compare(at, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (!op) return Error(at, std::string("unexpected character '") + c + "'");
        if (*op == '(' || *op == '[' || *op == '{') ++depth;
        if ((*op == ')' || *op == ']' || *op == '}') && depth > 0) --depth;
        Emit(TokenKind::kOp, op, at);
        at += std::strlen(op);
      }
    }
  }

  Result<std::string> StringLiteral(size_t* at) {
    const size_t start = *at;
    const char quote = s_[(*at)++];
    std::string out;
    while (*at < s_.size() && s_[*at] != quote) {
      char c = s_[(*at)++];
      if (c != '\\' || *at >= s_.size()) {
        out += c;
        continue;
      }
      char e = s_[(*at)++];
      auto hex = [&](int digits) -> long {
        if (*at + digits > s_.size()) return -1;
        std::string h = s_.substr(*at, static_cast<size_t>(digits));
        for (char d : h)
          if (!std::isxdigit(static_cast<unsigned char>(d))) return -1;
        *at += static_cast<size_t>(digits);
        return std::strtol(h.c_str(), nullptr, 16);
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // line continuation
        case 'x': case 'u': case 'U': {
          long cp = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
          if (cp < 0) return Error(start, "invalid \\" + std::string(1, e) + " escape in string literal");
          AppendUtf8(static_cast<char32_t>(cp), &out);
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    if (*at >= s_.size()) return Error(start, "unterminated string literal");
    ++*at;
    return out;
  }

  std::string s_;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> Tokenize(const std::string& source) { return Lexer(source).Run(); }

}  // namespace eft::trainer::jinja
