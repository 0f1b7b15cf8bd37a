// Prefetching the next unit of weights while a GEMM tile computes (gemm_avx2.cpp, gemm_avx512.cpp).
//
// A tile passes over one unit of weights (a packed group, or a pair of them) once per few tokens.
// With a short batch (a few decoding streams, a short prompt) the first pass is bound by how fast
// the unit streams in from memory and the later passes by arithmetic, one after the other. Each
// pass therefore prefetches its share of the *next* unit into L2, block by block, so that the
// weights of the next unit arrive while this one is computed: 1B Q4_K_M, Intel Xeon, 2 threads,
// prefill of 16 and 32 tokens +17-18%, 16 decoding streams +19% (docs/performance.md, stop 47).
// Past 64 tokens the later passes are many and the hints cost more than they hide (Q8_0 prefill
// of 256 tokens lost 10% with them), so longer batches go without.
//
// Internal linkage on purpose: each kernel file is compiled for its own instruction set, and a
// shared inline definition could be taken from the wrong one at link time.
#pragma once

#include <cstdint>

namespace coda {
namespace {

constexpr int64_t kPrefetchMaxTokens = 64;

// Which of run_tiles' passes over the current unit is running; passes == 0 turns the hints off.
struct PassPlan {
  int pass = 0;
  int passes = 0;
};
thread_local PassPlan tl_pass_plan;

// Sets the plan for a unit that `passes` tile calls will cover, given the batch's token count.
inline void plan_passes(int64_t n_tokens, int64_t passes) {
  tl_pass_plan.pass = 0;
  tl_pass_plan.passes = n_tokens > 1 && n_tokens <= kPrefetchMaxTokens ? static_cast<int>(passes) : 0;
}

// Prefetches this pass's share of the lines of a block of kBlockBytes at p (the same block of the
// next unit): over all passes every line is asked for once.
template <int64_t kBlockBytes>
inline void prefetch_next_share(const uint8_t* p) {
  const int passes = tl_pass_plan.passes;
  if (passes == 0) return;
  constexpr int64_t kLines = (kBlockBytes + 63) / 64;
  const int64_t l0 = kLines * tl_pass_plan.pass / passes, l1 = kLines * (tl_pass_plan.pass + 1) / passes;
  // A volatile asm, not _mm_prefetch: a loop whose only work is prefetch builtins counts as having
  // no effect, and C++ lets the compiler delete such a loop when its trip count is not constant
  // (GCC 12 at -O2 removed this one whole, plan and all).
  for (int64_t l = l0; l < l1; ++l) asm volatile("prefetcht1 %0" : : "m"(p[64 * l]));
}

// One-token tiles stream each block once, prefetching a fixed distance ahead. Asking for a block's
// lines all at once, at the top of its loop, queues dozens of requests behind the fill buffers and
// stalls the loads that follow; step s of the block's kSteps asks for its own few lines instead
// (AVX-512 Q4_K_M decode on the Intel Xeon, 2 threads: 28.1-28.9 tokens/s at once, 30.4-30.8
// spread). A volatile asm for the same reason as above. Into L2, as kDecodePrefetchBytes explains.
template <int64_t kBytes, int kSteps>
inline void prefetch_block_step(const uint8_t* p, int step) {
  constexpr int64_t kLines = (kBytes + 63) / 64;
  constexpr int64_t kPer = (kLines + kSteps - 1) / kSteps;
  for (int64_t l = kPer * step; l < kPer * (step + 1) && l < kLines; ++l)
    asm volatile("prefetcht1 %0" : : "m"(p[64 * l]));
}

}  // namespace
}  // namespace coda
