// Validate() (parser.h): walks a parsed template and refuses, before any render, what would
// parse but not evaluate — unknown filters, tests, methods and global functions.
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/builtins.h"
#include "model/chat_template/parser.h"

namespace tandem::jinja {
namespace {

class Validator {
 public:
  absl::Status Run(const Body& body) {
    CollectAssigned(body);
    return CheckBody(body);
  }

 private:
  void CollectTarget(const Expr& e) {
    if (e.kind == ExprKind::kName) assigned_.insert(e.name);
    for (const ExprPtr& item : e.items) {
      if (item) CollectTarget(*item);
    }
  }

  void CollectAssigned(const Body& body) {
    for (const StmtPtr& s : body) {
      if (s->target) CollectTarget(*s->target);
      for (const ExprPtr& t : s->targets) CollectTarget(*t);
      if (s->kind == StmtKind::kMacro) assigned_.insert(s->name);
      for (const std::string& p : s->params) assigned_.insert(p);
      if (s->kind == StmtKind::kMacro || s->kind == StmtKind::kCallBlock) {
        assigned_.insert("varargs");
        assigned_.insert("kwargs");
      }
      if (s->kind == StmtKind::kCallBlock) assigned_.insert("caller");
      CollectAssigned(s->body);
      CollectAssigned(s->else_body);
    }
  }

  absl::Status CheckBody(const Body& body) {
    for (const StmtPtr& s : body) {
      for (const Expr* e : {s->expr.get(), s->target.get(), s->cond.get()}) {
        if (e) TANDEM_RETURN_IF_ERROR(CheckExpr(*e));
      }
      for (const auto* list : {&s->defaults, &s->targets, &s->values}) {
        for (const ExprPtr& e : *list) TANDEM_RETURN_IF_ERROR(CheckExpr(*e));
      }
      TANDEM_RETURN_IF_ERROR(CheckBody(s->body));
      TANDEM_RETURN_IF_ERROR(CheckBody(s->else_body));
    }
    return absl::OkStatus();
  }

  absl::Status CheckExpr(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kFilter:
        if (!IsKnownFilter(e.name)) {
          return absl::InvalidArgumentError(
              absl::StrCat("unsupported filter '", e.name, "' at line ", e.line));
        }
        break;
      case ExprKind::kTest:
        if (!IsKnownTest(e.name)) {
          return absl::InvalidArgumentError(
              absl::StrCat("unsupported test '", e.name, "' at line ", e.line));
        }
        break;
      case ExprKind::kCall:
        if (e.a->kind == ExprKind::kGetattr && !IsKnownMethod(e.a->name)) {
          return absl::InvalidArgumentError(
              absl::StrCat("unsupported method '", e.a->name, "' at line ", e.line));
        }
        if (e.a->kind == ExprKind::kName && !IsKnownGlobalFunction(e.a->name) &&
            !assigned_.contains(e.a->name)) {
          return absl::InvalidArgumentError(
              absl::StrCat("unsupported function '", e.a->name, "' at line ", e.line));
        }
        break;
      case ExprKind::kName:
        if (IsRefusedGlobal(e.name) && !assigned_.contains(e.name)) {
          return absl::InvalidArgumentError(
              absl::StrCat("unsupported global '", e.name, "' at line ", e.line));
        }
        break;
      default:
        break;
    }
    for (const Expr* child :
         {e.a.get(), e.b.get(), e.c.get(), e.dyn_args.get(), e.dyn_kwargs.get()}) {
      if (child) TANDEM_RETURN_IF_ERROR(CheckExpr(*child));
    }
    for (const ExprPtr& item : e.items) {
      if (item) TANDEM_RETURN_IF_ERROR(CheckExpr(*item));
    }
    for (const Keyword& k : e.kwargs) TANDEM_RETURN_IF_ERROR(CheckExpr(*k.value));
    return absl::OkStatus();
  }

  absl::flat_hash_set<std::string> assigned_;
};

}  // namespace

absl::Status Validate(const Body& body) { return Validator().Run(body); }

}  // namespace tandem::jinja
