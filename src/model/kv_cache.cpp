#include "model/kv_cache.h"

#include <unistd.h>

#include <cstring>
#include <new>
#include <stdexcept>

#include "kernels/kernels.h"

namespace coda {

namespace {
int64_t slots_for(int64_t capacity) {
  return (capacity + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
}
}  // namespace

KvCache::KvCache(const ModelConfig& c, int64_t capacity)
    : capacity_(capacity),
      slots_(slots_for(capacity)),
      n_layers_(c.n_layers),
      kv_dim_(c.kv_dim()),
      head_dim_(c.head_dim),
      rows_(c.n_layers * slots_for(capacity) * c.n_kv_heads),
      k_type_(c.kv_type_k),
      v_type_(c.kv_type_v),
      k_row_(kv_row_bytes(c.kv_type_k, c.head_dim)),
      v_row_(kv_row_bytes(c.kv_type_v, c.head_dim)),
      k_(new uint8_t[static_cast<size_t>(rows_ * k_row_)]),
      v_(new uint8_t[static_cast<size_t>(rows_ * v_row_)]) {}

double KvCache::bytes_needed(const ModelConfig& c, int64_t capacity) {
  return static_cast<double>(c.n_layers) * static_cast<double>(slots_for(capacity)) *
         static_cast<double>(c.n_kv_heads) *
         static_cast<double>(kv_row_bytes(c.kv_type_k, c.head_dim) + kv_row_bytes(c.kv_type_v, c.head_dim));
}

double KvCache::bytes_per_token(const ModelConfig& c) {
  return static_cast<double>(c.n_layers) * static_cast<double>(c.n_kv_heads) *
         static_cast<double>(kv_row_bytes(c.kv_type_k, c.head_dim) + kv_row_bytes(c.kv_type_v, c.head_dim));
}

Expected<KvCache> KvCache::create(const ModelConfig& c, int64_t capacity) {
  const double bytes = bytes_needed(c, capacity);
  const std::string what = "the KV cache for " + std::to_string(capacity) + " tokens needs " +
                           std::to_string(bytes / (1024.0 * 1024 * 1024)).substr(0, 6) + " GiB";
  if (capacity <= 0) return Error("KV cache capacity must be at least 1 token");
  // More than the machine's memory would be zero-filled page by page until the OOM killer steps in.
  const double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (physical > 0 && bytes > physical)
    return Error(what + ", more than this machine's " + std::to_string(physical / (1024.0 * 1024 * 1024)).substr(0, 6) +
                 " GiB of memory; lower the context size (-c) or tokens (-n)");
  try {
    return KvCache(c, capacity);
  } catch (const std::bad_alloc&) {
    return Error(what + ", which cannot be allocated here; lower the context size (-c) or tokens (-n)");
  } catch (const std::length_error&) {
    return Error(what + ", which cannot be allocated here; lower the context size (-c) or tokens (-n)");
  }
}

Status KvCache::copy_prefix(const KvCache& src, int64_t n, ThreadPool* pool) {
  if (src.kv_dim_ != kv_dim_ || src.head_dim_ != head_dim_ || src.n_layers() != n_layers())
    return Error("KV cache copy: the caches belong to models of different shapes");
  if (src.k_type_ != k_type_ || src.v_type_ != v_type_)
    return Error("KV cache copy: the caches store keys and values as different types");
  if (n < 0 || n > src.size_ || n > capacity_)
    return Error("KV cache copy of " + std::to_string(n) + " positions: the source holds " + std::to_string(src.size_) +
                 ", this cache has room for " + std::to_string(capacity_));
  // Whole key blocks: the lanes past n in the last one are copied too, and never read as keys.
  // Values in whole pairs of positions (BF16 and Q8_0 caches interleave them).
  const int64_t k_bytes = slots_for(n) * k_row_, v_bytes = (n + 1) / 2 * 2 * v_row_;
  const int64_t heads = n_kv_heads();
  const auto copy = [&](int64_t u0, int64_t u1) {  // unit u: head u % heads of layer u / heads
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t l = u / heads, h = u % heads;
      std::memcpy(k_.get() + offset(l, h) * k_row_, src.k_head(l, h), static_cast<size_t>(k_bytes));
      if (v_type_ == KvType::Q8_0) {  // the values of n positions (whole pairs), then each block's scales
        const int64_t pairs = (n + 1) / 2 * 2;
        uint8_t* dst = v_.get() + offset(l, h) * v_row_;
        std::memcpy(dst, src.v_head(l, h), static_cast<size_t>(pairs * head_dim_));
        for (int64_t b = 0; b < head_dim_ / 32; ++b)
          std::memcpy(reinterpret_cast<uint16_t*>(dst + slots_ * head_dim_) + b * slots_,
                      src.v_scales(l, h) + b * src.slots_, static_cast<size_t>(pairs) * 2);
        continue;
      }
      std::memcpy(v_.get() + offset(l, h) * v_row_, src.v_head(l, h), static_cast<size_t>(v_bytes));
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(n_layers() * heads, copy);
  } else {
    copy(0, n_layers() * heads);
  }
  size_ = n;
  return Status::Ok();
}

void KvCache::write_k(int64_t layer, int64_t head, int64_t pos, const uint8_t* x) {
  uint8_t* base = k_.get() + offset(layer, head) * k_row_;
  if (k_type_ == KvType::Q8_0) {  // kernels.h: values plus 128 in runs of 4 dimensions, then the scales
    uint8_t* blk = base + pos / kKeyBlock * q8_key_block_bytes(head_dim_);
    for (int64_t d = 0; d < head_dim_; ++d) blk[q8_key_value_offset(pos, d)] = static_cast<uint8_t>(x[d] ^ 0x80u);
    for (int64_t b = 0; b < head_dim_ / 32; ++b)
      std::memcpy(blk + q8_key_scale_offset(pos, b, head_dim_), x + head_dim_ + b * 2, 2);
    return;
  }
  const int64_t e = k_row_ / head_dim_;
  for (int64_t d = 0; d < head_dim_; ++d)
    std::memcpy(base + key_block_index(pos, d, head_dim_) * e, x + d * e, static_cast<size_t>(e));
}

void KvCache::write_v(int64_t layer, int64_t head, int64_t pos, const uint8_t* x) {
  if (v_type_ == KvType::BF16) {  // kernels.h: pairs of positions interleaved
    auto* base = reinterpret_cast<uint16_t*>(v_.get() + offset(layer, head) * v_row_);
    const auto* in = reinterpret_cast<const uint16_t*>(x);
    for (int64_t d = 0; d < head_dim_; ++d) {
      base[bf16_value_index(pos, d, head_dim_)] = in[d];
      // The partner of an even position is read (with weight 0) before it is written: it must
      // not hold a NaN from whatever the allocation held before.
      if (pos % 2 == 0) base[bf16_value_index(pos + 1, d, head_dim_)] = 0;
    }
    return;
  }
  if (v_type_ == KvType::Q8_0) {  // kernels.h: pairs of positions, values interleaved, then the scales
    uint8_t* values = v_.get() + offset(layer, head) * v_row_;
    store_q8_value_row(x, values, reinterpret_cast<uint16_t*>(values + slots_ * head_dim_), slots_, pos, head_dim_);
    return;
  }
  std::memcpy(v_.get() + (offset(layer, head) + pos) * v_row_, x, static_cast<size_t>(v_row_));
}

Status KvCache::truncate(int64_t n) {
  if (n < 0 || n > size_)
    return Error("KV cache truncate(" + std::to_string(n) + "): the cache holds " + std::to_string(size_) +
                 " tokens; allowed 0.." + std::to_string(size_));
  size_ = n;
  return Status::Ok();
}

}  // namespace coda
