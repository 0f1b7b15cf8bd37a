#include "server/llama_api.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/version.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace coda {

namespace {

using json = nlohmann::ordered_json;

ApiError llama_field_error(const std::string& param, const std::string& message) {
  ApiError e;
  e.param = param;
  e.message = message;
  return e;
}

std::string valid_utf8(const std::string& s) {
  std::string out;
  coda::utf8_sanitize(s, true, &out);
  return out;
}

// llama-server's per-token probabilities: the chosen token and its alternatives, each with its id.
json llama_probabilities(const std::vector<TokenLogprob>& lps, const Vocab& vocab) {
  json out = json::array();
  for (const auto& lp : lps) {
    json top = json::array();
    for (const auto& [id, l] : lp.top) {
      const std::string b = vocab.token_bytes(id);
      top.push_back({{"id", id}, {"token", valid_utf8(b)}, {"bytes", bytes_of(b)}, {"logprob", l}});
    }
    out.push_back({{"id", lp.token},
                   {"token", valid_utf8(lp.text)},
                   {"bytes", bytes_of(lp.text)},
                   {"logprob", lp.logprob},
                   {"top_logprobs", std::move(top)}});
  }
  return out;
}

}  // namespace

std::variant<json, ApiError> llama_completion_to_openai(const json& in, LlamaCompletionOptions& opts) {
  if (!in.is_object()) return llama_field_error("", "the body is not a JSON object");
  json out = in;
  // One prompt, as text or as token ids; llama-server's batches and mixed arrays are not read.
  if (!in.contains("prompt") || in["prompt"].is_null())
    return llama_field_error("prompt", "prompt: missing; send the text to continue");
  const json& p = in["prompt"];
  const bool ids = p.is_array() && !p.empty() &&
                   std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_number_integer(); });
  if (!p.is_string() && !ids)
    return llama_field_error(
        "prompt", "prompt: expected a string or an array of token ids (one prompt; send several to /v1/completions)");
  // n_predict: -1 (llama-server's "until the end") keeps coda's bounded default.
  out.erase("n_predict");
  if (in.contains("n_predict") && !in["n_predict"].is_null()) {
    if (!in["n_predict"].is_number_integer())
      return llama_field_error("n_predict", "n_predict: expected an integer (-1: until the end of the generation)");
    const int64_t n = in["n_predict"].get<int64_t>();
    if (n == 0 || n < -1 || n > std::numeric_limits<int32_t>::max())
      return llama_field_error(
          "n_predict", "n_predict: " + std::to_string(n) + " is out of range; allowed -1 or 1 up to the context");
    if (n > 0) out["max_tokens"] = n;
  }
  out.erase("n_probs");
  if (in.contains("n_probs") && !in["n_probs"].is_null()) {
    if (!in["n_probs"].is_number_integer() || in["n_probs"].get<int64_t>() < 0 || in["n_probs"].get<int64_t>() > 20)
      return llama_field_error("n_probs", "n_probs: expected an integer in 0..20");
    opts.n_probs = static_cast<int>(in["n_probs"].get<int64_t>());
  }
  const bool stream = in.value("stream", json(false)) == json(true);
  // Token ids come with the logprobs: asked for whenever the answer names ids.
  opts.return_tokens = in.value("return_tokens", json(false)) == json(true);
  out.erase("return_tokens");
  if (opts.n_probs > 0 || stream || opts.return_tokens) out["logprobs"] = opts.n_probs;
  if (in.contains("post_sampling_probs") && in["post_sampling_probs"] == json(true))
    return llama_field_error("post_sampling_probs",
                             "post_sampling_probs: not supported; n_probs gives the model's log-probabilities");
  out.erase("post_sampling_probs");
  if (in.contains("repeat_penalty")) {
    out["repetition_penalty"] = in["repeat_penalty"];
    out.erase("repeat_penalty");
  }
  // seed -1 is llama-server's "random", as an absent seed is coda's.
  if (in.contains("seed") && in["seed"] == json(-1)) out.erase("seed");
  // logit_bias as llama-server's list of [token id, bias or false] (false: never).
  if (in.contains("logit_bias") && in["logit_bias"].is_array()) {
    json bias = json::object();
    for (const auto& pair : in["logit_bias"]) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() ||
          !(pair[1].is_number() || pair[1] == json(false)))
        return llama_field_error("logit_bias",
                                 "logit_bias: expected [[token id, bias or false], ...] (token ids, not strings)");
      bias[std::to_string(pair[0].get<int64_t>())] = pair[1].is_number() ? pair[1] : json(-100);
    }
    out["logit_bias"] = std::move(bias);
  }
  // llama-server's sampling defaults where the request is silent (its README's values), so a
  // request written for it samples as it would there.
  const json defaults = llama_default_params();
  for (auto it = defaults.begin(); it != defaults.end(); ++it)
    if (it.key() != "n_predict" && (!in.contains(it.key()) || in[it.key()].is_null())) out[it.key()] = it.value();
  return out;
}

json llama_default_params() {
  // llama-server's README values for the sampling fields whose defaults differ from OpenAI's.
  return {{"n_predict", -1}, {"temperature", 0.8}, {"top_k", 40}, {"top_p", 0.95}, {"min_p", 0.05}};
}

json llama_props(int64_t n_ctx, size_t slots, const std::string& model_path, const std::string& model_alias,
                 const std::string& chat_template, bool template_from_model, const Vocab& vocab) {
  auto token_text = [&](int32_t id) { return id >= 0 ? vocab.piece(id) : std::string(); };
  return {{"default_generation_settings", {{"n_ctx", n_ctx}, {"params", llama_default_params()}}},
          {"total_slots", slots},
          {"model_alias", model_alias},
          {"model_path", model_path},
          {"chat_template", chat_template},
          {"chat_template_source", template_from_model ? "model" : "builtin"},
          {"bos_token", token_text(vocab.bos())},
          {"eos_token", token_text(vocab.eot() >= 0 ? vocab.eot() : vocab.eos())},
          {"modalities", {{"vision", false}, {"audio", false}}},
          {"build_info", std::string("coda ") + kVersion},
          {"is_sleeping", false}};
}

json llama_answer_json(const LlamaAnswer& a, bool final_of_stream) {
  std::string stop_type = a.finish_reason;
  if (a.finish_reason == "length") stop_type = "limit";
  if (a.finish_reason == "stop") stop_type = a.stopping_word.empty() ? "eos" : "word";
  const int64_t prompt_n = a.prompt_tokens - a.cached_tokens;
  const auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  const auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1e3 * static_cast<double>(n) / ms : 0.0; };
  json body{{"index", 0},
            {"content", final_of_stream ? std::string() : a.text},
            {"tokens", final_of_stream ? json::array() : json(a.tokens)},
            {"id_slot", 0},
            {"stop", true},
            {"model", a.model},
            {"tokens_predicted", a.completion_tokens},
            {"tokens_evaluated", a.prompt_tokens},
            {"generation_settings", a.settings},
            {"prompt", valid_utf8(a.prompt)},
            {"has_new_line", a.text.find('\n') != std::string::npos},
            {"truncated", false},
            {"stop_type", stop_type},
            {"stopping_word", a.stopping_word},
            {"tokens_cached", a.cached_tokens},
            {"timings",
             {{"prompt_n", prompt_n},
              {"prompt_ms", a.prompt_ms},
              {"prompt_per_token_ms", per_token(a.prompt_ms, prompt_n)},
              {"prompt_per_second", per_second(a.prompt_ms, prompt_n)},
              {"predicted_n", a.completion_tokens},
              {"predicted_ms", a.predicted_ms},
              {"predicted_per_token_ms", per_token(a.predicted_ms, a.completion_tokens)},
              {"predicted_per_second", per_second(a.predicted_ms, a.completion_tokens)}}}};
  body["coda"] = a.report;
  return body;
}

json llama_sampling_params(const SamplingParams& s) {
  return {{"seed", s.seed},
          {"temperature", s.temperature},
          {"dynatemp_range", s.dynatemp_range},
          {"dynatemp_exponent", s.dynatemp_exponent},
          {"top_k", s.top_k},
          {"top_p", s.top_p},
          {"min_p", s.min_p},
          {"typical_p", s.typical_p},
          {"repeat_last_n", s.repetition_window},
          {"repeat_penalty", s.repetition_penalty},
          {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty},
          {"ignore_eos", s.ignore_eos}};
}

json llama_slots(const std::vector<SlotState>& running, size_t total_slots, int64_t n_ctx) {
  json out = json::array();
  for (size_t i = 0; i < total_slots; ++i) {
    const auto it = std::find_if(running.begin(), running.end(),
                                 [i](const SlotState& st) { return st.slot == static_cast<int>(i); });
    const SlotState* st = it == running.end() ? nullptr : &*it;
    json slot{{"id", i},
              {"id_task", st ? st->task : -1},
              {"n_ctx", n_ctx},
              {"speculative", false},
              {"is_processing", st != nullptr}};
    if (st != nullptr) {
      json params = llama_sampling_params(st->sampling);
      params["n_predict"] = st->n_decoded + st->n_remain;
      slot["params"] = std::move(params);
      slot["next_token"] = {
          {"has_next_token", st->n_remain > 0}, {"n_remain", st->n_remain}, {"n_decoded", st->n_decoded}};
      slot["coda"] = {{"state", st->prefilling ? "prompt" : "generating"},
                      {"n_prompt_tokens", st->n_prompt_tokens},
                      {"n_prompt_tokens_processed", st->n_prompt_tokens_processed},
                      {"n_prompt_tokens_cached", st->n_prompt_tokens_cached},
                      {"kv_capacity", st->n_ctx},
                      {"seconds", st->seconds},
                      {"guard", st->guard.to_json()}};
    }
    out.push_back(std::move(slot));
  }
  return out;
}

json llama_completion_body(const ApiRequest& r, const GuardedResult& g, const std::string& model, int64_t n_ctx,
                           const Vocab& vocab, const LlamaCompletionOptions& o, bool final_of_stream) {
  const GenerationResult& res = g.result;
  const GenerationRequest& q = r.gen;
  const SamplingParams& s = q.sampling;
  LlamaAnswer a;
  a.text = res.text;
  a.finish_reason = res.finish_reason;
  if (res.finish_reason == "stop" && std::find(q.stop.begin(), q.stop.end(), res.stop_reason) != q.stop.end())
    a.stopping_word = res.stop_reason;
  if (o.return_tokens) a.tokens = res.tokens;
  a.prompt = q.prompt_tokens.empty() ? q.prompt : vocab.decode(q.prompt_tokens);
  a.model = model;
  a.prompt_tokens = res.prompt_tokens;
  a.completion_tokens = res.completion_tokens;
  a.cached_tokens = res.cached_tokens;
  a.prompt_ms = res.timings.prefill_ms;
  a.predicted_ms = res.timings.decode_ms;
  a.settings = {{"n_ctx", n_ctx}, {"n_predict", q.max_tokens ? *q.max_tokens : -1}, {"model", model}};
  a.settings.update(llama_sampling_params(s));
  a.settings["stop"] = q.stop;
  a.settings["stream"] = r.stream;
  a.settings["n_probs"] = o.n_probs;
  a.report = g.report.to_json();
  json body = llama_answer_json(a, final_of_stream);
  if (o.n_probs > 0 && !final_of_stream) body["completion_probabilities"] = llama_probabilities(res.logprobs, vocab);
  return body;
}

json llama_stream_event(const std::string& text, const std::vector<TokenLogprob>& lps, int64_t prompt_tokens,
                        int64_t predicted, const Vocab& vocab, const LlamaCompletionOptions& o) {
  json ids = json::array();
  for (const auto& lp : lps) ids.push_back(lp.token);
  json event{{"index", 0},
             {"content", text},
             {"tokens", std::move(ids)},
             {"stop", false},
             {"id_slot", -1},
             {"tokens_predicted", predicted},
             {"tokens_evaluated", prompt_tokens}};
  if (o.n_probs > 0) event["completion_probabilities"] = llama_probabilities(lps, vocab);
  return event;
}

}  // namespace coda
