// Tool calls in a model's own words (tool_calls.h).
#include "chat/tool_calls.h"

#include <nlohmann/json.hpp>

#include "chat/text_match.h"
#include "core/json_parse.h"

namespace coda {
namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_json_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_json_space(s.back())) s.remove_suffix(1);
  return s;
}

// Deeper nesting is not a call (and keeps a reply of a million "[" from reaching the JSON parser).
constexpr int kMaxDepth = 64;

// The end (one past) of the JSON object or array that starts at text[i], found by balancing
// brackets outside strings; npos if the text ends first or nests deeper than kMaxDepth.
size_t json_value_end(std::string_view text, size_t i) {
  int depth = 0;
  bool in_string = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) return std::string_view::npos;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// {"name": "...", "arguments" or "parameters": {...} or its JSON text}; nullopt otherwise.
std::optional<ParsedToolCall> call_from(const nlohmann::ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  nlohmann::ordered_json obj = nlohmann::ordered_json::object();
  if (args != j.end()) {
    obj = args->is_string() ? parse_ordered_json(args->get<std::string>()) : *args;
    if (!obj.is_object()) return std::nullopt;
  }
  return ParsedToolCall{name->get<std::string>(), obj.dump()};
}

// One JSON value text (object: one call; array: calls) appended to `calls`; false if it is not.
bool append_calls(std::string_view json, std::vector<ParsedToolCall>& calls) {
  const auto j = parse_ordered_json(json);
  if (j.is_discarded()) return false;
  if (j.is_array()) {
    if (j.empty()) return false;
    for (const auto& e : j) {
      auto c = call_from(e);
      if (!c) return false;
      calls.push_back(std::move(*c));
    }
    return true;
  }
  auto c = call_from(j);
  if (!c) return false;
  calls.push_back(std::move(*c));
  return true;
}

// JSON values one after another (separated by space or ";") that are all calls, filling the text.
bool calls_filling(std::string_view text, std::vector<ParsedToolCall>& calls) {
  size_t i = 0;
  bool any = false;
  while (true) {
    while (i < text.size() && (is_json_space(text[i]) || (any && text[i] == ';'))) ++i;
    if (i == text.size()) return any;
    if (text[i] != '{' && text[i] != '[') return false;
    const size_t end = json_value_end(text, i);
    if (end == std::string_view::npos || !append_calls(text.substr(i, end - i), calls)) return false;
    any = true;
    i = end;
  }
}

ToolCallSplit hermes(std::string_view text) {
  ToolCallSplit out;
  std::string content;
  size_t at = 0;
  while (true) {
    const size_t open = text.find(kHermesOpen, at);
    if (open == std::string_view::npos) break;
    const size_t close = text.find(kHermesClose, open);
    if (close == std::string_view::npos) return {std::string(text), {}};  // cut off inside a call
    content.append(text.substr(at, open - at));
    const std::string_view body = text.substr(open + kHermesOpen.size(), close - open - kHermesOpen.size());
    if (!calls_filling(body, out.calls)) return {std::string(text), {}};
    at = close + kHermesClose.size();
  }
  if (out.calls.empty()) return {std::string(text), {}};
  content.append(text.substr(at));
  out.content = std::string(trim(content));
  return out;
}

// A marker (possibly absent, as a control token is from the text) then calls to the end.
ToolCallSplit marked(std::string_view text, std::string_view marker) {
  ToolCallSplit out;
  const size_t m = marker.empty() ? std::string_view::npos : text.find(marker);
  std::string_view before, rest = text;
  if (m != std::string_view::npos) {
    before = text.substr(0, m);
    rest = text.substr(m + marker.size());
  }
  if (!calls_filling(trim(rest), out.calls)) return {std::string(text), {}};
  out.content = std::string(trim(before));
  return out;
}

size_t marker_safe_prefix(std::string_view text, std::string_view marker, size_t from) {
  const size_t m = text.find(marker, std::min(from, text.size()));
  if (m != std::string_view::npos) return m;
  return text.size() - marker_prefix_at_end(text, marker);
}

constexpr std::string_view kGraniteMarker = "<|tool_call|>";

std::string_view marker_of(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return kHermesOpen;
    case ToolCallFormat::Mistral:
      return kMistralMarker;
    case ToolCallFormat::Granite:
      return kGraniteMarker;
    default:
      return {};
  }
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format_named(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::Hermes;
  if (name == "llama3_json") return ToolCallFormat::Llama3Json;
  if (name == "mistral") return ToolCallFormat::Mistral;
  if (name == "granite") return ToolCallFormat::Granite;
  if (name == "none") return ToolCallFormat::None;
  return std::nullopt;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return "hermes";
    case ToolCallFormat::Llama3Json:
      return "llama3_json";
    case ToolCallFormat::Mistral:
      return "mistral";
    case ToolCallFormat::Granite:
      return "granite";
    case ToolCallFormat::None:
      break;
  }
  return "none";
}

ToolCallFormat tool_call_format_of_template(std::string_view source) {
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::Hermes;
  if (source.find(kMistralMarker) != std::string_view::npos) return ToolCallFormat::Mistral;
  if (source.find(kGraniteMarker) != std::string_view::npos) return ToolCallFormat::Granite;
  // Llama 3.1-3.3 ask for {"name": function name, "parameters": dictionary of argument name and
  // its value}; 3.1 also knows <|python_tag|>.
  if (source.find("<|python_tag|>") != std::string_view::npos ||
      source.find("\"parameters\": dictionary") != std::string_view::npos)
    return ToolCallFormat::Llama3Json;
  return ToolCallFormat::None;
}

ToolCallSplit split_tool_calls(ToolCallFormat f, std::string_view text) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return hermes(text);
    case ToolCallFormat::Llama3Json: {
      ToolCallSplit out;
      if (trim(text).empty() || trim(text).front() != '{' || !calls_filling(trim(text), out.calls))
        return {std::string(text), {}};
      return out;
    }
    case ToolCallFormat::Mistral:
    case ToolCallFormat::Granite:
      return marked(text, marker_of(f));
    case ToolCallFormat::None:
      break;
  }
  return {std::string(text), {}};
}

size_t tool_call_safe_prefix(ToolCallFormat f, std::string_view text, size_t from) {
  if (f == ToolCallFormat::None) return text.size();
  if (f == ToolCallFormat::Hermes) return marker_safe_prefix(text, kHermesOpen, from);
  // The other formats may begin with the calls' JSON: nothing is certain until the reply shows
  // that it starts otherwise.
  const std::string_view t = trim(text);
  if (t.empty()) return 0;
  const char first = t.front();
  if (f == ToolCallFormat::Llama3Json) return first == '{' ? 0 : text.size();
  if (first == '[') return 0;
  return marker_safe_prefix(text, marker_of(f), from);
}

}  // namespace coda
