// Early-return helpers for absl::Status / absl::StatusOr. abseil 20220623 does not ship public
// macros for this, so Tandem defines exactly these two and nothing else.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TANDEM_CONCAT_INNER_(a, b) a##b
#define TANDEM_CONCAT_(a, b) TANDEM_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function if not OK.
#define TANDEM_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status tandem_status_ = (expr);          \
    if (!tandem_status_.ok()) return tandem_status_; \
  } while (0)

// `lhs` = value of `rexpr` (an absl::StatusOr<T>); returns the status if not OK.
#define TANDEM_ASSIGN_OR_RETURN(lhs, rexpr) \
  TANDEM_ASSIGN_OR_RETURN_IMPL_(TANDEM_CONCAT_(tandem_statusor_, __LINE__), lhs, rexpr)
#define TANDEM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                  \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
