// Status and Result<T>: how Ferry reports failures that are not bugs.
//
// Anything that can fail for reasons outside our control (I/O, peers, bad images,
// bad requests) returns a Status or a Result<T>. Bugs abort through FERRY_CHECK.
// The codes are few on purpose and are stable numbers, so they survive the wire:
//   kUnavailable / kResourceExhausted  -> transient: retry or back off;
//   kOutOfRange                        -> end of a stream (no more batches);
//   everything else                    -> permanent for this request.
// Header-only, because the client library is header-only.
#ifndef FERRY_STATUS_H_
#define FERRY_STATUS_H_

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace ferry {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kOutOfRange = 3,
  kUnavailable = 4,
  kResourceExhausted = 5,
  kDataLoss = 6,
  kUnimplemented = 7,
  kInternal = 8,
  kPermissionDenied = 9,
  kUnauthenticated = 10,
  kFailedPrecondition = 11,
  kCancelled = 12,
};

inline std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kDataLoss: return "DataLoss";
    case StatusCode::kUnimplemented: return "Unimplemented";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kPermissionDenied: return "PermissionDenied";
    case StatusCode::kUnauthenticated: return "Unauthenticated";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kCancelled: return "Cancelled";
  }
  return "Unknown";
}

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsOutOfRange() const { return code_ == StatusCode::kOutOfRange; }
  // True for failures worth retrying after a back-off.
  bool IsTransient() const {
    return code_ == StatusCode::kUnavailable || code_ == StatusCode::kResourceExhausted;
  }

  std::string ToString() const {
    if (ok()) return "OK";
    std::string s(StatusCodeName(code_));
    s += ": ";
    s += message_;
    return s;
  }

  // Returns a copy with `context` prepended to the message ("context: message").
  Status WithContext(std::string_view context) const {
    if (ok()) return *this;
    std::string m(context);
    m += ": ";
    m += message_;
    return Status(code_, std::move(m));
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Result<T> holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : v_(std::in_place_index<1>, std::move(status)) {  // NOLINT
    if (std::get<1>(v_).ok()) std::abort();  // a Result must not hold an OK status without a value
  }

  bool ok() const { return v_.index() == 0; }
  Status status() const { return ok() ? Status() : std::get<1>(v_); }

  // REQUIRES: ok()
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ferry

#define FERRY_RETURN_IF_ERROR(expr)         \
  do {                                      \
    ::ferry::Status _ferry_st = (expr);     \
    if (!_ferry_st.ok()) return _ferry_st;  \
  } while (0)

#define FERRY_CONCAT_INNER_(a, b) a##b
#define FERRY_CONCAT_(a, b) FERRY_CONCAT_INNER_(a, b)
#define FERRY_ASSIGN_OR_RETURN(lhs, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL_(FERRY_CONCAT_(_ferry_res_, __LINE__), lhs, expr)
#define FERRY_ASSIGN_OR_RETURN_IMPL_(res, lhs, expr) \
  auto res = (expr);                                 \
  if (!res.ok()) return res.status();                \
  lhs = std::move(res).value()

#endif  // FERRY_STATUS_H_
