// Attention values over a BF16 value cache with AVX512_BF16's vdpbf16ps (attn_bf16.cpp). Zen 4
// and Zen 5 have the instruction, Ice Lake does not, so the AVX-512 table takes it only where the
// CPU reports it (KernelTable::attn_values_bf16 says what it computes).
#pragma once

#include <cstdint>

namespace coda {

bool cpu_has_avx512_bf16();
void attn_values_bf16_dpbf16(const float* p, int64_t G, int64_t s_stride, const uint16_t* v, int64_t len, int64_t hd,
                             float* out);

}  // namespace coda
