// What `coda proxy` checks of a request before it goes upstream: the fields the proxy itself reads or
// that an engine is known to crash on when their type is wrong (max_tokens "lots" took a permissive
// upstream down, and the client got a 502 for its own mistake). They get coda serve's 400 answers,
// with the parameter named; fields the proxy does not know pass on untouched, for the upstream to judge.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "server/openai_api.h"

namespace coda::proxy {

// Types and OpenAI's ranges of max_tokens, max_completion_tokens, n, temperature, top_p, top_k,
// min_p, presence_penalty, frequency_penalty, repetition_penalty, seed, stop, logprobs and
// top_logprobs. A null value counts as absent.
std::optional<ApiError> check_forwarded_fields(const nlohmann::ordered_json& body, bool chat);

}  // namespace coda::proxy
