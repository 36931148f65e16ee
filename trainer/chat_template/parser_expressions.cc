// Expressions of chat templates: precedence climbing from `or` down to primaries, calls,
// attribute and item access, filters and tests (the Parser class of parser_internal.h).
#include <cerrno>
#include <cstdlib>

#include "trainer/chat_template/parser_internal.h"

namespace eft::trainer::jinja::internal {

// ---- expressions, lowest precedence first ----
Result<ExprPtr> Parser::TupleOrExpression() {
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

Result<ExprPtr> Parser::Expression() {
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

Result<ExprPtr> Parser::Binary(const char* op, ExprPtr a, ExprPtr b, const Token& at) {
  auto e = Make<Expr>(Expr::Kind::kBinary, at);
  e->name = op;
  e->args = {std::move(a), std::move(b)};
  return e;
}

Result<ExprPtr> Parser::Or() {
  EFT_ASSIGN_OR_RETURN(ExprPtr left, And());
  while (IsName("or")) {
    const Token& at = Next();
    EFT_ASSIGN_OR_RETURN(ExprPtr right, And());
    EFT_ASSIGN_OR_RETURN(left, Binary("or", left, right, at));
  }
  return left;
}

Result<ExprPtr> Parser::And() {
  EFT_ASSIGN_OR_RETURN(ExprPtr left, Not());
  while (IsName("and")) {
    const Token& at = Next();
    EFT_ASSIGN_OR_RETURN(ExprPtr right, Not());
    EFT_ASSIGN_OR_RETURN(left, Binary("and", left, right, at));
  }
  return left;
}

Result<ExprPtr> Parser::Not() {
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

Result<ExprPtr> Parser::Comparison() {
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

Result<ExprPtr> Parser::Math1() {
  EFT_ASSIGN_OR_RETURN(ExprPtr left, Concat());
  while (IsOp("+") || IsOp("-")) {
    const Token& at = Next();
    EFT_ASSIGN_OR_RETURN(ExprPtr right, Concat());
    EFT_ASSIGN_OR_RETURN(left, Binary(at.text == "+" ? "+" : "-", left, right, at));
  }
  return left;
}

Result<ExprPtr> Parser::Concat() {
  EFT_ASSIGN_OR_RETURN(ExprPtr left, Math2());
  while (IsOp("~")) {
    const Token& at = Next();
    EFT_ASSIGN_OR_RETURN(ExprPtr right, Math2());
    EFT_ASSIGN_OR_RETURN(left, Binary("~", left, right, at));
  }
  return left;
}

Result<ExprPtr> Parser::Math2() {
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

Result<ExprPtr> Parser::Pow() {
  EFT_ASSIGN_OR_RETURN(ExprPtr left, Unary());
  while (IsOp("**")) {
    const Token& at = Next();
    EFT_ASSIGN_OR_RETURN(ExprPtr right, Unary());
    EFT_ASSIGN_OR_RETURN(left, Binary("**", left, right, at));
  }
  return left;
}

// As Jinja: the operand of a sign takes no filters, the signed value does (-3|abs is 3).
Result<ExprPtr> Parser::Unary(bool with_filter) {
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

Status Parser::CallArguments(Expr* e) {
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

Result<ExprPtr> Parser::Postfix(ExprPtr e) {
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
        errno = 0;
        const long long i = std::strtoll(name.text.c_str(), nullptr, 10);
        if (errno == ERANGE) return ErrorAt(name, "index " + name.text + " does not fit in 64 bits");
        Next();
        index->literal = Value::Int(i);
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

Result<ExprPtr> Parser::FilterChain(ExprPtr e) {
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

Result<ExprPtr> Parser::Primary() {
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
      // Python's integers have no bound, ours are 64-bit: a literal beyond them is an error here
      // rather than std::stoll's exception (found by fuzz/chat_template_fuzz.cc).
      auto e = Make<Expr>(Expr::Kind::kLiteral, t);
      errno = 0;
      const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
      if (errno == ERANGE) return ErrorAt(t, "integer literal " + t.text + " does not fit in 64 bits");
      Next();
      e->literal = Value::Int(v);
      return e;
    }
    case TokenKind::kFloat: {
      // As Python's float(): beyond the range is inf, below it 0 (std::stod would throw).
      auto e = Make<Expr>(Expr::Kind::kLiteral, t);
      e->literal = Value::Float(std::strtod(Next().text.c_str(), nullptr));
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
}  // namespace eft::trainer::jinja::internal
