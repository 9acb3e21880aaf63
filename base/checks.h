// SPDX-License-Identifier: Apache-2.0
// Error-propagation macros, in the spirit of NCCL's checks.h.
//
//   MAESTRO_RETURN_IF_ERROR(expr)        expr is a Status; returns it if not OK.
//   MAESTRO_ASSIGN_OR_RETURN(lhs, expr)  expr is a StatusOr<T>.
//   MAESTRO_FOREIGN_CHECK(api, expr, ok_expr, code, detail)
//       Calls a foreign C API (SQLite, HDF5, MPI, PMIx, NCCL, CUDA); when
//       `ok_expr` (which may use `rc`, the call's return value) is false,
//       returns a Status that names the API, the call, the return code, the
//       detail string and the file:line. Each module defines its own short
//       macro on top (SQLITE_CHECK, MPI_CHECK, PMIX_CHECK, NCCL_CHECK, ...).
#pragma once

#include <string>

#include "base/status.h"

#define MAESTRO_CONCAT_INNER_(a, b) a##b
#define MAESTRO_CONCAT_(a, b) MAESTRO_CONCAT_INNER_(a, b)

#define MAESTRO_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::maestro::Status maestro_status_ = (expr);        \
    if (!maestro_status_.ok()) return maestro_status_; \
  } while (0)

#define MAESTRO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

#define MAESTRO_ASSIGN_OR_RETURN(lhs, expr) \
  MAESTRO_ASSIGN_OR_RETURN_IMPL_(MAESTRO_CONCAT_(maestro_statusor_, __LINE__), lhs, expr)

namespace maestro::internal {
std::string ForeignErrorMessage(const char* api, const char* call, long long rc, const std::string& detail,
                                const char* file, int line);
}  // namespace maestro::internal

#define MAESTRO_FOREIGN_CHECK(api, expr, ok_expr, code, detail)                                                       \
  do {                                                                                                                \
    const auto rc = (expr);                                                                                           \
    if (!(ok_expr)) {                                                                                                 \
      return ::maestro::Status(code, ::maestro::internal::ForeignErrorMessage(api, #expr, static_cast<long long>(rc), \
                                                                              (detail), __FILE__, __LINE__));         \
    }                                                                                                                 \
  } while (0)
