// SPDX-License-Identifier: Apache-2.0
// Status and StatusOr<T>: how Maestro reports errors that callers are expected
// to handle (a missing file, a bad spec, a peer that timed out).
//
// Error policy (CONTRIBUTING.md): functions whose failure is an expected
// outcome return Status / StatusOr<T>; exceptions are only for programming
// errors and for errors that must end the whole operation. A Status message is
// written for the user: it names the place (file:line:col, rank, group, op) and,
// where there is one, the fix.
//
// Thread safety: Status and StatusOr are values; const methods may be called
// concurrently.
#pragma once

#include <cassert>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace maestro {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input from the user (spec, CLI flag, plan)
  kNotFound,            // a file, key, section that does not exist
  kAlreadyExists,       // e.g. a port or a directory already in use
  kFailedPrecondition,  // the system is not in a state to do this
  kCorruption,          // stored data failed a checksum or a schema check
  kIOError,             // the OS said no
  kTimeout,             // a peer or a service did not answer in time
  kUnavailable,         // a service (PMIx, Slurm, a GPU) is not there
  kAborted,             // stopped on purpose (a signal, a peer failed)
  kInternal,            // a bug in Maestro
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status Timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: spec.toml:3:7: unknown key 'nmae' (did you mean 'name'?)"
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Thrown by ValueOrDie() and by code that must end the operation.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status) : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "StatusOr built from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  // REQUIRES: ok()
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  // The value, or throws Error with the status.
  T ValueOrDie() && {
    if (!ok()) throw Error(std::get<Status>(v_));
    return std::get<T>(std::move(v_));
  }

 private:
  std::variant<Status, T> v_;
};

}  // namespace maestro
