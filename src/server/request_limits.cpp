#include "server/request_limits.h"

#include <nlohmann/json.hpp>
#include <vector>

namespace coda {

namespace {

// Walks the body's events keeping only a stack of container kinds and counters.
class LimitScanner : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit LimitScanner(const RequestLimits& l) : l_(l) {}
  std::optional<ApiError> error;

  bool null() override { return value(0); }
  bool boolean(bool) override { return value(0); }
  bool number_integer(number_integer_t) override { return value(0); }
  bool number_unsigned(number_unsigned_t) override { return value(0); }
  bool number_float(number_float_t, const string_t&) override { return value(0); }
  bool string(string_t& s) override { return value(s.size()); }
  bool binary(binary_t&) override { return value(0); }
  bool key(string_t& k) override {
    if (stack_.size() == 1) top_key_ = k;  // a field of the request object
    if (in_message_) message_bytes_ += k.size();
    if (!stack_.empty()) ++stack_.back().count;  // an object's entries (logit_bias is bounded by them)
    return true;
  }
  bool start_object(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    if (!error)
      error = bad("", "The request body is not valid JSON (error near byte " + std::to_string(position) + ").");
    return false;
  }

 private:
  struct Frame {
    bool array;
    size_t count = 0;
  };

  static ApiError bad(const std::string& param, const std::string& message) {
    ApiError e;
    e.param = param;
    e.message = message;
    return e;
  }
  bool fail(const std::string& param, const std::string& message) {
    error = bad(param, message);
    return false;
  }
  // An element added to the innermost container.
  bool value(size_t string_bytes) {
    if (in_message_) {
      message_bytes_ += string_bytes;
      if (message_bytes_ > l_.max_message_bytes)
        return fail("messages", "messages[" + std::to_string(message_index_) + "]: larger than the limit of " +
                                    std::to_string(l_.max_message_bytes) + " bytes per message");
    }
    if (!stack_.empty() && stack_.back().array) {
      ++stack_.back().count;
      return check_count();
    }
    return true;
  }
  // The count of the innermost array against its limit: the request's own lists by name, any
  // other array by the general bound.
  bool check_count() {
    const Frame& f = stack_.back();
    if (!f.array) return true;
    size_t limit = l_.max_array;
    std::string what = "an array";
    if (stack_.size() == 2) {
      what = top_key_;
      if (top_key_ == "messages")
        limit = l_.max_messages;
      else if (top_key_ == "tools" || top_key_ == "functions")
        limit = l_.max_tools;
      else if (top_key_ == "prompt")
        limit = l_.max_prompt_tokens;
      else if (top_key_ == "stop" || top_key_ == "stop_token_ids" || top_key_ == "bad_words" ||
               top_key_ == "dry_sequence_breakers")
        limit = l_.max_list;
    }
    if (f.count > limit)
      return fail(stack_.size() == 2 ? top_key_ : "",
                  what + ": more than " + std::to_string(limit) + " entries; the limit is " + std::to_string(limit));
    return true;
  }
  bool open(bool array) {
    if (!stack_.empty() && stack_.back().array) {
      ++stack_.back().count;
      if (!check_count()) return false;
    }
    stack_.push_back({array});
    if (stack_.size() > l_.max_depth)
      return fail("", "The request nests objects and arrays deeper than " + std::to_string(l_.max_depth) + " levels.");
    // A message: an object directly inside the top-level "messages" array.
    if (!array && stack_.size() == 3 && top_key_ == "messages" && stack_[1].array) {
      in_message_ = true;
      message_bytes_ = 0;
      message_index_ = stack_[1].count - 1;
    }
    return true;
  }
  bool close() {
    if (stack_.size() == 2 && top_key_ == "logit_bias" && !stack_.back().array && stack_.back().count > l_.max_list)
      return fail("logit_bias", "logit_bias: more than " + std::to_string(l_.max_list) + " entries; the limit is " +
                                    std::to_string(l_.max_list));
    if (stack_.size() == 3 && in_message_) in_message_ = false;
    stack_.pop_back();
    return true;
  }

  const RequestLimits& l_;
  std::vector<Frame> stack_;
  std::string top_key_;
  bool in_message_ = false;
  size_t message_bytes_ = 0, message_index_ = 0;
};

}  // namespace

std::optional<ApiError> check_request_limits(const std::string& body, const RequestLimits& limits) {
  LimitScanner scan(limits);
  const bool ok = nlohmann::json::sax_parse(body, &scan);
  if (scan.error) return scan.error;
  if (!ok) {
    ApiError e;
    e.message = "The request body is not valid JSON.";
    return e;
  }
  return std::nullopt;
}

}  // namespace coda
