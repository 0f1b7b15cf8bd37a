// Per-sequence key/value cache, with rollback. Keys and values are stored as the model's
// configuration says (ModelConfig::kv_type_k/v: F16 by default, or F32).
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
  int64_t bytes() const { return elems_ * (kv_type_bytes(k_type_) + kv_type_bytes(v_type_)); }
  KvType k_type() const { return k_type_; }
  KvType v_type() const { return v_type_; }

  // Rolls back to the first n positions; n must not exceed size().
  Status truncate(int64_t n);
  void clear() { size_ = 0; }

  // The row of position `pos` in `layer`, as bytes of k_type() / v_type() elements.
  uint8_t* k(int64_t layer, int64_t pos) { return k_.get() + (layer * capacity_ + pos) * kv_dim_ * k_elem_; }
  uint8_t* v(int64_t layer, int64_t pos) { return v_.get() + (layer * capacity_ + pos) * kv_dim_ * v_elem_; }
  const uint8_t* k(int64_t layer, int64_t pos) const {
    return k_.get() + (layer * capacity_ + pos) * kv_dim_ * k_elem_;
  }
  const uint8_t* v(int64_t layer, int64_t pos) const {
    return v_.get() + (layer * capacity_ + pos) * kv_dim_ * v_elem_;
  }
  int64_t kv_dim() const { return kv_dim_; }

  // Makes this cache hold the first n positions of `src` (a model of the same shape): prefix reuse.
  Status copy_prefix(const KvCache& src, int64_t n);
  int64_t n_layers() const { return capacity_ > 0 && kv_dim_ > 0 ? elems_ / (capacity_ * kv_dim_) : 0; }

  // Called by the forward pass once a batch's K/V rows are written.
  void commit(int64_t n) { size_ += n; }

 private:
  KvCache(const ModelConfig& c, int64_t capacity);

  int64_t capacity_;
  int64_t kv_dim_;
  int64_t size_ = 0;
  int64_t elems_;  // per K (and per V)
  KvType k_type_, v_type_;
  int64_t k_elem_, v_elem_;  // bytes per element
  // Not zero-filled: a position is always written before it is read, and untouched pages of a
  // large cache cost no memory (a request's cache is sized for its prompt + max_tokens).
  std::unique_ptr<uint8_t[]> k_;
  std::unique_ptr<uint8_t[]> v_;
};

}  // namespace coda
