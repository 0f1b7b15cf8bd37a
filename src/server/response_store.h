// Responses kept for OpenAI's `previous_response_id`: a new turn names the response it follows
// instead of sending the conversation again, as the Agents SDK and coding agents do. Each stored
// entry holds the chat conversation that response ended (its input turns and its answer), so the
// next request is that conversation plus its own input, and the response object itself, for
// GET /v1/responses/{id}: {"messages": [...], "response": {...}}.
//
// Memory is bounded: entries are counted by the size of their JSON, and the least recently used
// go first once the total passes the budget (`--responses-store MB`). An entry larger than the
// whole budget is not kept. A response that was evicted, never stored (`store: false`) or made
// before a restart is "not found", and the client can send the conversation in `input` instead.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace coda {

class ResponseStore {
 public:
  explicit ResponseStore(size_t budget_bytes) : budget_(budget_bytes) {}

  // Keeps `entry` under `id`; returns false when it alone is over the budget (nothing is kept then).
  bool put(const std::string& id, nlohmann::ordered_json entry);
  // The entry kept under `id`, and marks it recently used.
  std::optional<nlohmann::ordered_json> get(const std::string& id);
  bool erase(const std::string& id);

  size_t bytes() const;
  size_t size() const;
  size_t budget() const { return budget_; }

 private:
  struct Entry {
    std::string id;
    nlohmann::ordered_json value;
    size_t bytes;
  };
  void evict_locked();

  const size_t budget_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace coda
