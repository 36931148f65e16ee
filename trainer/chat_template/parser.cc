#include "trainer/chat_template/parser.h"

#include <algorithm>

#include "trainer/chat_template/lexer.h"

namespace eft::trainer::jinja {
namespace {

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
  Result<Body> ParseBody(const std::vector<std::string>& end_tags, std::string* end) {
    Nest nest(&depth_);
    EFT_RETURN_IF_ERROR(CheckNesting());
    Body body;
    while (true) {
      const Token& t = Peek();
      switch (t.kind) {
        case TokenKind::kText: {
          auto s = Make<Stmt>(Stmt::Kind::kText, t);
          s->text = Next().text;
          body.push_back(s);
          break;
        }
        case TokenKind::kVarBegin: {
          Next();
          auto s = Make<Stmt>(Stmt::Kind::kPrint, t);
          EFT_ASSIGN_OR_RETURN(s->expr, Expression());
          EFT_RETURN_IF_ERROR(Expect(TokenKind::kVarEnd));
          body.push_back(s);
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = Peek(1);
          if (name.kind != TokenKind::kName) return ErrorAt(name, "expected a tag name, got " + Describe(name));
          if (std::find(end_tags.begin(), end_tags.end(), name.text) != end_tags.end()) {
            pos_ += 2;
            *end = name.text;
            return body;
          }
          pos_ += 2;
          EFT_ASSIGN_OR_RETURN(StmtPtr s, Statement(name, end_tags));
          body.push_back(s);
          break;
        }
        case TokenKind::kEnd:
          if (!end_tags.empty())
            return ErrorAt(t, "unexpected end of template: expected '" + end_tags.back() + "'");
          return body;
        default:
          return ErrorAt(t, "unexpected " + Describe(t));
      }
    }
  }

  Result<StmtPtr> Statement(const Token& tag, const std::vector<std::string>& enclosing) {
    const std::string& name = tag.text;
    if (name == "if") return If(tag);
    if (name == "for") return For(tag);
    if (name == "set") return Set(tag);
    if (name == "macro") return Macro(tag);
    if (name == "generation") {
      auto s = Make<Stmt>(Stmt::Kind::kGeneration, tag);
      EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
      std::string end;
      EFT_ASSIGN_OR_RETURN(s->body, ParseBody({"endgeneration"}, &end));
      EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
      return s;
    }
    if (name == "break" || name == "continue") {
      auto s = Make<Stmt>(name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, tag);
      EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
      return s;
    }
    if (name.rfind("end", 0) == 0 || name == "else" || name == "elif") {
      std::string expected = enclosing.empty() ? "" : " (expected '" + enclosing.back() + "')";
      return ErrorAt(tag, "unexpected tag '" + name + "'" + expected);
    }
    return ErrorAt(tag, "unsupported tag '" + name + "'");
  }

  Result<StmtPtr> If(const Token& tag) {
    auto s = Make<Stmt>(Stmt::Kind::kIf, tag);
    EFT_ASSIGN_OR_RETURN(ExprPtr cond, Expression());
    EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
    while (true) {
      std::string end;
      EFT_ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &end));
      s->branches.emplace_back(cond, std::move(body));
      if (end == "elif") {
        EFT_ASSIGN_OR_RETURN(cond, Expression());
        EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
        continue;
      }
      EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
      if (end == "else") {
        EFT_ASSIGN_OR_RETURN(s->else_body, ParseBody({"endif"}, &end));
        EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
      }
      return s;
    }
  }

  Result<std::vector<std::string>> Targets() {
    std::vector<std::string> names;
    bool paren = IsOp("(");
    if (paren) Next();
    do {
      if (!names.empty()) Next();  // ','
      const Token& t = Peek();
      if (t.kind != TokenKind::kName) return ErrorAt(t, "expected a name, got " + Describe(t));
      names.push_back(Next().text);
    } while (IsOp(","));
    if (paren) EFT_RETURN_IF_ERROR(Expect(TokenKind::kOp, ")"));
    return names;
  }

  Result<StmtPtr> For(const Token& tag) {
    auto s = Make<Stmt>(Stmt::Kind::kFor, tag);
    EFT_ASSIGN_OR_RETURN(s->targets, Targets());
    EFT_RETURN_IF_ERROR(Expect(TokenKind::kName, "in"));
    EFT_ASSIGN_OR_RETURN(s->expr, Or());  // not a conditional: `if` here filters the loop
    if (IsName("if")) {
      Next();
      EFT_ASSIGN_OR_RETURN(s->filter, Or());
    }
    if (IsName("recursive")) return ErrorAt(Peek(), "unsupported: recursive loops");
    EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
    std::string end;
    EFT_ASSIGN_OR_RETURN(s->body, ParseBody({"else", "endfor"}, &end));
    EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
    if (end == "else") {
      EFT_ASSIGN_OR_RETURN(s->else_body, ParseBody({"endfor"}, &end));
      EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
    }
    return s;
  }

  Result<StmtPtr> Set(const Token& tag) {
    auto s = Make<Stmt>(Stmt::Kind::kSet, tag);
    if (Peek().kind == TokenKind::kName && IsOp(".", 1)) {  // ns.attr = value
      auto target = Make<Expr>(Expr::Kind::kName, Peek());
      target->name = Next().text;
      Next();
      const Token& attr = Peek();
      if (attr.kind != TokenKind::kName) return ErrorAt(attr, "expected an attribute name");
      s->attr_target = target;
      s->targets.push_back(Next().text);
    } else {
      EFT_ASSIGN_OR_RETURN(s->targets, Targets());
    }
    if (Peek().kind == TokenKind::kBlockEnd && !s->attr_target && s->targets.size() == 1) {
      Next();
      s->kind = Stmt::Kind::kSetBlock;
      std::string end;
      EFT_ASSIGN_OR_RETURN(s->body, ParseBody({"endset"}, &end));
      EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
      return s;
    }
    EFT_RETURN_IF_ERROR(Expect(TokenKind::kOp, "="));
    EFT_ASSIGN_OR_RETURN(s->expr, TupleOrExpression());
    EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
    return s;
  }

  Result<StmtPtr> Macro(const Token& tag) {
    auto s = Make<Stmt>(Stmt::Kind::kMacro, tag);
    if (Peek().kind != TokenKind::kName) return ErrorAt(Peek(), "expected a macro name");
    s->text = Next().text;
    EFT_RETURN_IF_ERROR(Expect(TokenKind::kOp, "("));
    while (!IsOp(")")) {
      if (!s->params.empty()) EFT_RETURN_IF_ERROR(Expect(TokenKind::kOp, ","));
      if (Peek().kind != TokenKind::kName) return ErrorAt(Peek(), "expected a parameter name");
      s->params.push_back(Next().text);
      ExprPtr def;
      if (IsOp("=")) {
        Next();
        EFT_ASSIGN_OR_RETURN(def, Expression());
      }
      s->defaults.push_back(def);
    }
    Next();
    EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
    std::string end;
    EFT_ASSIGN_OR_RETURN(s->body, ParseBody({"endmacro"}, &end));
    if (Peek().kind == TokenKind::kName) Next();  // {% endmacro name %}
    EFT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
    return s;
  }

  // ---- expressions, lowest precedence first ----

  Result<ExprPtr> TupleOrExpression() {
    const Token& at = Peek();
    EFT_ASSIGN_OR_RETURN(ExprPtr first, Expression());
    if (!IsOp(",")) return first;
    auto tuple = Make<Expr>(Expr::Kind::kTuple, at);
    tuple->args.push_back(first);
    while (IsOp(",")) {
      Next();
      EFT_ASSIGN_OR_RETURN(ExprPtr e, Expression());
      tuple->args.push_back(e);
    }
    return tuple;
  }

  Result<ExprPtr> Expression() {
    Nest nest(&depth_);
    EFT_RETURN_IF_ERROR(CheckNesting());
    const Token& at = Peek();
    EFT_ASSIGN_OR_RETURN(ExprPtr value, Or());
    while (IsName("if")) {
      Next();
      auto cond = Make<Expr>(Expr::Kind::kCond, at);
      EFT_ASSIGN_OR_RETURN(ExprPtr test, Or());
      ExprPtr otherwise;
      if (IsName("else")) {
        Next();
        EFT_ASSIGN_OR_RETURN(otherwise, Expression());
      }
      cond->args = {test, value, otherwise};
      value = cond;
    }
    return value;
  }

  Result<ExprPtr> Binary(const char* op, ExprPtr a, ExprPtr b, const Token& at) {
    auto e = Make<Expr>(Expr::Kind::kBinary, at);
    e->name = op;
    e->args = {std::move(a), std::move(b)};
    return e;
  }

  Result<ExprPtr> Or() {
    EFT_ASSIGN_OR_RETURN(ExprPtr left, And());
    while (IsName("or")) {
      const Token& at = Next();
      EFT_ASSIGN_OR_RETURN(ExprPtr right, And());
      EFT_ASSIGN_OR_RETURN(left, Binary("or", left, right, at));
    }
    return left;
  }

  Result<ExprPtr> And() {
    EFT_ASSIGN_OR_RETURN(ExprPtr left, Not());
    while (IsName("and")) {
      const Token& at = Next();
      EFT_ASSIGN_OR_RETURN(ExprPtr right, Not());
      EFT_ASSIGN_OR_RETURN(left, Binary("and", left, right, at));
    }
    return left;
  }

  Result<ExprPtr> Not() {
    Nest nest(&depth_);
    EFT_RETURN_IF_ERROR(CheckNesting());
    if (IsName("not")) {
      const Token& at = Next();
      auto e = Make<Expr>(Expr::Kind::kUnary, at);
      e->name = "not";
      EFT_ASSIGN_OR_RETURN(ExprPtr x, Not());
      e->args.push_back(x);
      return e;
    }
    return Comparison();
  }

  Result<ExprPtr> Comparison() {
    const Token& at = Peek();
    EFT_ASSIGN_OR_RETURN(ExprPtr first, Math1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Peek().kind == TokenKind::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = Make<Expr>(Expr::Kind::kCompare, at);
        cmp->args.push_back(first);
      }
      EFT_ASSIGN_OR_RETURN(ExprPtr next, Math1());
      cmp->ops.push_back(op);
      cmp->args.push_back(next);
    }
    return cmp ? cmp : first;
  }

  Result<ExprPtr> Math1() {
    EFT_ASSIGN_OR_RETURN(ExprPtr left, Concat());
    while (IsOp("+") || IsOp("-")) {
      const Token& at = Next();
      EFT_ASSIGN_OR_RETURN(ExprPtr right, Concat());
      EFT_ASSIGN_OR_RETURN(left, Binary(at.text == "+" ? "+" : "-", left, right, at));
    }
    return left;
  }

  Result<ExprPtr> Concat() {
    EFT_ASSIGN_OR_RETURN(ExprPtr left, Math2());
    while (IsOp("~")) {
      const Token& at = Next();
      EFT_ASSIGN_OR_RETURN(ExprPtr right, Math2());
      EFT_ASSIGN_OR_RETURN(left, Binary("~", left, right, at));
    }
    return left;
  }

  Result<ExprPtr> Math2() {
    EFT_ASSIGN_OR_RETURN(ExprPtr left, Pow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& at = Next();
      EFT_ASSIGN_OR_RETURN(ExprPtr right, Pow());
      static const char* kOps[] = {"*", "/", "//", "%"};
      const char* op = *std::find_if(std::begin(kOps), std::end(kOps), [&](const char* o) { return at.text == o; });
      EFT_ASSIGN_OR_RETURN(left, Binary(op, left, right, at));
    }
    return left;
  }

  Result<ExprPtr> Pow() {
    EFT_ASSIGN_OR_RETURN(ExprPtr left, Unary());
    while (IsOp("**")) {
      const Token& at = Next();
      EFT_ASSIGN_OR_RETURN(ExprPtr right, Unary());
      EFT_ASSIGN_OR_RETURN(left, Binary("**", left, right, at));
    }
    return left;
  }

  // As Jinja: the operand of a sign takes no filters, the signed value does (-3|abs is 3).
  Result<ExprPtr> Unary(bool with_filter = true) {
    Nest nest(&depth_);
    EFT_RETURN_IF_ERROR(CheckNesting());
    if (IsOp("-") || IsOp("+")) {
      const Token& at = Next();
      auto e = Make<Expr>(Expr::Kind::kUnary, at);
      e->name = at.text;
      EFT_ASSIGN_OR_RETURN(ExprPtr x, Unary(false));
      e->args.push_back(x);
      return with_filter ? FilterChain(e) : Result<ExprPtr>(e);
    }
    EFT_ASSIGN_OR_RETURN(ExprPtr p, Primary());
    EFT_ASSIGN_OR_RETURN(p, Postfix(p));
    return with_filter ? FilterChain(p) : Result<ExprPtr>(p);
  }

  Status CallArguments(Expr* e) {
    EFT_RETURN_IF_ERROR(Expect(TokenKind::kOp, "("));
    while (!IsOp(")")) {
      if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        Next();
        EFT_ASSIGN_OR_RETURN(ExprPtr v, Expression());
        e->kwargs.emplace_back(key, v);
      } else {
        if (!e->kwargs.empty()) return ErrorAt(Peek(), "positional argument after keyword argument");
        EFT_ASSIGN_OR_RETURN(ExprPtr v, Expression());
        e->args.push_back(v);
      }
      if (!IsOp(",")) break;
      Next();
    }
    return Expect(TokenKind::kOp, ")");
  }

  Result<ExprPtr> Postfix(ExprPtr e) {
    while (true) {
      const Token& at = Peek();
      if (IsOp(".")) {
        Next();
        const Token& name = Peek();
        if (name.kind == TokenKind::kName) {
          auto a = Make<Expr>(Expr::Kind::kAttr, at);
          a->name = Next().text;
          a->args.push_back(e);
          e = a;
        } else if (name.kind == TokenKind::kInt) {  // x.0 is x[0] in Jinja
          auto a = Make<Expr>(Expr::Kind::kItem, at);
          auto index = Make<Expr>(Expr::Kind::kLiteral, name);
          index->literal = Value::Int(std::stoll(Next().text));
          a->args = {e, index};
          e = a;
        } else {
          return ErrorAt(name, "expected an attribute name after '.'");
        }
      } else if (IsOp("[")) {
        Next();
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!IsOp(":") && !IsOp("]")) {
            EFT_ASSIGN_OR_RETURN(parts[k], Expression());
          }
          if (IsOp(":") && k < 2) {
            Next();
            slice = true;
          } else {
            break;
          }
        }
        EFT_RETURN_IF_ERROR(Expect(TokenKind::kOp, "]"));
        auto a = Make<Expr>(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, at);
        if (slice) {
          a->args = {e, parts[0], parts[1], parts[2]};
        } else {
          if (!parts[0]) return ErrorAt(at, "expected a subscript");
          a->args = {e, parts[0]};
        }
        e = a;
      } else if (IsOp("(")) {
        auto c = Make<Expr>(Expr::Kind::kCall, at);
        c->args.push_back(e);
        EFT_RETURN_IF_ERROR(CallArguments(c.get()));
        e = c;
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> FilterChain(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        const Token& at = Next();
        if (Peek().kind != TokenKind::kName) return ErrorAt(Peek(), "expected a filter name after '|'");
        auto f = Make<Expr>(Expr::Kind::kFilter, at);
        f->name = Next().text;
        while (IsOp(".") && Peek(1).kind == TokenKind::kName) {  // dotted filter names
          Next();
          f->name += "." + Next().text;
        }
        f->args.push_back(e);
        if (IsOp("(")) EFT_RETURN_IF_ERROR(CallArguments(f.get()));
        e = f;
      } else if (IsName("is")) {
        const Token& at = Next();
        auto t = Make<Expr>(Expr::Kind::kTest, at);
        if (IsName("not")) {
          Next();
          t->negated = true;
        }
        const Token& name = Peek();
        if (name.kind != TokenKind::kName) return ErrorAt(name, "expected a test name after 'is'");
        t->name = Next().text;
        t->args.push_back(e);
        if (IsOp("(")) {
          EFT_RETURN_IF_ERROR(CallArguments(t.get()));
        } else if (Peek().kind == TokenKind::kString || Peek().kind == TokenKind::kInt ||
                   Peek().kind == TokenKind::kFloat ||
                   (Peek().kind == TokenKind::kName && !IsName("and") && !IsName("or") && !IsName("else") &&
                    !IsName("if") && !IsName("is") && !IsName("in") && !IsName("not"))) {
          // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses
          EFT_ASSIGN_OR_RETURN(ExprPtr arg, Primary());
          EFT_ASSIGN_OR_RETURN(arg, Postfix(arg));
          t->args.push_back(arg);
        }
        e = t;
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> Primary() {
    const Token& t = Peek();
    switch (t.kind) {
      case TokenKind::kString: {
        auto e = Make<Expr>(Expr::Kind::kLiteral, t);
        std::string s = Next().text;
        while (Peek().kind == TokenKind::kString) s += Next().text;  // "a" "b" concatenates
        e->literal = Value::String(s);
        return e;
      }
      case TokenKind::kInt: {
        auto e = Make<Expr>(Expr::Kind::kLiteral, t);
        e->literal = Value::Int(std::stoll(Next().text));
        return e;
      }
      case TokenKind::kFloat: {
        auto e = Make<Expr>(Expr::Kind::kLiteral, t);
        e->literal = Value::Float(std::stod(Next().text));
        return e;
      }
      case TokenKind::kName: {
        auto e = Make<Expr>(Expr::Kind::kLiteral, t);
        const std::string& n = t.text;
        if (n == "true" || n == "True") e->literal = Value::Bool(true);
        else if (n == "false" || n == "False") e->literal = Value::Bool(false);
        else if (n == "none" || n == "None") e->literal = Value::None();
        else e->kind = Expr::Kind::kName, e->name = n;
        Next();
        return e;
      }
      case TokenKind::kOp:
        if (t.text == "(") {
          Next();
          if (IsOp(")")) {
            Next();
            return Make<Expr>(Expr::Kind::kTuple, t);
          }
          EFT_ASSIGN_OR_RETURN(ExprPtr inner, Expression());
          if (IsOp(",")) {
            auto tuple = Make<Expr>(Expr::Kind::kTuple, t);
            tuple->args.push_back(inner);
            while (IsOp(",")) {
              Next();
              if (IsOp(")")) break;
              EFT_ASSIGN_OR_RETURN(ExprPtr e, Expression());
              tuple->args.push_back(e);
            }
            inner = tuple;
          }
          EFT_RETURN_IF_ERROR(Expect(TokenKind::kOp, ")"));
          return inner;
        }
        if (t.text == "[") {
          Next();
          auto list = Make<Expr>(Expr::Kind::kList, t);
          while (!IsOp("]")) {
            EFT_ASSIGN_OR_RETURN(ExprPtr e, Expression());
            list->args.push_back(e);
            if (!IsOp(",")) break;
            Next();
          }
          EFT_RETURN_IF_ERROR(Expect(TokenKind::kOp, "]"));
          return list;
        }
        if (t.text == "{") {
          Next();
          auto dict = Make<Expr>(Expr::Kind::kDict, t);
          while (!IsOp("}")) {
            EFT_ASSIGN_OR_RETURN(ExprPtr k, Expression());
            EFT_RETURN_IF_ERROR(Expect(TokenKind::kOp, ":"));
            EFT_ASSIGN_OR_RETURN(ExprPtr v, Expression());
            dict->args.push_back(k);
            dict->args.push_back(v);
            if (!IsOp(",")) break;
            Next();
          }
          EFT_RETURN_IF_ERROR(Expect(TokenKind::kOp, "}"));
          return dict;
        }
        break;
      default:
        break;
    }
    return ErrorAt(t, "unexpected " + Describe(t));
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Body> Parse(const std::string& source) {
  EFT_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  return Parser(std::move(tokens)).Template();
}

}  // namespace eft::trainer::jinja
