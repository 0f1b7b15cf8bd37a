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
      line(line_, out);
      line_.clear();
      continue;
    }
    if (line_.size() >= max_line_) return false;
    line_.push_back(c);
  }
  return true;
}

void SseParser::line(std::string_view l, std::vector<SseEvent>& out) {
  if (l.empty()) {  // dispatch
    if (has_data_) out.push_back(SseEvent{event_, data_, id_});
    has_data_ = false;
    data_.clear();
    event_.clear();
    return;
  }
  if (l.front() == ':') return;  // a comment
  std::string_view field = l, value;
  if (const size_t colon = l.find(':'); colon != std::string_view::npos) {
    field = l.substr(0, colon);
    value = l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) id_.assign(value);
  }
  // `retry` and unknown fields are ignored, as the specification says.
}

}  // namespace coda::client
