// Chooses the kernel table once, from what the CPU reports.
#include <cstdlib>
#include <cstring>

#include "kernels/kernels.h"

namespace coda {

const KernelTable* avx2_kernels_unchecked();  // dot_avx2.cpp

const KernelTable* avx2_kernels() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok ? avx2_kernels_unchecked() : nullptr;
#else
  return nullptr;
#endif
}

const KernelTable& kernels() {
  static const KernelTable* chosen = [] {
    const char* force = std::getenv("CODA_KERNELS");
    if (force != nullptr && std::strcmp(force, "scalar") == 0) return &scalar_kernels();
    const KernelTable* fast = avx2_kernels();
    return fast != nullptr ? fast : &scalar_kernels();
  }();
  return *chosen;
}

}  // namespace coda
