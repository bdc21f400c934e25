#include "model/chat_template/parser.h"

#include <initializer_list>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/parser_internal.h"

// Token stream and statements of the parser; expressions are in parser_expr.cc.
namespace tandem::jinja {
namespace parse_internal {
namespace {

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

}  // namespace

ExprPtr NewExpr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

StmtPtr NewStmt(StmtKind kind, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->line = line;
  return s;
}

absl::StatusOr<Body> Parser::ParseTemplate() {
  TANDEM_ASSIGN_OR_RETURN(Body body, Subparse({}));
  if (cur().type != TokenType::kEof) return Fail("unexpected tag");
  return body;
}

void Parser::next() {
  if (i_ + 1 < t_.size()) ++i_;
}

bool Parser::IsName(const Token& t, absl::string_view n) const {
  return t.type == TokenType::kName && t.text == n;
}

bool Parser::IsOp(absl::string_view op) const {
  return cur().type == TokenType::kOperator && cur().text == op;
}

bool Parser::SkipName(absl::string_view n) {
  if (!IsName(n)) return false;
  next();
  return true;
}

bool Parser::SkipOp(absl::string_view op) {
  if (!IsOp(op)) return false;
  next();
  return true;
}

std::string Parser::TokenText(const Token& t) const {
  if (const char* d = Describe(t)) return d;
  if (t.type == TokenType::kString) return "string";
  return t.text;
}

absl::Status Parser::Fail(absl::string_view msg) const {
  return absl::InvalidArgumentError(absl::StrCat("line ", cur().line, ": ", msg));
}

absl::Status Parser::Unexpected() const {
  return Fail(absl::StrCat("unexpected '", TokenText(cur()), "'"));
}

absl::Status Parser::ExpectOp(absl::string_view op) {
  if (!SkipOp(op)) {
    return Fail(absl::StrCat("expected '", op, "', got '", TokenText(cur()), "'"));
  }
  return absl::OkStatus();
}

absl::Status Parser::ExpectType(TokenType type) {
  if (cur().type != type) {
    Token want{type, "", 0, 0, 0};
    return Fail(absl::StrCat("expected ", Describe(want), ", got '", TokenText(cur()), "'"));
  }
  next();
  return absl::OkStatus();
}

absl::StatusOr<std::string> Parser::ExpectName() {
  if (cur().type != TokenType::kName) {
    return Fail(absl::StrCat("expected a name, got '", TokenText(cur()), "'"));
  }
  std::string n = cur().text;
  next();
  return n;
}

absl::Status Parser::ExpectName(absl::string_view n) {
  if (!SkipName(n)) return Fail(absl::StrCat("expected '", n, "', got '", TokenText(cur()), "'"));
  return absl::OkStatus();
}

absl::StatusOr<Body> Parser::Subparse(std::initializer_list<absl::string_view> end) {
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
    for (absl::string_view n : end) absl::StrAppend(&want, want.empty() ? "" : " or ", "'", n, "'");
    return Fail(absl::StrCat("unexpected end of template; expected ", want));
  }
  return body;
}

absl::StatusOr<Body> Parser::ParseStatements(std::initializer_list<absl::string_view> end,
                                             bool drop_needle) {
  SkipOp(":");
  TANDEM_RETURN_IF_ERROR(ExpectType(TokenType::kBlockEnd));
  TANDEM_ASSIGN_OR_RETURN(Body body, Subparse(end));
  if (drop_needle) next();
  return body;
}

absl::StatusOr<StmtPtr> Parser::ParseStatement() {
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

absl::StatusOr<StmtPtr> Parser::ParseIf() {
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

absl::StatusOr<StmtPtr> Parser::ParseFor() {
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

absl::StatusOr<StmtPtr> Parser::ParseSet() {
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

absl::Status Parser::ParseSignature(Stmt* s) {
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

absl::StatusOr<StmtPtr> Parser::ParseMacro() {
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

absl::StatusOr<StmtPtr> Parser::ParseCallBlock() {
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

absl::StatusOr<StmtPtr> Parser::ParseFilterBlock() {
  StmtPtr s = NewStmt(StmtKind::kFilterBlock, cur().line);
  next();
  TANDEM_ASSIGN_OR_RETURN(s->expr, ParseFilter(nullptr, true));
  TANDEM_ASSIGN_OR_RETURN(s->body, ParseStatements({"endfilter"}, true));
  return s;
}

absl::StatusOr<StmtPtr> Parser::ParseWith() {
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

absl::StatusOr<StmtPtr> Parser::ParsePrint() {
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
}  // namespace parse_internal

absl::StatusOr<Body> Parse(std::vector<Token> tokens) {
  return parse_internal::Parser(std::move(tokens)).ParseTemplate();
}

}  // namespace tandem::jinja
