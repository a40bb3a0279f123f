// Engine status: an error kind plus a message that names graph / op / tensor.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>
#include <utility>

namespace qnn_delegate {
namespace engine {

enum class ErrorKind {
  Ok = 0,
  InvalidProgram,
  InvalidArgument,
  NotSupported,
  MemoryAllocationFailed,
  Internal,
};

struct Status {
  ErrorKind kind = ErrorKind::Ok;
  std::string message;

  bool ok() const { return kind == ErrorKind::Ok; }
  static Status Ok() { return Status(); }
};

// printf-style error constructor.
inline Status make_error(ErrorKind kind, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

inline Status make_error(ErrorKind kind, const char* fmt, ...) {
  char buf[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  Status s;
  s.kind = kind;
  s.message = buf;
  return s;
}

#define QNN_RETURN_IF_ERROR(expr)               \
  do {                                          \
    ::qnn_delegate::engine::Status _s = (expr); \
    if (!_s.ok()) return _s;                    \
  } while (0)

}  // namespace engine
}  // namespace qnn_delegate
