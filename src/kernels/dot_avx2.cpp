// AVX2 + FMA + F16C kernels. They are compiled for those extensions through a target pragma (not
// file-wide flags), so no inline function shared with the rest of the program is ever emitted with
// AVX2 instructions; they run only after a CPU check (dispatch.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
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
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#define CODA_SIMD_NAME "avx2"
#define CODA_SIMD_ENTRY avx2_kernels_unchecked
#include "kernels/dot_simd.inc"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
