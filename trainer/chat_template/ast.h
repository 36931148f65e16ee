// The parsed form of a template: expressions and statements, each with its line and column for
// error messages. Built by parser.cc, run by interpreter.cc.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainer/chat_template/value.h"

namespace eft::trainer::jinja {

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // args
    kTuple,     // args
    kDict,      // args: key, value, key, value...
    kAttr,      // args[0] . name
    kItem,      // args[0] [ args[1] ]
    kSlice,     // args[0] [ args[1] : args[2] : args[3] ] (null parts absent)
    kCall,      // args[0] ( args[1..], kwargs )
    kFilter,    // args[0] | name ( args[1..], kwargs )
    kTest,      // args[0] is [not] name ( args[1..] )
    kUnary,     // op args[0]: "-", "+", "not"
    kBinary,    // args[0] op args[1]: + - * / // % ** ~ and or
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (== != < <= > >= in "not in")
    kCond,      // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0, column = 0;
  Value literal;
  std::string name;  // name, attribute, filter or test; the operator of kUnary/kBinary
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::shared_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,        // text
    kPrint,       // {{ expr }}
    kIf,          // branches (cond, body)...; else_body
    kFor,         // targets in expr [if filter]: body [else else_body]
    kSet,         // targets (or attr_target.name) = expr
    kSetBlock,    // {% set targets[0] %}body{% endset %}
    kMacro,       // name(params = defaults): body
    kBreak,
    kContinue,
    kGeneration,  // Hugging Face's {% generation %}...{% endgeneration %}: renders its body
  };
  Kind kind;
  int line = 0, column = 0;
  std::string text;
  ExprPtr expr, filter, attr_target;
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when none
};

}  // namespace eft::trainer::jinja
