// Statements and blocks ({% if %}, {% for %}, {% set %}, {% macro %}) and the entry point; the
// expressions are parsed in parser_expressions.cc.
#include "trainer/chat_template/parser.h"

#include "trainer/chat_template/parser_internal.h"

namespace eft::trainer::jinja {
namespace internal {

// Statements until one of `end_tags` opens a block ({% endfor %}, {% else %}...); the tag name
// is consumed and returned in *end, the rest of that tag is left to the caller.
Result<Body> Parser::ParseBody(const std::vector<std::string>& end_tags, std::string* end) {
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

Result<StmtPtr> Parser::Statement(const Token& tag, const std::vector<std::string>& enclosing) {
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

Result<StmtPtr> Parser::If(const Token& tag) {
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

Result<std::vector<std::string>> Parser::Targets() {
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

Result<StmtPtr> Parser::For(const Token& tag) {
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

Result<StmtPtr> Parser::Set(const Token& tag) {
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

Result<StmtPtr> Parser::Macro(const Token& tag) {
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
}  // namespace internal

Result<Body> Parse(const std::string& source) {
  EFT_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  return internal::Parser(std::move(tokens)).Template();
}

}  // namespace eft::trainer::jinja
