#include "guard/thinking.h"

#include <algorithm>

namespace coda {

namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

}  // namespace

void ThinkingTracker::see(int64_t i, const std::string& text, const std::vector<size_t>& text_ends) {
  if (!cfg_.watch || cfg_.external) return;
  if (state_ == State::Undecided) {
    // A reply that thinks starts with <think> (after blank space); decided once enough is in.
    const size_t lead = std::min(text.find_first_not_of(" \t\r\n"), text.size());
    const std::string_view head = std::string_view(text).substr(lead, kOpen.size());
    if (head.size() < kOpen.size() && kOpen.substr(0, head.size()) == head) return;
    if (head != kOpen) {
      state_ = State::NoThinking;
      return;
    }
    state_ = State::Thinking;
    start_ = 0;
    scanned_ = lead + kOpen.size();
  }
  if (state_ != State::Thinking) return;
  const size_t from = scanned_ > kClose.size() ? scanned_ - kClose.size() : 0;
  if (const size_t at = text.find(kClose, from); at != std::string::npos) {
    state_ = State::Closed;
    closed_at_ = i + 1;
    // The close begins at the first token whose text reaches past `at`; a line break right before
    // it belongs to the close too (the models write "\n</think>").
    const size_t begin = at > 0 && text[at - 1] == '\n' ? at - 1 : at;
    close_from_ = static_cast<int64_t>(std::upper_bound(text_ends.begin(), text_ends.end(), begin) - text_ends.begin());
    close_from_ = std::clamp<int64_t>(close_from_, start_, i);
  }
  scanned_ = text.size();
}

void ThinkingTracker::on_rollback(int64_t keep, const std::vector<size_t>& text_ends) {
  if (!cfg_.watch) return;
  const size_t kept_bytes = keep > 0 && !text_ends.empty() ? text_ends[static_cast<size_t>(keep) - 1] : 0;
  if (state_ == State::Closed && closed_at_ > keep) {
    state_ = State::Thinking;
    closed_at_ = close_from_ = -1;
  }
  if (state_ == State::Thinking || state_ == State::NoThinking) {
    if (keep == 0 && !cfg_.opened) state_ = State::Undecided;
    scanned_ = std::min(scanned_, kept_bytes);
  }
}

void ThinkingTracker::set_inside(bool inside, int64_t n) {
  if (!cfg_.watch || !cfg_.external) return;
  if (inside && (state_ == State::Undecided || state_ == State::NoThinking)) {
    state_ = State::Thinking;
    start_ = n;
  } else if (!inside && state_ == State::Thinking) {
    state_ = State::Closed;
    closed_at_ = close_from_ = n;
  } else if (!inside && state_ == State::Undecided) {
    state_ = State::NoThinking;
  }
}

int64_t ThinkingTracker::reasoning_tokens(int64_t n) const {
  if (state_ == State::Thinking) return n - start_;
  if (state_ == State::Closed) return close_from_ - start_;
  return 0;
}

}  // namespace coda
