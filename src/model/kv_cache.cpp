#include "model/kv_cache.h"

namespace coda {

KvCache::KvCache(const ModelConfig& c, int64_t capacity)
    : capacity_(capacity),
      kv_dim_(c.kv_dim()),
      k_(static_cast<size_t>(c.n_layers * capacity * c.kv_dim())),
      v_(static_cast<size_t>(c.n_layers * capacity * c.kv_dim())) {}

Status KvCache::truncate(int64_t n) {
  if (n < 0 || n > size_)
    return Error("KV cache truncate(" + std::to_string(n) + "): the cache holds " + std::to_string(size_) +
                 " tokens; allowed 0.." + std::to_string(size_));
  size_ = n;
  return Status::Ok();
}

}  // namespace coda
