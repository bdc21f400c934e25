#include "model/chat_template/parser.h"

#include <initializer_list>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/builtins.h"

namespace tandem::jinja {
namespace {

ExprPtr NewExpr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

bool ExprUsesName(const Expr& e, absl::string_view name);

bool BodyUsesName(const Body& body, absl::string_view name) {
  for (const StmtPtr& s : body) {
    for (const Expr* e : {s->expr.get(), s->target.get(), s->cond.get()}) {
      if (e && ExprUsesName(*e, name)) return true;
    }
    for (const auto* list : {&s->defaults, &s->targets, &s->values}) {
      for (const ExprPtr& e : *list) {
        if (ExprUsesName(*e, name)) return true;
      }
    }
    if (BodyUsesName(s->body, name) || BodyUsesName(s->else_body, name)) return true;
  }
  return false;
}

bool ExprUsesName(const Expr& e, absl::string_view name) {
  if (e.kind == ExprKind::kName && e.name == name) return true;
  for (const Expr* child :
       {e.a.get(), e.b.get(), e.c.get(), e.dyn_args.get(), e.dyn_kwargs.get()}) {
    if (child && ExprUsesName(*child, name)) return true;
  }
  for (const ExprPtr& item : e.items) {
    if (item && ExprUsesName(*item, name)) return true;
  }
  for (const Keyword& k : e.kwargs) {
    if (ExprUsesName(*k.value, name)) return true;
  }
  return false;
}

void MarkSpecialNames(Stmt* s) {
  s->uses_varargs = BodyUsesName(s->body, "varargs");
  s->uses_kwargs = BodyUsesName(s->body, "kwargs");
  s->uses_caller = BodyUsesName(s->body, "caller");
}

StmtPtr NewStmt(StmtKind kind, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->line = line;
  return s;
}

const char* Describe(const Token& t) {
  switch (t.type) {
    case TokenType::kData:
      return "template data";
    case TokenType::kVarBegin:
      return "begin of print statement";
    case TokenType::kVarEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kEof:
      return "end of template";
    default:
      return nullptr;
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  absl::StatusOr<Body> ParseTemplate() {
    TANDEM_ASSIGN_OR_RETURN(Body body, Subparse({}));
    if (cur().type != TokenType::kEof) return Fail("unexpected tag");
    return body;
  }

 private:
  // ---- token stream ------------------------------------------------------------------------
  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[i_ + 1 < t_.size() ? i_ + 1 : i_]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool IsName(const Token& t, absl::string_view n) const {
    return t.type == TokenType::kName && t.text == n;
  }
  bool IsName(absl::string_view n) const { return IsName(cur(), n); }
  bool IsOp(absl::string_view op) const {
    return cur().type == TokenType::kOperator && cur().text == op;
  }
  bool SkipName(absl::string_view n) {
    if (!IsName(n)) return false;
    next();
    return true;
  }
  bool SkipOp(absl::string_view op) {
    if (!IsOp(op)) return false;
    next();
    return true;
  }

  std::string TokenText(const Token& t) const {
    if (const char* d = Describe(t)) return d;
    if (t.type == TokenType::kString) return "string";
    return t.text;
  }

  absl::Status Fail(absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", cur().line, ": ", msg));
  }
  absl::Status Unexpected() const {
    return Fail(absl::StrCat("unexpected '", TokenText(cur()), "'"));
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (!SkipOp(op)) {
      return Fail(absl::StrCat("expected '", op, "', got '", TokenText(cur()), "'"));
    }
    return absl::OkStatus();
  }
  absl::Status ExpectType(TokenType type) {
    if (cur().type != type) {
      Token want{type, "", 0, 0, 0};
      return Fail(absl::StrCat("expected ", Describe(want), ", got '", TokenText(cur()), "'"));
    }
    next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (cur().type != TokenType::kName) {
      return Fail(absl::StrCat("expected a name, got '", TokenText(cur()), "'"));
    }
    std::string n = cur().text;
    next();
    return n;
  }
  absl::Status ExpectName(absl::string_view n) {
    if (!SkipName(n)) return Fail(absl::StrCat("expected '", n, "', got '", TokenText(cur()), "'"));
    return absl::OkStatus();
  }

  // ---- statements --------------------------------------------------------------------------
  // Parses until a block tag whose name is in `end` (left as the current token).
  absl::StatusOr<Body> Subparse(std::initializer_list<absl::string_view> end) {
    const DepthGuard guard(this);
    if (TooDeep()) return Fail("statements nested too deeply");
    Body body;
    while (cur().type != TokenType::kEof) {
      const Token& tok = cur();
      if (tok.type == TokenType::kData) {
        StmtPtr s = NewStmt(StmtKind::kData, tok.line);
        s->text = tok.text;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == TokenType::kVarBegin) {
        const int line = tok.line;
        next();
        TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(false, true, {}, false));
        TANDEM_RETURN_IF_ERROR(ExpectType(TokenType::kVarEnd));
        StmtPtr s = NewStmt(StmtKind::kOutput, line);
        s->expr = std::move(e);
        body.push_back(std::move(s));
      } else if (tok.type == TokenType::kBlockBegin) {
        next();
        for (absl::string_view n : end) {
          if (IsName(n)) return body;
        }
        TANDEM_ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
        if (s != nullptr) body.push_back(std::move(s));
        TANDEM_RETURN_IF_ERROR(ExpectType(TokenType::kBlockEnd));
      } else {
        return Unexpected();
      }
    }
    if (end.size() != 0) {
      std::string want;
      for (absl::string_view n : end)
        absl::StrAppend(&want, want.empty() ? "" : " or ", "'", n, "'");
      return Fail(absl::StrCat("unexpected end of template; expected ", want));
    }
    return body;
  }

  // Skips an optional colon, expects the block end and parses the body up to `end`.
  absl::StatusOr<Body> ParseStatements(std::initializer_list<absl::string_view> end,
                                       bool drop_needle) {
    SkipOp(":");
    TANDEM_RETURN_IF_ERROR(ExpectType(TokenType::kBlockEnd));
    TANDEM_ASSIGN_OR_RETURN(Body body, Subparse(end));
    if (drop_needle) next();
    return body;
  }

  absl::StatusOr<StmtPtr> ParseStatement() {
    if (cur().type != TokenType::kName) return Fail("tag name expected");
    const std::string tag = cur().text;
    if (tag == "if") return ParseIf();
    if (tag == "for") return ParseFor();
    if (tag == "set") return ParseSet();
    if (tag == "macro") return ParseMacro();
    if (tag == "call") return ParseCallBlock();
    if (tag == "filter") return ParseFilterBlock();
    if (tag == "with") return ParseWith();
    if (tag == "print") return ParsePrint();
    if (tag == "generation") {
      StmtPtr s = NewStmt(StmtKind::kScope, cur().line);
      next();
      TANDEM_ASSIGN_OR_RETURN(s->body, ParseStatements({"endgeneration"}, true));
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return Fail(absl::StrCat("'", tag, "' outside of a loop"));
      StmtPtr s = NewStmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, cur().line);
      next();
      return s;
    }
    static const absl::flat_hash_set<absl::string_view> kUnsupported = {
        "extends", "block", "include", "import", "from", "autoescape", "do", "raw"};
    if (kUnsupported.contains(tag)) {
      return Fail(absl::StrCat("unsupported tag '", tag, "'"));
    }
    return Fail(absl::StrCat("unknown tag '", tag, "'"));
  }

  absl::StatusOr<StmtPtr> ParseIf() {
    StmtPtr root = NewStmt(StmtKind::kIf, cur().line);
    next();
    Stmt* node = root.get();
    while (true) {
      TANDEM_ASSIGN_OR_RETURN(node->expr, ParseTuple(false, false, {}, false));
      TANDEM_ASSIGN_OR_RETURN(node->body, ParseStatements({"elif", "else", "endif"}, false));
      const std::string which = cur().text;
      next();
      if (which == "elif") {
        StmtPtr elif = NewStmt(StmtKind::kIf, cur().line);
        Stmt* raw = elif.get();
        node->else_body.push_back(std::move(elif));
        node = raw;
        continue;
      }
      if (which == "else") {
        TANDEM_ASSIGN_OR_RETURN(node->else_body, ParseStatements({"endif"}, true));
      }
      break;
    }
    return root;
  }

  absl::StatusOr<StmtPtr> ParseFor() {
    StmtPtr s = NewStmt(StmtKind::kFor, cur().line);
    next();
    TANDEM_ASSIGN_OR_RETURN(s->target, ParseAssignTarget(true, false, {"in"}, false));
    TANDEM_RETURN_IF_ERROR(ExpectName("in"));
    TANDEM_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, false, {"recursive"}, false));
    if (SkipName("if")) {
      TANDEM_ASSIGN_OR_RETURN(s->cond, ParseExpression(true));
    }
    if (IsName("recursive")) return Fail("unsupported recursive for loop");
    ++loop_depth_;
    absl::StatusOr<Body> body = ParseStatements({"endfor", "else"}, false);
    --loop_depth_;
    if (!body.ok()) return body.status();
    s->body = std::move(*body);
    const bool has_else = IsName("else");
    next();
    if (has_else) {
      TANDEM_ASSIGN_OR_RETURN(s->else_body, ParseStatements({"endfor"}, true));
    }
    return s;
  }

  absl::StatusOr<StmtPtr> ParseSet() {
    const int line = cur().line;
    next();
    TANDEM_ASSIGN_OR_RETURN(ExprPtr target, ParseAssignTarget(true, false, {}, true));
    if (SkipOp("=")) {
      StmtPtr s = NewStmt(StmtKind::kSet, line);
      s->target = std::move(target);
      TANDEM_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, true, {}, false));
      return s;
    }
    StmtPtr s = NewStmt(StmtKind::kSetBlock, line);
    s->target = std::move(target);
    if (IsOp("|")) {
      TANDEM_ASSIGN_OR_RETURN(s->expr, ParseFilter(nullptr, false));
    }
    TANDEM_ASSIGN_OR_RETURN(s->body, ParseStatements({"endset"}, true));
    return s;
  }

  absl::Status ParseSignature(Stmt* s) {
    TANDEM_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!s->params.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      TANDEM_ASSIGN_OR_RETURN(std::string param, ExpectName());
      if (SkipOp("=")) {
        TANDEM_ASSIGN_OR_RETURN(ExprPtr d, ParseExpression(true));
        s->defaults.push_back(std::move(d));
      } else if (!s->defaults.empty()) {
        return Fail("non-default argument follows default argument");
      }
      s->params.push_back(std::move(param));
    }
    return ExpectOp(")");
  }

  absl::StatusOr<StmtPtr> ParseMacro() {
    StmtPtr s = NewStmt(StmtKind::kMacro, cur().line);
    next();
    TANDEM_ASSIGN_OR_RETURN(s->name, ExpectName());
    TANDEM_RETURN_IF_ERROR(ParseSignature(s.get()));
    const int saved = loop_depth_;
    loop_depth_ = 0;
    absl::StatusOr<Body> body = ParseStatements({"endmacro"}, true);
    loop_depth_ = saved;
    if (!body.ok()) return body.status();
    s->body = std::move(*body);
    MarkSpecialNames(s.get());
    return s;
  }

  absl::StatusOr<StmtPtr> ParseCallBlock() {
    StmtPtr s = NewStmt(StmtKind::kCallBlock, cur().line);
    next();
    if (IsOp("(")) TANDEM_RETURN_IF_ERROR(ParseSignature(s.get()));
    TANDEM_ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
    if (s->expr->kind != ExprKind::kCall) return Fail("expected call");
    const int saved = loop_depth_;
    loop_depth_ = 0;
    absl::StatusOr<Body> body = ParseStatements({"endcall"}, true);
    loop_depth_ = saved;
    if (!body.ok()) return body.status();
    s->body = std::move(*body);
    MarkSpecialNames(s.get());
    return s;
  }

  absl::StatusOr<StmtPtr> ParseFilterBlock() {
    StmtPtr s = NewStmt(StmtKind::kFilterBlock, cur().line);
    next();
    TANDEM_ASSIGN_OR_RETURN(s->expr, ParseFilter(nullptr, true));
    TANDEM_ASSIGN_OR_RETURN(s->body, ParseStatements({"endfilter"}, true));
    return s;
  }

  absl::StatusOr<StmtPtr> ParseWith() {
    StmtPtr s = NewStmt(StmtKind::kWith, cur().line);
    next();
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->targets.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      TANDEM_ASSIGN_OR_RETURN(ExprPtr target, ParseAssignTarget(true, false, {}, false));
      TANDEM_RETURN_IF_ERROR(ExpectOp("="));
      TANDEM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      s->targets.push_back(std::move(target));
      s->values.push_back(std::move(value));
    }
    TANDEM_ASSIGN_OR_RETURN(s->body, ParseStatements({"endwith"}, true));
    return s;
  }

  absl::StatusOr<StmtPtr> ParsePrint() {
    const int line = cur().line;
    next();
    StmtPtr s = NewStmt(StmtKind::kOutput, line);
    ExprPtr concat = NewExpr(ExprKind::kConcat, line);
    while (cur().type != TokenType::kBlockEnd) {
      if (!concat->items.empty()) TANDEM_RETURN_IF_ERROR(ExpectOp(","));
      TANDEM_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
      concat->items.push_back(std::move(e));
    }
    s->expr = std::move(concat);
    return s;
  }

  // ---- expressions -------------------------------------------------------------------------
  absl::StatusOr<ExprPtr> ParseAssignTarget(bool with_tuple, bool name_only,
                                            std::initializer_list<absl::string_view> extra_end,
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
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line, ": can't assign to this target"));
    }
    return target;
  }

  static bool CanAssign(const Expr& e) {
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

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    if (with_condexpr) return ParseCondExpr();
    return ParseOr();
  }

  absl::StatusOr<ExprPtr> ParseCondExpr() {
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

  absl::StatusOr<ExprPtr> ParseOr() {
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

  absl::StatusOr<ExprPtr> ParseAnd() {
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

  absl::StatusOr<ExprPtr> ParseNot() {
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

  absl::StatusOr<ExprPtr> ParseCompare() {
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

  absl::StatusOr<ExprPtr> Binary(ExprPtr left, std::string op, ExprPtr right, int line) {
    ExprPtr node = NewExpr(ExprKind::kBinary, line);
    node->name = std::move(op);
    node->a = std::move(left);
    node->b = std::move(right);
    return node;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
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

  absl::StatusOr<ExprPtr> ParseConcat() {
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

  absl::StatusOr<ExprPtr> ParseMath2() {
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

  absl::StatusOr<ExprPtr> ParsePow() {
    TANDEM_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      const int line = cur().line;
      next();
      TANDEM_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      TANDEM_ASSIGN_OR_RETURN(left, Binary(std::move(left), "**", std::move(right), line));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
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

  absl::StatusOr<ExprPtr> ParsePrimary(bool with_namespace) {
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

  bool IsTupleEnd(std::initializer_list<absl::string_view> extra_end) const {
    if (cur().type == TokenType::kVarEnd || cur().type == TokenType::kBlockEnd || IsOp(")")) {
      return true;
    }
    for (absl::string_view n : extra_end) {
      if (IsName(n)) return true;
    }
    return false;
  }

  absl::StatusOr<ExprPtr> ParseTuple(bool simplified, bool with_condexpr,
                                     std::initializer_list<absl::string_view> extra_end,
                                     bool with_namespace, bool explicit_parentheses = false) {
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

  absl::StatusOr<ExprPtr> ParseList() {
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

  absl::StatusOr<ExprPtr> ParseDict() {
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

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
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

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
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

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
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

  absl::StatusOr<ExprPtr> ParseSubscribed() {
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

  absl::Status ParseCallArgs(Expr* node) {
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

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr node = NewExpr(ExprKind::kCall, cur().line);
    node->a = std::move(callee);
    TANDEM_RETURN_IF_ERROR(ParseCallArgs(node.get()));
    return node;
  }

  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline) {
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

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node) {
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

  std::vector<Token> t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  // Nesting of the recursive descent, bounded so that no template can exhaust the stack (the
  // interpreter recurses as deep as the tree).
  static constexpr int kMaxDepth = 200;
  int depth_ = 0;
  bool TooDeep() const { return depth_ > kMaxDepth; }
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : parser(p) { ++parser->depth_; }
    ~DepthGuard() { --parser->depth_; }
    Parser* parser;
  };
};

// ---- validation --------------------------------------------------------------------------------

}  // namespace

absl::StatusOr<Body> Parse(std::vector<Token> tokens) {
  return Parser(std::move(tokens)).ParseTemplate();
}

}  // namespace tandem::jinja
