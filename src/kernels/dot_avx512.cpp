// The same kernels built for AVX-512 (F, BW, VL, VNNI): 256-bit code with 32 registers and dpbusd.
// Chosen at run time only on CPUs that report all four (dispatch.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/fp16.h"
#include "kernels/attn_bf16.h"
#include "kernels/kernels.h"
#include "kernels/repack.h"
#include "kernels/unroll.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif
#define CODA_SIMD_NAME "avx512"
#define CODA_SIMD_ENTRY avx512_kernels_unchecked
#define CODA_SIMD_VNNI 1
#include "kernels/dot_simd.inc"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
