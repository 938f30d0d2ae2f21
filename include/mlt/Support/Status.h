//===- Status.h - errors of plain-C++ code ----------------------*- C++ -*-===//
//
// Part of mlt. The runtime, the plan library and the plain-C++ analyses do
// not link LLVM, so they carry errors in their own small types: `Status` (ok,
// or a one-line message) and `StatusOr<T>`. Library code returns them to its
// caller; only the tools decide to print and exit.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_SUPPORT_STATUS_H
#define MLT_SUPPORT_STATUS_H

#include <cassert>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace mlt {

/// Success, or a failure with a one-line message that names the problem.
class [[nodiscard]] Status {
public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.message_ = std::move(message);
    return s;
  }

  bool isOk() const { return !message_.has_value(); }
  explicit operator bool() const { return isOk(); }
  const std::string &message() const {
    assert(!isOk() && "no message in an ok status");
    return *message_;
  }

  /// Prefixes the message with `context + ": "`; ok stays ok.
  Status withContext(const std::string &context) && {
    if (!isOk())
      message_ = context + ": " + *message_;
    return std::move(*this);
  }

private:
  std::optional<std::string> message_;
};

/// Builds an error Status from streamable parts: `errorf("bad size ", n)`.
template <typename... Parts>
Status errorf(const Parts &...parts) {
  std::ostringstream os;
  (os << ... << parts);
  return Status::error(os.str());
}

/// "[2, 3, 4]": a shape or a list of integers, as messages print them.
inline std::string formatInts(const std::vector<int64_t> &values) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < values.size(); ++i)
    os << (i ? ", " : "") << values[i];
  os << ']';
  return os.str();
}

/// A value, or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
public:
  StatusOr(T value) : value_(std::move(value)) {}
  StatusOr(Status status) : status_(std::move(status)) {
    assert(!status_.isOk() && "StatusOr needs a value or an error");
  }

  bool isOk() const { return value_.has_value(); }
  explicit operator bool() const { return isOk(); }
  const Status &status() const { return status_; }
  Status takeStatus() { return std::move(status_); }

  T &operator*() { return *value_; }
  const T &operator*() const { return *value_; }
  T *operator->() { return &*value_; }
  const T *operator->() const { return &*value_; }

private:
  std::optional<T> value_;
  Status status_;
};

} // namespace mlt

/// Returns the Status of `expr` from the enclosing function if it failed.
#define MLT_RETURN_IF_ERROR(expr)                                              \
  do {                                                                         \
    ::mlt::Status mltStatus_ = (expr);                                         \
    if (!mltStatus_.isOk())                                                    \
      return mltStatus_;                                                       \
  } while (0)

#endif // MLT_SUPPORT_STATUS_H
