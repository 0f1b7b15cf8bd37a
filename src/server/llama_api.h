// llama.cpp's native completion API (`POST /completion`, llama-server's own dialect, which its web
// UI, llama.vim and many scripts speak): the request is read into the OpenAI completions body that
// coda serves, with llama-server's sampling defaults where the request is silent, and coda's result
// is written back in llama-server's shape (a flat object with `content`, `stop`, `stop_type`,
// `timings`; a stream of such objects without a `[DONE]`).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "server/openai_api.h"
#include "server/scheduler.h"

namespace coda {

class Vocab;

struct LlamaCompletionOptions {
  bool return_tokens = false;  // `tokens`: the generated ids (always in a stream's chunks)
  int n_probs = 0;             // `completion_probabilities` with this many alternatives; 0: none
};

// The OpenAI completions body for a /completion request, or the error that names the field.
std::variant<nlohmann::ordered_json, ApiError> llama_completion_to_openai(const nlohmann::ordered_json& in,
                                                                          LlamaCompletionOptions& opts);

// What llama-server's answer reports, from whichever engine produced it (coda serve's own, or an
// upstream behind coda proxy).
struct LlamaAnswer {
  std::string text, finish_reason;
  std::string stopping_word;    // the stop string that ended the text ("": none did)
  std::vector<int32_t> tokens;  // `tokens` (empty unless asked for and known)
  std::string prompt, model;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  double prompt_ms = 0, predicted_ms = 0;
  nlohmann::ordered_json settings = nlohmann::ordered_json::object();  // generation_settings
  nlohmann::ordered_json report = nlohmann::ordered_json::object();    // coda's guard report
};

// llama-server's flat answer (and a stream's last event: `content` empty when `final_of_stream`).
nlohmann::ordered_json llama_answer_json(const LlamaAnswer& a, bool final_of_stream);

// The whole answer from coda serve's result.
nlohmann::ordered_json llama_completion_body(const ApiRequest& r, const GuardedResult& g, const std::string& model,
                                             int64_t n_ctx, const Vocab& vocab, const LlamaCompletionOptions& o,
                                             bool final_of_stream);

// A request's sampling fields by llama-server's names (generation_settings, a slot's params).
nlohmann::ordered_json llama_sampling_params(const SamplingParams& s);

// GET /slots (llama-server's monitoring route): one object per batch slot (`total_slots`, the
// --max-num-seqs), idle or running: its id, task, n_ctx, params and next_token counts as
// llama-server reports them, and under `coda` the prompt's progress, the KV capacity, the time
// since arrival and the guard's report on the generation so far. Never the prompt's text.
nlohmann::ordered_json llama_slots(const std::vector<SlotState>& running, size_t total_slots, int64_t n_ctx);

// llama-server's sampling defaults, which /completion applies where a request is silent, as the
// `params` that GET /props reports.
nlohmann::ordered_json llama_default_params();

// GET /props (llama-server's): what its web UI and clients read to set themselves up. coda adds
// `chat_template_source`: "model" (the GGUF's own) or "builtin" (the model has none; a base model),
// which `--api auto` in the lab reads.
nlohmann::ordered_json llama_props(int64_t n_ctx, size_t slots, const std::string& model_path,
                                   const std::string& model_alias, const std::string& chat_template,
                                   bool template_from_model, const Vocab& vocab);

// One streamed event: the text that became final, the ids and, with n_probs, the probabilities of
// its tokens, and the counts so far.
nlohmann::ordered_json llama_stream_event(const std::string& text, const std::vector<TokenLogprob>& lps,
                                          int64_t prompt_tokens, int64_t predicted, const Vocab& vocab,
                                          const LlamaCompletionOptions& o);

}  // namespace coda
