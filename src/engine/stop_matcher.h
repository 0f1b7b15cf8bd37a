// Stop strings across token boundaries. Text arrives in pieces; a stop string may start in one
// token and end several tokens later. The matcher keeps the whole completion text, reports the
// first stop string to appear (cut from the text, unless asked to keep it), and says how much
// text is safe to stream: everything except a tail that could still grow into a stop string.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace coda {

class StopMatcher {
 public:
  StopMatcher(std::vector<std::string> stops, bool keep_stop_string);

  // Appends text; returns true when a stop string has completed (the text then ends before it,
  // or after it when kept).
  bool push(const std::string& piece);
  // Text that can be streamed now, from where the previous call left off, at most up to byte
  // `limit` of the text.
  std::string take_ready(size_t limit = std::string::npos);
  // After a rebuild: the first n bytes were streamed already.
  void mark_streamed(size_t n) { streamed_ = std::min(n, text_.size()); }
  size_t streamed() const { return streamed_; }
  // Everything not yet streamed (at the end of generation).
  std::string take_rest();

  const std::string& text() const { return text_; }
  const std::string& matched() const { return matched_; }

 private:
  size_t held_back() const;

  std::vector<std::string> stops_;
  bool keep_;
  size_t longest_ = 0;
  std::string text_;
  size_t streamed_ = 0;
  std::string matched_;
  bool done_ = false;
};

}  // namespace coda
