// Status and Result<T>: how every fallible kolo function reports failure.
//
// An OK Status is one enum value and an empty string; errors carry a message
// that is meant for the user (it names the tensor, the ranks and the values).
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace kolo {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // a bad input on this rank (caught at enqueue)
  kPreconditionFailed = 2,  // ranks disagree (mismatch), or the runtime is not in a usable state
  kAborted = 3,             // the runtime shut down or was torn down before the work ran
  kInternal = 4,            // MPI / NCCL / CUDA failure
  kUnimplemented = 5,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return Status(StatusCode::kInvalidArgument, std::move(m));
  }
  static Status PreconditionFailed(std::string m) {
    return Status(StatusCode::kPreconditionFailed, std::move(m));
  }
  static Status Aborted(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
  static Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
  static Status Unimplemented(std::string m) {
    return Status(StatusCode::kUnimplemented, std::move(m));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or an error Status. Accessing value() of an error is a programmer error.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace kolo

// Returns early from the enclosing function when `expr` yields an error Status.
#define KOLO_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::kolo::Status kolo_status_ = (expr);        \
    if (!kolo_status_.ok()) return kolo_status_; \
  } while (0)

// `KOLO_ASSIGN_OR_RETURN(T x, ResultExpr())` declares (or assigns) x from the
// value of a Result, or returns its error Status from the enclosing function.
#define KOLO_ASSIGN_OR_RETURN(lhs, expr) \
  KOLO_ASSIGN_OR_RETURN_IMPL_(KOLO_CONCAT_(kolo_result_, __LINE__), lhs, expr)
#define KOLO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
#define KOLO_CONCAT_(a, b) KOLO_CONCAT_INNER_(a, b)
#define KOLO_CONCAT_INNER_(a, b) a##b
