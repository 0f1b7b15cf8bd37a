// Per-sequence key/value cache, with rollback. Keys and values are stored as the model's
// configuration says (ModelConfig::kv_type_k/v: F16 by default, F32, or Q8_0).
//
// Layout: per layer and key/value head, one contiguous region of the head's positions, so attention
// walks one head over thousands of positions as one stream (position-major rows, [capacity][kv_dim],
// read 2 cache lines of every 1 KiB, which the hardware prefetchers follow poorly: decode at depth
// 4,096 streamed the F16 cache at about a third of the machine's bandwidth).
// - V: [layer][kv_head][slots][head_dim], one row of head_dim elements per position (BF16 and Q8_0
//   interleave pairs of positions; Q8_0 keeps its scales after a head's values, kernels.h).
// - K: [layer][kv_head][slots / kKeyBlock][head_dim][kKeyBlock], blocks of 16 positions stored
//   transposed (kernels.h, key_block_index), so the score kernels load dimension d of 16 keys at once.
//   A Q8_0 block holds its int8 values in runs of 4 dimensions and then its scales
//   (q8_key_block_bytes); Q8_0 values interleave each pair of positions' int8 values
//   (q8_value_offset), and a head's scales follow its values, block-major (v_scales).
//   BF16 values interleave each pair of positions element by element (bf16_value_index).
// Every row of one position of one head takes kv_row_bytes(type, head_dim) bytes.
// `slots` is the capacity rounded up to whole key blocks. `truncate(n)` forgets every position >= n;
// later tokens simply overwrite them, which is what KV-cache rollback for repair and prompt reuse
// need.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/config.h"

namespace coda {

class KvCache {
 public:
  // Allocates room for `capacity` tokens; a size the machine cannot hold is an error that says how
  // much was asked for, not an exception.
  static Expected<KvCache> create(const ModelConfig& c, int64_t capacity);
  // Bytes a cache of `capacity` tokens needs (for budgets and messages).
  static double bytes_needed(const ModelConfig& c, int64_t capacity);
  // Bytes per token of context (budgets counted in tokens). Not bytes_needed(c, 1): a cache's
  // capacity rounds up to whole key blocks of 16 positions, which a one-token cache pays 16 times.
  static double bytes_per_token(const ModelConfig& c);

  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  int64_t bytes() const { return rows_ * (k_row_ + v_row_); }
  KvType k_type() const { return k_type_; }
  KvType v_type() const { return v_type_; }

  // Rolls back to the first n positions; n must not exceed size().
  Status truncate(int64_t n);
  void clear() { size_ = 0; }

  // Stores the head_dim values of key/value head `head` at position `pos` in `layer`; `x` holds
  // them already as one row of k_type() / v_type() (kv_row_bytes; Q8_0: quantize_kv_row_q8).
  void write_k(int64_t layer, int64_t head, int64_t pos, const uint8_t* x);
  void write_v(int64_t layer, int64_t head, int64_t pos, const uint8_t* x);
  // The key blocks of one head (key_block_index layout) and the value rows of one head (position
  // p at p * kv_row_bytes(v_type(), head_dim) bytes).
  const uint8_t* k_head(int64_t layer, int64_t head) const { return k_.get() + offset(layer, head) * k_row_; }
  const uint8_t* v_head(int64_t layer, int64_t head) const { return v_.get() + offset(layer, head) * v_row_; }
  // A Q8_0 value head's scales (kernels.h: after its values, block-major, value_scale_stride()
  // positions per block).
  const uint16_t* v_scales(int64_t layer, int64_t head) const {
    return reinterpret_cast<const uint16_t*>(v_head(layer, head) + slots_ * head_dim_);
  }
  int64_t value_scale_stride() const { return slots_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t n_kv_heads() const { return head_dim_ > 0 ? kv_dim_ / head_dim_ : 0; }

  // Makes this cache hold the first n positions of `src` (a model of the same shape): prefix reuse.
  // With a pool, the heads are copied in parallel: a fresh cache's pages fault in as the copy
  // first writes them, and the kernel's zeroing of those pages, not the copy, is most of the time
  // (33 MB, 1,000 positions of a 1B model: about 33 ms on one Zen 3 core), so it splits over cores.
  Status copy_prefix(const KvCache& src, int64_t n, ThreadPool* pool = nullptr);
  int64_t n_layers() const { return n_layers_; }

  // Called by the forward pass once a batch's K/V rows are written.
  void commit(int64_t n) { size_ += n; }

 private:
  KvCache(const ModelConfig& c, int64_t capacity);
  // In rows: the first row of a head's region.
  int64_t offset(int64_t layer, int64_t head) const { return (layer * n_kv_heads() + head) * slots_; }

  int64_t capacity_;
  int64_t slots_;  // capacity_ rounded up to whole key blocks
  int64_t n_layers_;
  int64_t kv_dim_;
  int64_t head_dim_;
  int64_t size_ = 0;
  int64_t rows_;  // per K (and per V): layers x slots x heads
  KvType k_type_, v_type_;
  int64_t k_row_, v_row_;  // bytes per row of head_dim values
  // Not zero-filled: a position is always written before it is read, and untouched pages of a
  // large cache cost no memory (a request's cache is sized for its prompt + max_tokens).
  std::unique_ptr<uint8_t[]> k_;
  std::unique_ptr<uint8_t[]> v_;
};

}  // namespace coda
