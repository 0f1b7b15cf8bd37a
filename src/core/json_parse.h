// Parsing JSON that a client sent into an insertion-ordered document, in time linear in its size.
//
// nlohmann::ordered_json keeps an object's keys in a vector and checks each new key against all
// the earlier ones, so parsing an object of n keys costs n^2 / 2 string comparisons: a 2 MB request
// body of 160,000 keys took 21 s of a server thread, and the 8 MiB body limit allowed minutes.
// The order matters (a tool's JSON Schema reaches the chat template and the grammar in the order
// the client wrote it), so the plain std::map document is no answer. This builder appends keys
// and finds duplicates through a hash index once an object grows past a few keys.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace coda {

// The document, or a discarded value (`is_discarded()`) when the text is not valid JSON, as
// nlohmann::ordered_json::parse(text, nullptr, false) answers. A key given twice keeps its first
// place and its last value, as nlohmann's and Python's parsers do.
nlohmann::ordered_json parse_ordered_json(std::string_view text);

}  // namespace coda
