// Server-Sent Events, parsed by the WHATWG HTML specification (section "Interpreting an event
// stream"): lines end in CRLF, LF or CR; a line that starts with ':' is a comment (servers send
// them as keep-alives, coda's `: waiting` among them); `field:value` drops one space after the
// colon; a line without a colon is a field with an empty value; several `data` lines of one event
// join with LF; a blank line dispatches the event, unless its data is empty. Bytes arrive in any
// split, so the parser keeps a partial line (and a trailing CR that may be half of a CRLF) until
// the next feed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace coda::client {

struct SseEvent {
  std::string event;  // the `event` field; empty means "message"
  std::string data;
  std::string id;
};

class SseParser {
 public:
  // `max_line` bounds what one line, and one event's data, may hold, so an upstream that never
  // ends a line or an event cannot grow memory without bound; beyond it feed() reports an error.
  explicit SseParser(size_t max_line = size_t{16} << 20) : max_line_(max_line) {}
  // Appends the events completed by `bytes` to `out`; false once a line or an event exceeded max_line.
  bool feed(std::string_view bytes, std::vector<SseEvent>& out);
  // Bytes held back: a partial line, or an event not yet ended by a blank line.
  bool idle() const { return line_.empty() && data_.empty() && !pending_cr_; }

 private:
  bool line(std::string_view l, std::vector<SseEvent>& out);

  size_t max_line_;
  std::string line_;
  bool pending_cr_ = false;  // the last byte was CR: a following LF belongs to it
  bool has_data_ = false;
  std::string data_, event_, id_;
};

}  // namespace coda::client
