// A reasoning model's thinking, apart from its answer (reasoning.h).
#include "chat/reasoning.h"

#include "chat/text_match.h"

namespace coda {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

}  // namespace

bool template_thinks(std::string_view source) {
  return source.find(kClose) != std::string_view::npos;
}

void ReasoningSplitter::feed(std::string_view text, std::string& reasoning, std::string& content) {
  held_.append(text);
  for (;;) {
    if (state_ == State::Undecided) {
      size_t i = 0;
      while (i < held_.size() && is_json_space(held_[i])) ++i;
      const std::string_view rest = std::string_view(held_).substr(i);
      if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return;  // may still open
      if (rest.substr(0, kOpen.size()) == kOpen) {
        held_.erase(0, i + kOpen.size());
        state_ = State::Thinking;
      } else {
        state_ = State::Answering;
      }
      continue;
    }
    if (state_ == State::Thinking) {
      const size_t end = held_.find(kClose);
      if (end == std::string::npos) {
        const size_t keep = marker_prefix_at_end(held_, kClose);
        reasoning.append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return;
      }
      reasoning.append(held_, 0, end);
      held_.erase(0, end + kClose.size());
      state_ = State::Answering;
      continue;
    }
    content.append(held_);
    held_.clear();
    return;
  }
}

void ReasoningSplitter::finish(std::string& reasoning, std::string& content) {
  (state_ == State::Thinking ? reasoning : content).append(held_);
  held_.clear();
}

ReasoningSplit split_reasoning(std::string_view text, bool opened) {
  ReasoningSplit out;
  ReasoningSplitter s(opened);
  s.feed(text, out.reasoning, out.content);
  s.finish(out.reasoning, out.content);
  return out;
}

}  // namespace coda
