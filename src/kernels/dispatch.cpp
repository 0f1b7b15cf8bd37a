// Chooses the kernel table once, from what the CPU reports.
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "kernels/kernels.h"

namespace coda {

const KernelTable* avx2_kernels_unchecked();    // dot_avx2.cpp
const KernelTable* avx512_kernels_unchecked();  // dot_avx512.cpp

#if defined(__x86_64__)
// F16C is CPUID leaf 1, ECX bit 29 (not every compiler's __builtin_cpu_supports knows "f16c").
static bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
}
#endif

const KernelTable* avx2_kernels() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  return ok ? avx2_kernels_unchecked() : nullptr;
#else
  return nullptr;
#endif
}

const KernelTable* avx512_kernels() {
#if defined(__x86_64__)
  static const bool ok = avx2_kernels() != nullptr && __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("avx512vnni");
  return ok ? avx512_kernels_unchecked() : nullptr;
#else
  return nullptr;
#endif
}

std::vector<const KernelTable*> available_kernels() {
  std::vector<const KernelTable*> out{&scalar_kernels()};
  if (avx2_kernels() != nullptr) out.push_back(avx2_kernels());
  if (avx512_kernels() != nullptr) out.push_back(avx512_kernels());
  return out;
}

const KernelTable& kernels() {
  static const KernelTable* chosen = [] {
    // CODA_KERNELS=scalar|avx2 caps the level (comparisons, debugging); the default is the best.
    const char* force = std::getenv("CODA_KERNELS");
    const bool scalar_only = force != nullptr && std::strcmp(force, "scalar") == 0;
    const bool avx2_only = force != nullptr && std::strcmp(force, "avx2") == 0;
    if (scalar_only) return &scalar_kernels();
    if (!avx2_only && avx512_kernels() != nullptr) return avx512_kernels();
    const KernelTable* fast = avx2_kernels();
    return fast != nullptr ? fast : &scalar_kernels();
  }();
  return *chosen;
}

}  // namespace coda
