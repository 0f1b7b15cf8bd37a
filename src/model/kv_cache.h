// Per-sequence key/value cache (float32), with rollback.
//
// Layout per layer: K and V as [capacity][kv_dim] rows, so position p of a layer is one
// contiguous row. `truncate(n)` forgets every position >= n; later tokens simply overwrite them,
// which is what KV-cache rollback for repair and prompt reuse need.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "model/config.h"

namespace coda {

class KvCache {
 public:
  // Allocates room for `capacity` tokens; a size the machine cannot hold is an error that says how
  // much was asked for, not an exception.
  static Expected<KvCache> create(const ModelConfig& c, int64_t capacity);
  // Bytes a cache of `capacity` tokens needs (for budgets and messages).
  static double bytes_needed(const ModelConfig& c, int64_t capacity);

  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  int64_t bytes() const { return 2 * elems_ * static_cast<int64_t>(sizeof(float)); }

  // Rolls back to the first n positions; n must not exceed size().
  Status truncate(int64_t n);
  void clear() { size_ = 0; }

  float* k(int64_t layer, int64_t pos) { return k_.get() + (layer * capacity_ + pos) * kv_dim_; }
  float* v(int64_t layer, int64_t pos) { return v_.get() + (layer * capacity_ + pos) * kv_dim_; }
  int64_t kv_dim() const { return kv_dim_; }

  // Makes this cache hold the first n positions of `src` (a model of the same shape): prefix reuse.
  Status copy_prefix(const KvCache& src, int64_t n);
  int64_t n_layers() const { return capacity_ > 0 && kv_dim_ > 0 ? elems_ / (capacity_ * kv_dim_) : 0; }
  const float* k(int64_t layer, int64_t pos) const { return k_.get() + (layer * capacity_ + pos) * kv_dim_; }
  const float* v(int64_t layer, int64_t pos) const { return v_.get() + (layer * capacity_ + pos) * kv_dim_; }

  // Called by the forward pass once a batch's K/V rows are written.
  void commit(int64_t n) { size_ += n; }

 private:
  KvCache(const ModelConfig& c, int64_t capacity);

  int64_t capacity_;
  int64_t kv_dim_;
  int64_t size_ = 0;
  int64_t elems_;
  // Not zero-filled: a position is always written before it is read, and untouched pages of a
  // large cache cost no memory (a request's cache is sized for its prompt + max_tokens).
  std::unique_ptr<float[]> k_;
  std::unique_ptr<float[]> v_;
};

}  // namespace coda
