// CODA_UNROLL: unroll the next loop completely. The SIMD kernels keep arrays of accumulators
// (one per token of a tile, per key row, per head) in registers, which the compilers do only when
// they unroll the loops over those arrays completely; GCC's size heuristics otherwise decline
// (the attention kernels' 16-24 accumulators once lived on the stack, at a third of the speed).
#pragma once

#if defined(__clang__)
#define CODA_UNROLL _Pragma("clang loop unroll(full)")
#else
#define CODA_UNROLL _Pragma("GCC unroll 16")
#endif
