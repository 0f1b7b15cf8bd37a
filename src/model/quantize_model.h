// Rewrites a GGUF model with its weight matrices in another type (as llama-quantize does, in its
// simplest form): every 2-D `.weight` matrix whose rows fit the type's blocks is converted; norms,
// biases and other tensors are copied as they are, and so is every metadata key.
//
// The rounding is the reference quantizers' (src/kernels, `ref::quantize_row`): round to nearest
// per block, without llama.cpp's search for better K-quant scales or an importance matrix. So Q8_0
// and Q4_0 match what llama-quantize writes closely, and the K types are a little worse than its
// Q4_K_S/Q5_K_S/Q6_K. It exists to judge quantization and kernels on the same model (coda
// perplexity --kl-divergence), not to replace llama-quantize for production files.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace coda {

struct QuantizeReport {
  int64_t converted = 0, copied = 0;     // tensors
  uint64_t bytes_in = 0, bytes_out = 0;  // tensor data
};

Expected<QuantizeReport> quantize_model_file(const std::string& in, const std::string& out, DType type,
                                             ThreadPool& pool);

}  // namespace coda
