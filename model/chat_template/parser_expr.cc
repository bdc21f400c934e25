// Expressions of the chat-template parser (jinja2/parser.py's precedence ladder: conditional,
// or/and/not, comparisons, arithmetic, concatenation, unary, primary and postfix forms, filters
// and tests); the token stream and statements are in parser.cc.
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/parser_internal.h"

namespace tandem::jinja::parse_internal {

absl::StatusOr<ExprPtr> Parser::ParseAssignTarget(
    bool with_tuple, bool name_only, std::initializer_list<absl::string_view> extra_end,
    bool with_namespace) {
  const int line = cur().line;
  ExprPtr target;
  if (name_only) {
    TANDEM_ASSIGN_OR_RETURN(std::string n, ExpectName());
    target = NewExpr(ExprKind::kName, line);
    target->name = std::move(n);
    return target;
  }
  if (with_tuple) {
    TANDEM_ASSIGN_OR_RETURN(target, ParseTuple(true, true, extra_end, with_namespace));
  } else {
    TANDEM_ASSIGN_OR_RETURN(target, ParsePrimary(with_namespace));
  }
  if (!CanAssign(*target)) {
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": can't assign to this target"));
  }
  return target;
}

bool Parser::CanAssign(const Expr& e) {
  if (e.kind == ExprKind::kName) {
    return true;
  }
  if (e.kind == ExprKind::kNsRef) return true;
  if (e.kind == ExprKind::kTuple) {
    for (const ExprPtr& item : e.items) {
      if (!CanAssign(*item)) return false;
    }
    return true;
  }
  return false;
}

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  if (with_condexpr) return ParseCondExpr();
  return ParseOr();
}

absl::StatusOr<ExprPtr> Parser::ParseCondExpr() {
  int line = cur().line;
  TANDEM_ASSIGN_OR_RETURN(ExprPtr expr1, ParseOr());
  while (SkipName("if")) {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr expr2, ParseOr());
    ExprPtr expr3;
    if (SkipName("else")) {
      TANDEM_ASSIGN_OR_RETURN(expr3, ParseCondExpr());
    }
    ExprPtr node = NewExpr(ExprKind::kCondExpr, line);
    node->a = std::move(expr2);
    node->b = std::move(expr1);
    node->c = std::move(expr3);
    expr1 = std::move(node);
    line = cur().line;
  }
  return expr1;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    const int line = cur().line;
    next();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    ExprPtr node = NewExpr(ExprKind::kOr, line);
    node->a = std::move(left);
    node->b = std::move(right);
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    const int line = cur().line;
    next();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    ExprPtr node = NewExpr(ExprKind::kAnd, line);
    node->a = std::move(left);
    node->b = std::move(right);
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    const int line = cur().line;
    next();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr inner, ParseNot());
    ExprPtr node = NewExpr(ExprKind::kNot, line);
    node->a = std::move(inner);
    return node;
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  const int line = cur().line;
  TANDEM_ASSIGN_OR_RETURN(ExprPtr expr, ParseMath1());
  ExprPtr node;
  while (true) {
    std::string op;
    if (cur().type == TokenType::kOperator &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
         cur().text == ">" || cur().text == ">=")) {
      op = cur().text;
      next();
    } else if (IsName("in")) {
      op = "in";
      next();
    } else if (IsName("not") && IsName(look(), "in")) {
      op = "notin";
      next();
      next();
    } else {
      break;
    }
    TANDEM_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    if (node == nullptr) {
      node = NewExpr(ExprKind::kCompare, line);
      node->a = std::move(expr);
    }
    node->ops.push_back(std::move(op));
    node->items.push_back(std::move(operand));
  }
  if (node == nullptr) return expr;
  return node;
}

absl::StatusOr<ExprPtr> Parser::Binary(ExprPtr left, std::string op, ExprPtr right, int line) {
  ExprPtr node = NewExpr(ExprKind::kBinary, line);
  node->name = std::move(op);
  node->a = std::move(left);
  node->b = std::move(right);
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseMath1() {
  TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    const std::string op = cur().text;
    const int line = cur().line;
    next();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    TANDEM_ASSIGN_OR_RETURN(left, Binary(std::move(left), op, std::move(right), line));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseConcat() {
  const int line = cur().line;
  TANDEM_ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
  if (!IsOp("~")) return first;
  ExprPtr node = NewExpr(ExprKind::kConcat, line);
  node->items.push_back(std::move(first));
  while (SkipOp("~")) {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseMath2());
    node->items.push_back(std::move(e));
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseMath2() {
  TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const std::string op = cur().text;
    const int line = cur().line;
    next();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    TANDEM_ASSIGN_OR_RETURN(left, Binary(std::move(left), op, std::move(right), line));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParsePow() {
  TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (IsOp("**")) {
    const int line = cur().line;
    next();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    TANDEM_ASSIGN_OR_RETURN(left, Binary(std::move(left), "**", std::move(right), line));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  const DepthGuard guard(this);
  if (TooDeep()) return Fail("expression nested too deeply");
  const int line = cur().line;
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const bool neg = IsOp("-");
    next();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr inner, ParseUnary(false));
    node = NewExpr(neg ? ExprKind::kNeg : ExprKind::kPos, line);
    node->a = std::move(inner);
  } else {
    TANDEM_ASSIGN_OR_RETURN(node, ParsePrimary(false));
  }
  TANDEM_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    TANDEM_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary(bool with_namespace) {
  const DepthGuard guard(this);
  if (TooDeep()) return Fail("expression nested too deeply");
  const Token& tok = cur();
  const int line = tok.line;
  if (tok.type == TokenType::kName) {
    const std::string n = tok.text;
    next();
    if (n == "true" || n == "True" || n == "false" || n == "False") {
      ExprPtr e = NewExpr(ExprKind::kConst, line);
      e->value = Value(n == "true" || n == "True");
      return e;
    }
    if (n == "none" || n == "None") {
      ExprPtr e = NewExpr(ExprKind::kConst, line);
      e->value = Value::None();
      return e;
    }
    if (with_namespace && IsOp(".")) {
      next();
      TANDEM_ASSIGN_OR_RETURN(std::string attr, ExpectName());
      ExprPtr e = NewExpr(ExprKind::kNsRef, line);
      e->name = n;
      e->attr = std::move(attr);
      return e;
    }
    ExprPtr e = NewExpr(ExprKind::kName, line);
    e->name = n;
    return e;
  }
  if (tok.type == TokenType::kString) {
    std::string s;
    while (cur().type == TokenType::kString) {
      s += cur().text;
      next();
    }
    ExprPtr e = NewExpr(ExprKind::kConst, line);
    e->value = Value(std::move(s));
    return e;
  }
  if (tok.type == TokenType::kInt || tok.type == TokenType::kFloat) {
    ExprPtr e = NewExpr(ExprKind::kConst, line);
    e->value = tok.type == TokenType::kInt ? Value(tok.int_value) : Value(tok.float_value);
    next();
    return e;
  }
  if (IsOp("(")) {
    next();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(false, true, {}, false, true));
    TANDEM_RETURN_IF_ERROR(ExpectOp(")"));
    return e;
  }
  if (IsOp("[")) return ParseList();
  if (IsOp("{")) return ParseDict();
  return Unexpected();
}

bool Parser::IsTupleEnd(std::initializer_list<absl::string_view> extra_end) const {
  if (cur().type == TokenType::kVarEnd || cur().type == TokenType::kBlockEnd || IsOp(")")) {
    return true;
  }
  for (absl::string_view n : extra_end) {
    if (IsName(n)) return true;
  }
  return false;
}

absl::StatusOr<ExprPtr> Parser::ParseTuple(bool simplified, bool with_condexpr,
                                           std::initializer_list<absl::string_view> extra_end,
                                           bool with_namespace, bool explicit_parentheses) {
  const int line = cur().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
    if (IsTupleEnd(extra_end)) break;
    ExprPtr e;
    if (simplified) {
      TANDEM_ASSIGN_OR_RETURN(e, ParsePrimary(with_namespace));
    } else {
      TANDEM_ASSIGN_OR_RETURN(e, ParseExpression(with_condexpr));
    }
    args.push_back(std::move(e));
    if (IsOp(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) {
      return Fail(absl::StrCat("expected an expression, got '", TokenText(cur()), "'"));
    }
  }
  ExprPtr t = NewExpr(ExprKind::kTuple, line);
  t->items = std::move(args);
  return t;
}

absl::StatusOr<ExprPtr> Parser::ParseList() {
  ExprPtr node = NewExpr(ExprKind::kList, cur().line);
  TANDEM_RETURN_IF_ERROR(ExpectOp("["));
  while (!IsOp("]")) {
    if (!node->items.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp("]")) break;
    TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
    node->items.push_back(std::move(e));
  }
  TANDEM_RETURN_IF_ERROR(ExpectOp("]"));
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseDict() {
  ExprPtr node = NewExpr(ExprKind::kDict, cur().line);
  TANDEM_RETURN_IF_ERROR(ExpectOp("{"));
  while (!IsOp("}")) {
    if (!node->items.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp("}")) break;
    TANDEM_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
    TANDEM_RETURN_IF_ERROR(ExpectOp(":"));
    TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
    node->items.push_back(std::move(key));
    node->items.push_back(std::move(value));
  }
  TANDEM_RETURN_IF_ERROR(ExpectOp("}"));
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".") || IsOp("[")) {
      TANDEM_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      TANDEM_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      break;
    }
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      TANDEM_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
    } else if (IsName("is")) {
      TANDEM_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      TANDEM_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      break;
    }
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const int line = cur().line;
  if (SkipOp(".")) {
    if (cur().type == TokenType::kName) {
      ExprPtr e = NewExpr(ExprKind::kGetattr, line);
      e->a = std::move(node);
      e->name = cur().text;
      next();
      return e;
    }
    if (cur().type != TokenType::kInt) return Fail("expected name or number");
    ExprPtr e = NewExpr(ExprKind::kGetitem, line);
    e->a = std::move(node);
    e->b = NewExpr(ExprKind::kConst, line);
    e->b->value = Value(cur().int_value);
    next();
    return e;
  }
  TANDEM_RETURN_IF_ERROR(ExpectOp("["));
  std::vector<ExprPtr> args;
  while (!IsOp("]")) {
    if (!args.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
    TANDEM_ASSIGN_OR_RETURN(ExprPtr a, ParseSubscribed());
    args.push_back(std::move(a));
  }
  TANDEM_RETURN_IF_ERROR(ExpectOp("]"));
  ExprPtr e = NewExpr(ExprKind::kGetitem, line);
  e->a = std::move(node);
  if (args.size() == 1) {
    e->b = std::move(args[0]);
  } else {
    e->b = NewExpr(ExprKind::kTuple, line);
    e->b->items = std::move(args);
  }
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseSubscribed() {
  const int line = cur().line;
  std::vector<ExprPtr> args;
  if (IsOp(":")) {
    next();
    args.push_back(nullptr);
  } else {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr node, ParseExpression(true));
    if (!IsOp(":")) return node;
    next();
    args.push_back(std::move(node));
  }
  if (IsOp(":")) {
    args.push_back(nullptr);
  } else if (!IsOp("]") && !IsOp(",")) {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr stop, ParseExpression(true));
    args.push_back(std::move(stop));
  } else {
    args.push_back(nullptr);
  }
  if (IsOp(":")) {
    next();
    if (!IsOp("]") && !IsOp(",")) {
      TANDEM_ASSIGN_OR_RETURN(ExprPtr step, ParseExpression(true));
      args.push_back(std::move(step));
    } else {
      args.push_back(nullptr);
    }
  } else {
    args.push_back(nullptr);
  }
  ExprPtr slice = NewExpr(ExprKind::kSlice, line);
  slice->items = std::move(args);
  return slice;
}

absl::Status Parser::ParseCallArgs(Expr* node) {
  TANDEM_RETURN_IF_ERROR(ExpectOp("("));
  bool require_comma = false;
  while (!IsOp(")")) {
    if (require_comma) {
      TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    if (IsOp("*")) {
      if (node->dyn_args || node->dyn_kwargs) return Fail("invalid syntax for function call");
      next();
      TANDEM_ASSIGN_OR_RETURN(node->dyn_args, ParseExpression(true));
    } else if (IsOp("**")) {
      if (node->dyn_kwargs) return Fail("invalid syntax for function call");
      next();
      TANDEM_ASSIGN_OR_RETURN(node->dyn_kwargs, ParseExpression(true));
    } else if (cur().type == TokenType::kName && look().type == TokenType::kOperator &&
               look().text == "=") {
      if (node->dyn_kwargs) return Fail("invalid syntax for function call");
      std::string key = cur().text;
      next();
      next();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      node->kwargs.push_back(Keyword{std::move(key), std::move(value)});
    } else {
      if (node->dyn_args || node->dyn_kwargs || !node->kwargs.empty()) {
        return Fail("invalid syntax for function call");
      }
      TANDEM_ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression(true));
      node->items.push_back(std::move(arg));
    }
    require_comma = true;
  }
  return ExpectOp(")");
}

absl::StatusOr<ExprPtr> Parser::ParseCall(ExprPtr callee) {
  ExprPtr node = NewExpr(ExprKind::kCall, cur().line);
  node->a = std::move(callee);
  TANDEM_RETURN_IF_ERROR(ParseCallArgs(node.get()));
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseFilter(ExprPtr node, bool start_inline) {
  while (IsOp("|") || start_inline) {
    if (!start_inline) next();
    const int line = cur().line;
    TANDEM_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (SkipOp(".")) {
      TANDEM_ASSIGN_OR_RETURN(std::string part, ExpectName());
      absl::StrAppend(&name, ".", part);
    }
    ExprPtr f = NewExpr(ExprKind::kFilter, line);
    f->name = std::move(name);
    f->a = std::move(node);
    if (IsOp("(")) TANDEM_RETURN_IF_ERROR(ParseCallArgs(f.get()));
    node = std::move(f);
    start_inline = false;
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
  const int line = cur().line;
  next();  // is
  const bool negated = SkipName("not");
  TANDEM_ASSIGN_OR_RETURN(std::string name, ExpectName());
  while (SkipOp(".")) {
    TANDEM_ASSIGN_OR_RETURN(std::string part, ExpectName());
    absl::StrAppend(&name, ".", part);
  }
  ExprPtr t = NewExpr(ExprKind::kTest, line);
  t->name = std::move(name);
  t->a = std::move(node);
  if (IsOp("(")) {
    TANDEM_RETURN_IF_ERROR(ParseCallArgs(t.get()));
  } else if ((cur().type == TokenType::kName || cur().type == TokenType::kString ||
              cur().type == TokenType::kInt || cur().type == TokenType::kFloat || IsOp("[") ||
              IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Fail("you cannot chain multiple tests with is");
    TANDEM_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary(false));
    TANDEM_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    t->items.push_back(std::move(arg));
  }
  if (!negated) return t;
  ExprPtr n = NewExpr(ExprKind::kNot, line);
  n->a = std::move(t);
  return n;
}
}  // namespace tandem::jinja::parse_internal
