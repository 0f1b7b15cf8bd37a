#include "engine/stop_matcher.h"

#include <algorithm>

namespace coda {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool keep_stop_string)
    : stops_(std::move(stops)), keep_(keep_stop_string) {
  for (const auto& s : stops_) longest_ = std::max(longest_, s.size());
}

bool StopMatcher::push(const std::string& piece) {
  if (done_) return true;
  const size_t old = text_.size();
  text_ += piece;
  if (stops_.empty()) return false;
  // A new match must end inside the new piece, so it starts at most longest-1 bytes before it.
  const size_t from = old >= longest_ ? old - longest_ + 1 : 0;
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& s : stops_) {
    const size_t at = text_.find(s, from);
    if (at != std::string::npos && (at < best || (at == best && s.size() > which->size()))) {
      best = at;
      which = &s;
    }
  }
  if (which == nullptr) return false;
  matched_ = *which;
  text_.resize(keep_ ? best + which->size() : best);
  streamed_ = std::min(streamed_, text_.size());
  done_ = true;
  return true;
}

size_t StopMatcher::held_back() const {
  if (done_) return 0;
  size_t hold = 0;
  for (const auto& s : stops_) {
    // The longest proper prefix of s that the text ends with.
    for (size_t k = std::min(s.size() - 1, text_.size()); k > hold; --k) {
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

std::string StopMatcher::take_ready(size_t limit) {
  const size_t ready = std::min(text_.size() - held_back(), limit);
  if (ready <= streamed_) return "";
  std::string out = text_.substr(streamed_, ready - streamed_);
  streamed_ = ready;
  return out;
}

std::string StopMatcher::take_rest() {
  std::string out = text_.substr(streamed_);
  streamed_ = text_.size();
  return out;
}

}  // namespace coda
