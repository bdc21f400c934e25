// The syntax tree of a chat template (the parser's output, the interpreter's input). Mirrors
// jinja2/nodes.py for the constructs Tandem supports.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/chat_template/value.h"

namespace tandem::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind : uint8_t {
  kConst,     // value
  kName,      // name
  kList,      // items
  kTuple,     // items
  kDict,      // items: key, value, key, value, ...
  kGetattr,   // a.name
  kGetitem,   // a[b]
  kSlice,     // items[0..2]: start, stop, step (each may be null); only as a Getitem's b
  kCall,      // a(args..., kwargs...)
  kFilter,    // a|name(args...); a is null in {% filter %} and {% set x | f %} heads
  kTest,      // a is name(args...)
  kNeg,       // -a
  kPos,       // +a
  kNot,       // not a
  kBinary,    // a op b; op in + - * / // % **
  kConcat,    // items joined with ~
  kCompare,   // a ops[0] items[0] ops[1] items[1] ...
  kAnd,       // a and b
  kOr,        // a or b
  kCondExpr,  // b if a else c (c may be null)
  kNsRef,     // name.attr as an assignment target
};

struct Keyword {
  std::string name;
  ExprPtr value;
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;  // kName, kGetattr/kNsRef attribute (attr), kFilter/kTest name, kBinary op
  std::string attr;  // kNsRef attribute
  std::vector<ExprPtr> items;
  std::vector<Keyword> kwargs;
  std::vector<std::string> ops;  // kCompare
  ExprPtr a, b, c;
  ExprPtr dyn_args, dyn_kwargs;  // *args / **kwargs of calls, filters and tests
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind : uint8_t {
  kData,         // text
  kOutput,       // {{ expr }}
  kIf,           // expr, body, else_body (an elif is an If alone in else_body)
  kFor,          // target in expr [if cond], body, else_body
  kSet,          // target = expr
  kSetBlock,     // {% set target [| filter] %}body{% endset %}
  kMacro,        // name(params = defaults), body
  kCallBlock,    // {% call [(params)] expr %}body{% endcall %}
  kFilterBlock,  // {% filter expr %}body{% endfilter %}
  kWith,         // {% with targets = values %}body{% endwith %}
  kBreak,
  kContinue,
  kScope,  // body in place: {% generation %} (transformers' assistant-mask tag)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr target;
  ExprPtr cond;
  Body body;
  Body else_body;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned to the last params
  std::vector<ExprPtr> targets, values;
  // kMacro / kCallBlock: whether the body reads varargs, kwargs or caller.
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};

}  // namespace tandem::jinja
