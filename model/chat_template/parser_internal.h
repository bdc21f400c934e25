// The chat-template parser's recursive descent, shared by parser.cc (token stream and statements)
// and parser_expr.cc (expressions); internal to model/chat_template — include parser.h instead.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/chat_template/ast.h"
#include "model/chat_template/lexer.h"

namespace tandem::jinja::parse_internal {

ExprPtr NewExpr(ExprKind kind, int line);
StmtPtr NewStmt(StmtKind kind, int line);

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}
  absl::StatusOr<Body> ParseTemplate();

 private:
  // ---- token stream ------------------------------------------------------------------------
  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[i_ + 1 < t_.size() ? i_ + 1 : i_]; }
  void next();
  bool IsName(const Token& t, absl::string_view n) const;
  bool IsName(absl::string_view n) const { return IsName(cur(), n); }
  bool IsOp(absl::string_view op) const;
  bool SkipName(absl::string_view n);
  bool SkipOp(absl::string_view op);
  std::string TokenText(const Token& t) const;
  absl::Status Fail(absl::string_view msg) const;
  absl::Status Unexpected() const;
  absl::Status ExpectOp(absl::string_view op);
  absl::Status ExpectType(TokenType type);
  absl::StatusOr<std::string> ExpectName();
  absl::Status ExpectName(absl::string_view n);

  // ---- statements --------------------------------------------------------------------------
  // Parses until a block tag whose name is in `end` (left as the current token).
  absl::StatusOr<Body> Subparse(std::initializer_list<absl::string_view> end);

  // Skips an optional colon, expects the block end and parses the body up to `end`.
  absl::StatusOr<Body> ParseStatements(std::initializer_list<absl::string_view> end,
                                       bool drop_needle);
  absl::StatusOr<StmtPtr> ParseStatement();
  absl::StatusOr<StmtPtr> ParseIf();
  absl::StatusOr<StmtPtr> ParseFor();
  absl::StatusOr<StmtPtr> ParseSet();
  absl::Status ParseSignature(Stmt* s);
  absl::StatusOr<StmtPtr> ParseMacro();
  absl::StatusOr<StmtPtr> ParseCallBlock();
  absl::StatusOr<StmtPtr> ParseFilterBlock();
  absl::StatusOr<StmtPtr> ParseWith();
  absl::StatusOr<StmtPtr> ParsePrint();

  // ---- expressions -------------------------------------------------------------------------
  absl::StatusOr<ExprPtr> ParseAssignTarget(bool with_tuple, bool name_only,
                                            std::initializer_list<absl::string_view> extra_end,
                                            bool with_namespace);
  static bool CanAssign(const Expr& e);
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr);
  absl::StatusOr<ExprPtr> ParseCondExpr();
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> Binary(ExprPtr left, std::string op, ExprPtr right, int line);
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary(bool with_namespace);
  bool IsTupleEnd(std::initializer_list<absl::string_view> extra_end) const;
  absl::StatusOr<ExprPtr> ParseTuple(bool simplified, bool with_condexpr,
                                     std::initializer_list<absl::string_view> extra_end,
                                     bool with_namespace, bool explicit_parentheses = false);
  absl::StatusOr<ExprPtr> ParseList();
  absl::StatusOr<ExprPtr> ParseDict();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscribed();
  absl::Status ParseCallArgs(Expr* node);
  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee);
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);

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

}  // namespace tandem::jinja::parse_internal
