// OpenAI's embeddings wire format (POST /v1/embeddings, which vLLM and llama-server serve too):
// `input` as a string, an array of strings, an array of token ids or an array of such arrays;
// `encoding_format` float or base64 (the official SDKs ask for base64 and decode it); vLLM's
// `truncate_prompt_tokens`. Each input becomes one prompt-only GenerationRequest whose result is
// the pooled, L2-normalised final hidden state (engine/request.h, Pooling).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "server/openai_api.h"

namespace coda {

struct EmbeddingRequest {
  std::vector<GenerationRequest> inputs;  // in the order of `input`
  bool base64 = false;
  std::string model;
};

// OpenAI's own cap on inputs per request.
inline constexpr size_t kMaxEmbeddingInputs = 2048;

// `dim`: the model's embedding size (`dimensions` may only repeat it: the vectors of a model not
// trained for shortening lose their meaning when cut).
std::variant<EmbeddingRequest, ApiError> parse_embedding_request(const std::string& body, Pooling pooling, int64_t dim,
                                                                 const std::string& model_id);

// The answer, {"object": "list", "data": [{"object": "embedding", "index", "embedding"}, ...],
// "model", "usage": {"prompt_tokens", "total_tokens"}}, in three parts so that it can be written
// entry by entry: 2,048 vectors of 4,096 floats are 170 MB of JSON text, which the server never
// holds at once. Each vector is written as floats (each float32's exact value, as OpenAI's clients
// read it back) or as the base64 of its little-endian float32 bytes.
std::string embedding_head();
std::string embedding_entry(size_t index, const std::vector<float>& v, bool base64);  // with a leading ',' after 0
std::string embedding_tail(const std::string& model, int64_t prompt_tokens);

// The base64 (RFC 4648, padded) of `n` floats' little-endian bytes.
std::string floats_base64(const float* v, size_t n);

// --pooling's names (llama.cpp's): mean, cls, last; the GGUF's `{arch}.pooling_type` numbers them
// 1, 2, 3 (0 none, 4 rank are not vectors OpenAI's route can answer with).
Expected<Pooling> parse_pooling(const std::string& name);
// The pooling a model's GGUF names (an embedding model's), else mean.
Pooling default_pooling(const class Model& model);
const char* pooling_name(Pooling p);

}  // namespace coda
