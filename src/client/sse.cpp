#include "client/sse.h"

namespace coda::client {

bool SseParser::feed(std::string_view bytes, std::vector<SseEvent>& out) {
  for (char c : bytes) {
    if (pending_cr_) {
      pending_cr_ = false;
      if (c == '\n') continue;  // the LF of a CRLF: the line already ended at the CR
    }
    if (c == '\r' || c == '\n') {
      pending_cr_ = c == '\r';
      if (!line(line_, out)) return false;
      line_.clear();
      continue;
    }
    if (line_.size() >= max_line_) return false;
    line_.push_back(c);
  }
  return true;
}

bool SseParser::line(std::string_view l, std::vector<SseEvent>& out) {
  if (l.empty()) {  // dispatch
    if (has_data_) out.push_back(SseEvent{event_, data_, id_});
    has_data_ = false;
    data_.clear();
    event_.clear();
    return true;
  }
  if (l.front() == ':') return true;  // a comment
  std::string_view field = l, value;
  if (const size_t colon = l.find(':'); colon != std::string_view::npos) {
    field = l.substr(0, colon);
    value = l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    // Data lines join until a blank line: an upstream that never sends one would grow the event
    // without bound, so the event's data has the line's bound.
    if (data_.size() + value.size() + 1 > max_line_) return false;
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) id_.assign(value);
  }
  // `retry` and unknown fields are ignored, as the specification says.
  return true;
}

}  // namespace coda::client
