#include "server/response_store.h"

namespace coda {

bool ResponseStore::put(const std::string& id, nlohmann::ordered_json entry) {
  // Counted as what it holds: the serialized size, plus the id twice (list and index).
  const size_t bytes = entry.dump().size() + 2 * id.size() + sizeof(Entry);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (bytes > budget_) return false;
  lru_.push_front(Entry{id, std::move(entry), bytes});
  index_[id] = lru_.begin();
  bytes_ += bytes;
  evict_locked();
  return true;
}

std::optional<nlohmann::ordered_json> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

void ResponseStore::evict_locked() {
  while (bytes_ > budget_ && !lru_.empty()) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().id);
    lru_.pop_back();
  }
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace coda
