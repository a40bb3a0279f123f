#include "backends/qualcomm/runtime/engine/Simd.h"

#include <cstdlib>
#include <cstring>

namespace qnn_delegate {
namespace engine {

namespace {

struct CpuLevels {
  SimdLevel level = SimdLevel::Plain;
  bool vnni = false;
};

CpuLevels read_cpu() {
  CpuLevels c;
#ifdef QNN_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  c.level = avx512 ? SimdLevel::Avx512 : (avx2 ? SimdLevel::Avx2 : SimdLevel::Plain);
  c.vnni = avx512 && __builtin_cpu_supports("avx512vnni");
#endif
  return c;
}

const CpuLevels& cpu() {
  static const CpuLevels c = read_cpu();
  return c;
}

const char* forced() { return std::getenv("QNN_HOST_ENGINE_KERNELS"); }

}  // namespace

SimdLevel cpu_simd_level() { return cpu().level; }

bool cpu_has_avx512_vnni() { return cpu().vnni; }

bool plain_kernels_forced() {
  const char* f = forced();
  return f != nullptr && std::strcmp(f, "plain") == 0;
}

SimdLevel simd_level() {
  const SimdLevel cpu_level = cpu_simd_level();
  const char* f = forced();
  if (f == nullptr) return cpu_level;
  if (std::strcmp(f, "plain") == 0) return SimdLevel::Plain;
  if (std::strcmp(f, "avx2") == 0 && cpu_level == SimdLevel::Avx512) return SimdLevel::Avx2;
  return cpu_level;
}

}  // namespace engine
}  // namespace qnn_delegate
