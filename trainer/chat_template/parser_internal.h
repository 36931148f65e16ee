// The parser of chat templates (parser.h) as a class, shared by its two files: statements and
// blocks (parser.cc), expressions, filters and literals (parser_expressions.cc). Internal to the
// chat_template library.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/chat_template/ast.h"
#include "trainer/chat_template/lexer.h"

namespace eft::trainer::jinja::internal {

// The parser, the interpreter and the tree's destructor all recurse once per level of nesting, so
// a hostile template ("((((...", 100000 nested {% if %}, "1+1+...+1") would overflow the stack.
// Real chat templates nest a handful of levels and their longest tag is a few dozen tokens.
constexpr int kMaxNesting = 100;      // nested blocks plus nested parentheses, signs and `not`
constexpr size_t kMaxTagTokens = 2000;  // tokens in one {{ ... }} or {% ... %}: bounds a tree's depth

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Result<Body> Template() {
    EFT_RETURN_IF_ERROR(CheckTagLengths());
    std::string end;
    EFT_ASSIGN_OR_RETURN(Body body, ParseBody({}, &end));
    return body;
  }

 private:
  // One level of recursion; the guard undoes it on every return path.
  class Nest {
   public:
    explicit Nest(int* depth) : depth_(depth) { ++*depth_; }
    ~Nest() { --*depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    int* depth_;
  };
  Status CheckNesting() const {
    if (depth_ <= kMaxNesting) return Status::Ok();
    return ErrorAt(Peek(), "nested more than " + std::to_string(kMaxNesting) + " levels deep");
  }

  Status CheckTagLengths() const {
    size_t open = 0;
    for (size_t i = 0; i < t_.size(); ++i) {
      const TokenKind k = t_[i].kind;
      if (k == TokenKind::kVarBegin || k == TokenKind::kBlockBegin) open = i;
      if ((k == TokenKind::kVarEnd || k == TokenKind::kBlockEnd) && i - open > kMaxTagTokens) {
        return ErrorAt(t_[open], "a tag of " + std::to_string(i - open) + " tokens (more than " +
                                     std::to_string(kMaxTagTokens) + ")");
      }
    }
    return Status::Ok();
  }

  const Token& Peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& Next() { return t_[std::min(pos_++, t_.size() - 1)]; }
  bool IsOp(const char* op, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kOp && Peek(ahead).text == op;
  }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kName && Peek(ahead).text == name;
  }
  Status ErrorAt(const Token& t, const std::string& what) const {
    return Status::InvalidArgument("line " + std::to_string(t.line) + ", column " + std::to_string(t.column) + ": " +
                                   what);
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kBlockEnd: return "end of statement block";
      case TokenKind::kVarEnd: return "end of print statement";
      case TokenKind::kEnd: return "end of template";
      case TokenKind::kString: return "string";
      default: return "'" + t.text + "'";
    }
  }
  Status Expect(TokenKind kind, const char* text = nullptr) {
    const Token& t = Peek();
    if (t.kind != kind || (text && t.text != text)) {
      std::string want = text ? std::string("'") + text + "'"
                              : kind == TokenKind::kBlockEnd ? "end of statement block"
                              : kind == TokenKind::kVarEnd  ? "end of print statement"
                              : kind == TokenKind::kName    ? "a name"
                                                            : "token";
      return ErrorAt(t, "expected " + want + ", got " + Describe(t));
    }
    ++pos_;
    return Status::Ok();
  }
  template <typename T>
  std::shared_ptr<T> Make(typename T::Kind kind, const Token& at) {
    auto n = std::make_shared<T>();
    n->kind = kind;
    n->line = at.line;
    n->column = at.column;
    return n;
  }

  // Statements until one of `end_tags` opens a block ({% endfor %}, {% else %}...); the tag name
  // is consumed and returned in *end, the rest of that tag is left to the caller.
  Result<Body> ParseBody(const std::vector<std::string>& end_tags, std::string* end);
  Result<StmtPtr> Statement(const Token& tag, const std::vector<std::string>& enclosing);
  Result<StmtPtr> If(const Token& tag);
  Result<std::vector<std::string>> Targets();
  Result<StmtPtr> For(const Token& tag);
  Result<StmtPtr> Set(const Token& tag);
  Result<StmtPtr> Macro(const Token& tag);
  // ---- expressions, lowest precedence first ----
  Result<ExprPtr> TupleOrExpression();
  Result<ExprPtr> Expression();
  Result<ExprPtr> Binary(const char* op, ExprPtr a, ExprPtr b, const Token& at);
  Result<ExprPtr> Or();
  Result<ExprPtr> And();
  Result<ExprPtr> Not();
  Result<ExprPtr> Comparison();
  Result<ExprPtr> Math1();
  Result<ExprPtr> Concat();
  Result<ExprPtr> Math2();
  Result<ExprPtr> Pow();
  // As Jinja: the operand of a sign takes no filters, the signed value does (-3|abs is 3).
  Result<ExprPtr> Unary(bool with_filter = true);
  Status CallArguments(Expr* e);
  Result<ExprPtr> Postfix(ExprPtr e);
  Result<ExprPtr> FilterChain(ExprPtr e);
  Result<ExprPtr> Primary();

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace eft::trainer::jinja::internal
