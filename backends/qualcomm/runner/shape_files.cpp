#include "backends/qualcomm/runner/shape_files.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace qnn_delegate {
namespace runner {

bool read_shape_file(const std::string& path, const char* flag, std::vector<Shape>& out) {
  std::ifstream f(path);
  if (!f) {
    std::fprintf(stderr, "error: %s '%s' cannot be read\n", flag, path.c_str());
    return false;
  }
  out.clear();
  std::string line;
  size_t number = 0;
  while (std::getline(f, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    Shape shape;
    const char* p = line.c_str();
    while (*p) {
      while (*p == ' ' || *p == ',' || *p == '\t') ++p;
      if (!*p) break;
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(p, &end, 10);
      if (end == p || errno != 0 || v < 0 || v > INT32_MAX) {
        std::fprintf(stderr, "error: %s '%s' line %zu: '%s' is not a list of dims (non-negative integers)\n", flag,
                     path.c_str(), number, line.c_str());
        return false;
      }
      shape.push_back(static_cast<int32_t>(v));
      p = end;
    }
    out.push_back(std::move(shape));
  }
  if (out.empty()) {
    std::fprintf(stderr, "error: %s '%s' lists no shape\n", flag, path.c_str());
    return false;
  }
  return true;
}

bool shape_bytes(const Shape& shape, size_t element_size, size_t& out) {
  size_t n = element_size;
  for (int32_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<size_t>(d), &n)) return false;
  }
  out = n;
  return true;
}

}  // namespace runner
}  // namespace qnn_delegate
