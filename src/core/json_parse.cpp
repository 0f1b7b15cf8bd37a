#include "core/json_parse.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace coda {

namespace {

using Json = nlohmann::ordered_json;
// ordered_map is a public std::vector of pairs: appending through the vector skips the key search.
using Entries = std::vector<std::pair<const std::string, Json>>;

// Builds the document from the parser's events. Each open container is the last element of its
// parent, and only the innermost one grows, so the pointers on the stack stay valid.
class OrderedBuilder : public nlohmann::json_sax<Json> {
 public:
  Json root;
  bool failed = false;

  bool null() override { return add(Json(nullptr)); }
  bool boolean(bool v) override { return add(Json(v)); }
  bool number_integer(number_integer_t v) override { return add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return add(Json(v)); }
  bool string(string_t& v) override { return add(Json(std::move(v))); }
  bool binary(binary_t& v) override { return add(Json::binary(std::move(v))); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override { return open(Json::object()); }
  bool start_array(std::size_t) override { return open(Json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    failed = true;
    return false;
  }

 private:
  // Objects up to this many keys are searched in place; larger ones get a hash index.
  static constexpr size_t kLinearKeys = 16;

  struct Frame {
    Json* value;
    std::unique_ptr<std::unordered_map<std::string, size_t>> index;  // key -> entry, objects past kLinearKeys
  };

  // Where the next value goes: the root, the end of the innermost array, or the innermost
  // object's entry for the pending key.
  Json* slot(Json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Frame& f = stack_.back();
    if (f.value->is_array()) {
      auto& a = f.value->get_ref<Json::array_t&>();
      a.push_back(std::move(v));
      return &a.back();
    }
    auto& entries = static_cast<Entries&>(f.value->get_ref<Json::object_t&>());
    if (Json* existing = find(f, entries)) {
      *existing = std::move(v);  // a repeated key: last value, first place
      return existing;
    }
    entries.emplace_back(key_, std::move(v));
    if (f.index) {
      f.index->emplace(key_, entries.size() - 1);
    } else if (entries.size() > kLinearKeys) {
      f.index = std::make_unique<std::unordered_map<std::string, size_t>>();
      for (size_t i = 0; i < entries.size(); ++i) f.index->emplace(entries[i].first, i);
    }
    return &entries.back().second;
  }

  Json* find(Frame& f, Entries& entries) const {
    if (f.index) {
      const auto it = f.index->find(key_);
      return it == f.index->end() ? nullptr : &entries[it->second].second;
    }
    for (auto& [k, v] : entries)
      if (k == key_) return &v;
    return nullptr;
  }

  bool add(Json&& v) {
    slot(std::move(v));
    return true;
  }
  bool open(Json&& v) {
    stack_.push_back({slot(std::move(v)), nullptr});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  std::vector<Frame> stack_;
  std::string key_;
};

}  // namespace

nlohmann::ordered_json parse_ordered_json(std::string_view text) {
  OrderedBuilder b;
  const bool ok = Json::sax_parse(text.begin(), text.end(), &b);
  if (!ok || b.failed) return Json(Json::value_t::discarded);
  return std::move(b.root);
}

}  // namespace coda
