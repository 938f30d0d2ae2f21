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
#include <string_view>
#include <utility>
#include <vector>

namespace mlt {

/// `text` safe to print on a terminal: bytes that are not UTF-8 (a
/// damaged file's, which a parser's message may quote) and control
/// characters other than newlines become "\xNN".
inline std::string printableText(std::string text) {
  auto continuation = [&](size_t at) {
    return at < text.size() && (uint8_t(text[at]) & 0xC0) == 0x80;
  };
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const uint8_t c = uint8_t(text[i]);
    // The length of the UTF-8 sequence that starts here (0: none), with
    // overlong forms, surrogates and code points past U+10FFFF refused.
    size_t length = 0;
    if (c >= 0x20 && c < 0x7F)
      length = 1;
    else if (c == '\n')
      length = 1;
    else if (c >= 0xC2 && c <= 0xDF && continuation(i + 1))
      length = 2;
    else if (c >= 0xE0 && c <= 0xEF && continuation(i + 1) &&
             continuation(i + 2)) {
      const uint8_t next = uint8_t(text[i + 1]);
      if (!(c == 0xE0 && next < 0xA0) && !(c == 0xED && next >= 0xA0))
        length = 3;
    } else if (c >= 0xF0 && c <= 0xF4 && continuation(i + 1) &&
               continuation(i + 2) && continuation(i + 3)) {
      const uint8_t next = uint8_t(text[i + 1]);
      if (!(c == 0xF0 && next < 0x90) && !(c == 0xF4 && next >= 0x90))
        length = 4;
    }
    if (length) {
      out.append(text, i, length);
      i += length;
      continue;
    }
    static const char digits[] = "0123456789abcdef";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
    ++i;
  }
  return out;
}

/// `text`, a string a message quotes from its input (a file's field), with
/// its newlines as "\n": a message stays one line whatever the file held.
inline std::string quotedLine(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

/// Success, or a failure with a message that names the problem: one line
/// (a few, one per problem, where several are reported at once), printable
/// (printableText) whatever bytes went into it.
class [[nodiscard]] Status {
public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.message_ = printableText(std::move(message));
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
      message_ = printableText(context) + ": " + *message_;
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
