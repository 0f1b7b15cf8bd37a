// Element-wise and row-wise operations of the transformer forward pass (float32).
#pragma once

#include <cstdint>

namespace coda {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]
void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps);

// In-place softmax over n values; -inf entries get probability 0.
void softmax(float* x, int64_t n);

// a[i] = silu(a[i]) * b[i]  (SwiGLU: silu(gate) * up)
void swiglu(float* a, const float* b, int64_t n);

// Rotary position embedding over the first `n_rot` dims of each of `n_heads` heads of size
// `head_dim`, at position `pos`. `inv_freq[i]` (i < n_rot/2) is the angle per position of pair i.
// `neox` pairs element i with i + n_rot/2 (GPT-NeoX/Qwen2 style); otherwise pairs (2i, 2i+1)
// (the GGUF "llama" layout, whose Q/K rows the converter permuted to make this equivalent).
void rope(float* x, int n_heads, int head_dim, int n_rot, int64_t pos, const float* inv_freq, bool neox);

}  // namespace coda
