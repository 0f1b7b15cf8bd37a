#include "server/openai_api.h"

#include <cmath>
#include <random>

#include "chat/reasoning.h"
#include "core/json_parse.h"
#include "core/strings.h"
#include "sampling/output_grammar.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace coda {

nlohmann::ordered_json ApiError::body() const {
  nlohmann::ordered_json e{{"message", message}, {"type", type}};
  e["param"] = param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param);
  e["code"] = code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code);
  return {{"error", e}};
}

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

ApiError invalid_request(const std::string& param, const std::string& message) {
  ApiError e;
  e.param = param;
  e.message = message;
  return e;
}

namespace {

ApiError bad(const std::string& param, const std::string& message) {
  return invalid_request(param, message);
}

// Typed field readers: a wrong type is an error naming the field; null counts as absent.
struct Reader {
  const nlohmann::ordered_json& j;
  std::optional<ApiError> error;

  const nlohmann::ordered_json* get(const char* k) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) return nullptr;
    return &*it;
  }
  template <typename T>
  void number(const char* k, T& out) {
    const auto* v = get(k);
    if (!v || error) return;
    if (!v->is_number()) {
      error = bad(k, std::string(k) + ": expected a number");
      return;
    }
    if constexpr (std::is_integral_v<T>) {
      if (!v->is_number_integer()) {
        error = bad(k, std::string(k) + ": expected an integer");
        return;
      }
      const auto x = v->get<int64_t>();
      if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) {
        error = bad(k, std::string(k) + ": " + std::to_string(x) + " is out of range");
        return;
      }
      out = static_cast<T>(x);
    } else {
      out = v->get<T>();
    }
  }
  void boolean(const char* k, bool& out) {
    const auto* v = get(k);
    if (!v || error) return;
    if (!v->is_boolean()) {
      error = bad(k, std::string(k) + ": expected true or false");
      return;
    }
    out = v->get<bool>();
  }
};

std::optional<ApiError> read_token_ids(const nlohmann::ordered_json& a, const std::string& name,
                                       std::vector<int32_t>& out) {
  for (const auto& t : a) {
    if (!t.is_number_integer()) return bad("prompt", name + ": a token array must hold only integers");
    const auto id = t.get<int64_t>();
    out.push_back(id < INT32_MIN || id > INT32_MAX ? -1 : static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// Structured output, in each API's spelling: OpenAI's response_format (json_object, json_schema),
// vLLM's guided_json and guided_choice (and structured_outputs {json, choice}), llama.cpp's
// json_schema. At most one per request.
std::optional<ApiError> read_structured_output(Reader& rd, SamplingParams& s) {
  const char* kWhat =
      "coda holds output to JSON (response_format json_object or json_schema, guided_json, json_schema) or to one "
      "of a list of texts (guided_choice)";
  for (const char* k : {"guided_regex", "guided_grammar", "grammar"})
    if (rd.get(k)) return bad(k, std::string(k) + ": not supported; " + kWhat);
  std::string from;
  auto set = [&](const std::string& field,
                 Expected<std::shared_ptr<const OutputGrammar>> g) -> std::optional<ApiError> {
    if (!g) return bad(field, field + ": " + g.message());
    if (s.grammar)
      return bad(field, field + ": only one structured output per request; " + from + " already asks for one");
    s.grammar = std::move(*g);
    from = field;
    return std::nullopt;
  };
  auto schema_of = [&](const std::string& field, const nlohmann::ordered_json& v) -> std::optional<ApiError> {
    if (v.is_string()) {  // vLLM accepts the schema as JSON text too
      auto parsed = parse_ordered_json(v.get<std::string>());
      if (parsed.is_discarded()) return bad(field, field + ": the string is not valid JSON");
      return set(field, OutputGrammar::json_schema(parsed));
    }
    if (!v.is_object() && !v.is_boolean()) return bad(field, field + ": expected a JSON Schema object");
    return set(field, OutputGrammar::json_schema(v));
  };
  auto choices_of = [&](const std::string& field, const nlohmann::ordered_json& v) -> std::optional<ApiError> {
    std::vector<std::string> texts;
    if (!v.is_array()) return bad(field, field + ": expected an array of strings");
    for (const auto& x : v) {
      if (!x.is_string()) return bad(field, field + ": expected an array of strings");
      texts.push_back(x.get<std::string>());
    }
    auto g = OutputGrammar::choice(texts);
    if (!g) return bad(field, field + ": " + g.message());
    return set(field, std::move(g));
  };
  if (const auto* rf = rd.get("response_format")) {
    const auto type = rf->is_object() ? rf->find("type") : rf->end();
    if (!rf->is_object() || type == rf->end() || !type->is_string())
      return bad("response_format",
                 "response_format: expected {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      if (auto e = set("response_format", OutputGrammar::json_object())) return e;
    } else if (t == "json_schema") {
      const auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object() || !js->contains("schema"))
        return bad("response_format",
                   "response_format.json_schema.schema: required with type json_schema ({\"type\": \"json_schema\", "
                   "\"json_schema\": {\"name\": ..., \"schema\": {...}}})");
      if (auto e = schema_of("response_format.json_schema.schema", (*js)["schema"])) return e;
    } else if (t != "text") {
      return bad("response_format", "response_format.type: '" + t + "' is not one of text, json_object, json_schema");
    }
  }
  if (const auto* v = rd.get("guided_json"))
    if (auto e = schema_of("guided_json", *v)) return e;
  if (const auto* v = rd.get("json_schema"))
    if (auto e = schema_of("json_schema", *v)) return e;
  if (const auto* v = rd.get("guided_choice"))
    if (auto e = choices_of("guided_choice", *v)) return e;
  if (const auto* so = rd.get("structured_outputs")) {
    if (!so->is_object()) return bad("structured_outputs", "structured_outputs: expected an object");
    for (const auto& [k, v] : so->items()) {
      if (v.is_null()) continue;
      if (k == "json") {
        if (auto e = schema_of("structured_outputs.json", v)) return e;
      } else if (k == "choice") {
        if (auto e = choices_of("structured_outputs.choice", v)) return e;
      } else if (k == "json_object") {
        if (v == true)
          if (auto e = set("structured_outputs.json_object", OutputGrammar::json_object())) return e;
      } else if (k == "regex" || k == "grammar" || k == "structural_tag") {
        return bad("structured_outputs." + k, "structured_outputs." + k + ": not supported; " + kWhat);
      }
    }
  }
  return std::nullopt;
}

// Every "$ref": "#..." in a tool's parameters re-rooted under "#/$defs/<name>", where the combined
// schema of a required tool call keeps that tool's parameters.
void reroot_refs(nlohmann::ordered_json& j, const std::string& root) {
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) {
      if (k == "$ref" && v.is_string() && !v.get<std::string>().empty() && v.get<std::string>()[0] == '#')
        v = root + v.get<std::string>().substr(1);
      else
        reroot_refs(v, root);
    }
  } else if (j.is_array()) {
    for (auto& v : j) reroot_refs(v, root);
  }
}

// Chat `tools`, as OpenAI and vLLM accept them: an array of {"type": "function", "function":
// {"name", "description"?, "parameters"?, "strict"?}}. Checked on every request, not only when a
// call is forced: the chat template renders them into the prompt, where a string or a number
// would become whatever the template makes of it.
std::optional<ApiError> check_tools(const nlohmann::ordered_json& tools) {
  if (!tools.is_array())
    return bad("tools", "tools: expected an array of {\"type\": \"function\", \"function\": {\"name\": ...}}");
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return bad("tools", where + ": expected an object");
    if (!t.contains("type") || t["type"] != "function")
      return bad("tools", where + ".type: expected \"function\" (the only tool type)");
    if (!t.contains("function") || !t["function"].is_object())
      return bad("tools", where + ".function: expected an object with the function's \"name\"");
    const auto& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get_ref<const std::string&>().empty())
      return bad("tools", where + ".function.name: expected a non-empty string");
    if (f.contains("description") && !f["description"].is_string() && !f["description"].is_null())
      return bad("tools", where + ".function.description: expected a string");
    if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null())
      return bad("tools", where + ".function.parameters: expected a JSON Schema object");
    if (f.contains("strict") && !f["strict"].is_boolean() && !f["strict"].is_null())
      return bad("tools", where + ".function.strict: expected true or false");
  }
  return std::nullopt;
}

// Chat `tool_choice` "required" or {"type": "function", "function": {"name"}}: the output is held
// to the call's JSON (vLLM does the same with its guided decoding): the named function's arguments,
// or an array of one or more {"name", "arguments"} calls of any tool. "none" leaves the text as it
// is; "auto" reads the calls the model writes in its own format (parse_api_request, at the end).
std::optional<ApiError> read_tool_choice(Reader& rd, ApiRequest& r) {
  const auto* tc = rd.get("tool_choice");
  if (!tc || (tc->is_string() && (*tc == "auto" || *tc == "none"))) return std::nullopt;
  const bool required = tc->is_string() && *tc == "required";
  std::string name;
  if (!required) {
    if (!tc->is_object() || !tc->contains("function") || !(*tc)["function"].is_object() ||
        !(*tc)["function"].contains("name") || !(*tc)["function"]["name"].is_string())
      return bad("tool_choice",
                 "tool_choice: expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                 "\"function\": {\"name\": ...}}");
    name = (*tc)["function"]["name"].get<std::string>();
  }
  const auto* tools = rd.get("tools");
  if (!tools || !tools->is_array() || tools->empty())
    return bad("tool_choice", "tool_choice: forces a tool call, but the request has no tools");
  nlohmann::ordered_json calls = nlohmann::ordered_json::array(), defs = nlohmann::ordered_json::object();
  nlohmann::ordered_json named_params;
  bool found = false;
  for (size_t i = 0; i < tools->size(); ++i) {
    const auto& t = (*tools)[i];  // its shape was checked with the request (check_tools)
    const std::string fn = t["function"]["name"].get<std::string>();
    nlohmann::ordered_json params =
        t["function"].contains("parameters") && !t["function"]["parameters"].is_null()
            ? t["function"]["parameters"]
            : nlohmann::ordered_json{{"type", "object"}, {"properties", nlohmann::ordered_json::object()}};
    if (!required && fn == name) {
      named_params = params;
      found = true;
    }
    const std::string key = "tool" + std::to_string(i);
    reroot_refs(params, "#/$defs/" + key);
    defs[key] = std::move(params);
    calls.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", fn}}}, {"arguments", {{"$ref", "#/$defs/" + key}}}}},
                     {"required", {"name", "arguments"}},
                     {"additionalProperties", false}});
  }
  if (!required && !found) return bad("tool_choice", "tool_choice: no tool is named '" + name + "'");
  const nlohmann::ordered_json schema =
      required
          ? nlohmann::ordered_json{{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", calls}}}, {"$defs", defs}}
          : named_params;
  auto g = OutputGrammar::json_schema(schema);
  if (!g) return bad("tools", "tools: the parameters of the forced tool call: " + g.message());
  if (r.gen.sampling.grammar)
    return bad("tool_choice", "tool_choice: a forced tool call cannot be combined with another structured output");
  r.gen.sampling.grammar = std::move(*g);
  r.tool_choice = required ? "required" : name;
  r.tool_named = !required;
  return std::nullopt;
}

// Mistral's chat templates refuse a tool-call id that is not 9 characters long. Ids that other
// servers and client libraries make are longer ("call_" and 24 characters), so a conversation that
// comes back with them keeps their last 9 characters, as vLLM does for Mistral; the calls and
// their results still pair, since both ids shorten alike.
void shorten_call_ids_for_mistral(nlohmann::ordered_json& messages) {
  auto shorten = [](nlohmann::ordered_json& id) {
    if (!id.is_string()) return;
    std::string s = id.get<std::string>();
    if (s.size() > 9) id = s.substr(s.size() - 9);
  };
  if (!messages.is_array()) return;
  for (auto& m : messages) {
    if (!m.is_object()) continue;
    if (auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array())
      for (auto& c : *calls)
        if (c.is_object())
          if (auto id = c.find("id"); id != c.end()) shorten(*id);
    if (auto id = m.find("tool_call_id"); id != m.end()) shorten(*id);
  }
}

// OpenAI renamed the system role "developer" for its newer models, and its SDKs and agents (Codex
// CLI among them) send it; chat templates know only "system" (the strict ones refuse any other
// role, the lenient ones lose the instructions), so it is read as "system".
void developer_role_as_system(nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return;
  for (auto& m : messages)
    if (m.is_object())
      if (auto role = m.find("role"); role != m.end() && *role == "developer") *role = "system";
}

// vLLM now names an assistant message's thinking `reasoning`, llama.cpp and older vLLM
// `reasoning_content`; chat templates read `reasoning_content` (Qwen3's), so either arrives there.
void reasoning_as_reasoning_content(nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return;
  for (auto& m : messages)
    if (m.is_object() && m.contains("reasoning") && !m.contains("reasoning_content") && m["reasoning"].is_string())
      m["reasoning_content"] = m["reasoning"];
}

}  // namespace

ApiError model_not_found(const std::string& asked, const std::string& served) {
  ApiError e;
  e.status = 404;
  e.param = "model";
  e.code = "model_not_found";
  e.message = "The model `" + asked.substr(0, 200) + "` does not exist. This server serves `" + served + "`.";
  return e;
}

std::variant<ApiRequest, ApiError> parse_api_request(const std::string& body, bool chat, const ServerDefaults& d) {
  auto j = parse_ordered_json(body);
  if (j.is_discarded()) return bad("", "The request body is not valid JSON.");
  if (!j.is_object()) return bad("", "The request body must be a JSON object.");
  ApiRequest r;
  r.chat = chat;
  r.guard = d.guard;
  Reader rd{j, std::nullopt};
  GenerationRequest& g = r.gen;
  SamplingParams& s = g.sampling;
  std::vector<GenerationRequest> batch;  // a completions prompt given as an array of prompts, one each

  if (const auto* m = rd.get("model")) {
    if (!m->is_string()) return bad("model", "model: expected a string");
    r.model = m->get<std::string>();
    if (r.model != d.model_id) {
      return model_not_found(r.model, d.model_id);
    }
  }
  if (chat) {
    if (!rd.get("messages")) return bad("messages", "messages: required");
    g.messages = std::move(j["messages"]);  // moved, not copied: a long conversation is parsed once
    developer_role_as_system(*g.messages);
    reasoning_as_reasoning_content(*g.messages);
    if (d.tool_parser == ToolCallFormat::Mistral) shorten_call_ids_for_mistral(*g.messages);
  } else {
    const auto* p = rd.get("prompt");
    if (!p) return bad("prompt", "prompt: required");
    if (p->is_string()) {
      g.prompt = p->get<std::string>();
    } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
      g.prompt = (*p)[0].get<std::string>();
    } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
      if (auto e = read_token_ids(*p, "prompt", g.prompt_tokens)) return *e;
    } else if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
      // A batch of prompts, strings or token arrays (lm-evaluation-harness sends its requests so):
      // one choice each, in order.
      if (p->size() > kMaxChoices)
        return bad("prompt", "prompt: " + std::to_string(p->size()) + " prompts in one request; allowed at most " +
                                 std::to_string(kMaxChoices));
      const bool text = (*p)[0].is_string();
      for (size_t i = 0; i < p->size(); ++i) {
        const auto& e = (*p)[i];
        const std::string name = "prompt[" + std::to_string(i) + "]";
        if (text != e.is_string() || (!text && (!e.is_array() || e.empty())))
          return bad("prompt", name + ": a batch holds only strings or only non-empty token arrays");
        GenerationRequest one;
        if (text) {
          one.prompt = e.get<std::string>();
        } else if (auto err = read_token_ids(e, name, one.prompt_tokens)) {
          return *err;
        }
        batch.push_back(std::move(one));
      }
    } else {
      return bad("prompt", "prompt: expected a string, token ids, or an array of either");
    }
  }
  int n = 1;
  rd.number("n", n);
  if (!rd.error && (n < 1 || static_cast<size_t>(n) > kMaxChoices))
    return bad("n", "n: " + std::to_string(n) + " is out of range; allowed 1.." + std::to_string(kMaxChoices));
  int max_tokens = -1;
  rd.number("max_tokens", max_tokens);
  rd.number("max_completion_tokens", max_tokens);
  if (rd.error) return *rd.error;
  if (rd.get("max_tokens") || rd.get("max_completion_tokens")) g.max_tokens = max_tokens;
  rd.number("temperature", s.temperature);
  rd.number("top_p", s.top_p);
  rd.number("top_k", s.top_k);
  rd.number("min_p", s.min_p);
  rd.number("typical_p", s.typical_p);
  rd.number("frequency_penalty", s.frequency_penalty);
  rd.number("presence_penalty", s.presence_penalty);
  rd.number("repetition_penalty", s.repetition_penalty);
  rd.number("min_tokens", s.min_tokens);
  // llama.cpp server's names for the samplers it shares with coda (vLLM ignores what it lacks).
  rd.number("repeat_last_n", s.repetition_window);
  rd.number("top_n_sigma", s.top_n_sigma);
  rd.number("dynatemp_range", s.dynatemp_range);
  rd.number("dynatemp_exponent", s.dynatemp_exponent);
  rd.number("dry_multiplier", s.dry_multiplier);
  rd.number("dry_base", s.dry_base);
  rd.number("dry_allowed_length", s.dry_allowed_length);
  rd.number("dry_penalty_last_n", s.dry_window);
  rd.number("xtc_probability", s.xtc_probability);
  rd.number("xtc_threshold", s.xtc_threshold);
  rd.number("no_repeat_ngram_size", s.no_repeat_ngram_size);
  for (const char* key : {"bad_words", "dry_sequence_breakers"}) {
    const auto* v = rd.get(key);
    if (!v) continue;
    std::vector<std::string> words;
    if (!v->is_array()) return bad(key, std::string(key) + ": expected an array of strings");
    for (const auto& x : *v) {
      if (!x.is_string()) return bad(key, std::string(key) + ": expected an array of strings");
      words.push_back(x.get<std::string>());
    }
    (std::string(key) == "bad_words" ? s.bad_words : s.dry_sequence_breakers) = std::move(words);
  }
  rd.boolean("ignore_eos", s.ignore_eos);
  rd.boolean("include_stop_str_in_output", g.include_stop_str_in_output);
  rd.boolean("stream", r.stream);
  // Without a seed every request gets a fresh one (as OpenAI and vLLM behave); with one, it reproduces.
  int64_t seed = 0;
  rd.number("seed", seed);
  if (rd.error) return *rd.error;
  s.seed = rd.get("seed") ? static_cast<uint64_t>(seed)
                          : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  if (const auto* so = rd.get("stream_options")) {
    if (!so->is_object()) return bad("stream_options", "stream_options: expected an object");
    if (so->contains("include_usage")) {
      if (!(*so)["include_usage"].is_boolean())
        return bad("stream_options.include_usage", "stream_options.include_usage: expected true or false");
      r.include_usage = (*so)["include_usage"].get<bool>();
    }
    if (so->contains("continuous_usage_stats")) {
      if (!(*so)["continuous_usage_stats"].is_boolean())
        return bad("stream_options.continuous_usage_stats",
                   "stream_options.continuous_usage_stats: expected true or false");
      r.continuous_usage = r.include_usage && (*so)["continuous_usage_stats"].get<bool>();
    }
  }
  if (const auto* st = rd.get("stop")) {
    if (st->is_string()) {
      g.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      for (const auto& x : *st) {
        if (!x.is_string()) return bad("stop", "stop: expected a string or an array of strings");
        g.stop.push_back(x.get<std::string>());
      }
    } else {
      return bad("stop", "stop: expected a string or an array of strings");
    }
  }
  if (const auto* ids = rd.get("stop_token_ids")) {
    if (!ids->is_array()) return bad("stop_token_ids", "stop_token_ids: expected an array of integers");
    for (const auto& x : *ids) {
      if (!x.is_number_integer()) return bad("stop_token_ids", "stop_token_ids: expected an array of integers");
      const auto id = x.get<int64_t>();
      g.stop_token_ids.push_back(id < INT32_MIN || id > INT32_MAX ? -1 : static_cast<int32_t>(id));
    }
  }
  if (const auto* ids = rd.get("allowed_token_ids")) {
    if (!ids->is_array() || ids->empty())
      return bad("allowed_token_ids", "allowed_token_ids: expected a non-empty array of token ids");
    for (const auto& x : *ids) {
      if (!x.is_number_integer())
        return bad("allowed_token_ids", "allowed_token_ids: expected a non-empty array of token ids");
      const auto id = x.get<int64_t>();
      s.allowed_token_ids.push_back(id < INT32_MIN || id > INT32_MAX ? -1 : static_cast<int32_t>(id));
    }
  }
  if (rd.get("truncate_prompt_tokens")) {
    int64_t k = 0;
    rd.number("truncate_prompt_tokens", k);
    if (rd.error) return *rd.error;
    if (k == 0 || k < -1)
      return bad("truncate_prompt_tokens",
                 "truncate_prompt_tokens: " + std::to_string(k) + " is out of range; allowed -1 (the context) or >= 1");
    g.truncate_prompt_tokens = k;
  }
  rd.boolean("return_tokens_as_token_ids", r.tokens_as_ids);
  rd.boolean("skip_special_tokens", g.skip_special_tokens);
  // Sampling methods coda does not have: answering with plain sampling would hide that.
  bool beam = false;
  rd.boolean("use_beam_search", beam);
  if (rd.error) return *rd.error;
  if (beam)
    return bad("use_beam_search",
               "use_beam_search: beam search is not supported; use temperature 0 for the single most likely "
               "continuation, or n > 1 to sample several");
  int64_t mirostat = 0;
  rd.number("mirostat", mirostat);
  if (rd.error) return *rd.error;
  if (mirostat != 0)
    return bad("mirostat", "mirostat: " + std::to_string(mirostat) +
                               " is not supported (only 0, off); min_p or top_p bound the sampling instead");
  if (const auto* lb = rd.get("logit_bias")) {
    if (!lb->is_object()) return bad("logit_bias", "logit_bias: expected an object of token id -> bias");
    for (const auto& [k, v] : lb->items()) {
      char* end = nullptr;
      const long long id = std::strtoll(k.c_str(), &end, 10);
      if (k.empty() || *end != '\0' || id < INT32_MIN || id > INT32_MAX)
        return bad("logit_bias", "logit_bias: key '" + k + "' is not a token id");
      if (!v.is_number()) return bad("logit_bias", "logit_bias: the bias for token " + k + " must be a number");
      s.logit_bias[static_cast<int32_t>(id)] = v.get<float>();
    }
  }
  if (auto e = read_structured_output(rd, s)) return *e;
  if (chat) {
    bool continue_final = false;
    rd.boolean("add_generation_prompt", g.chat.add_generation_prompt);
    rd.boolean("continue_final_message", continue_final);
    if (rd.error) return *rd.error;
    if (continue_final) {
      if (rd.get("add_generation_prompt") && g.chat.add_generation_prompt)
        return bad("continue_final_message",
                   "continue_final_message: cannot be true together with add_generation_prompt; set "
                   "add_generation_prompt to false");
      g.chat.add_generation_prompt = false;
      g.chat.continue_final_message = true;
    }
    rd.boolean("logprobs", r.logprobs);
    rd.number("top_logprobs", r.top_logprobs);
    if (rd.error) return *rd.error;
    if (r.top_logprobs < 0 || r.top_logprobs > 20)
      return bad("top_logprobs", "top_logprobs: " + std::to_string(r.top_logprobs) + " is out of range; allowed 0..20");
    if (rd.get("top_logprobs") && !r.logprobs) return bad("top_logprobs", "top_logprobs: requires logprobs to be true");
    if (r.logprobs) g.logprobs = r.top_logprobs;
    if (const auto* tools = rd.get("tools"); tools && !tools->is_null()) {
      if (auto e = check_tools(*tools)) return *e;
      g.chat.tools = *tools;
    }
    if (auto e = read_tool_choice(rd, r)) return *e;
    if (const auto* kw = rd.get("chat_template_kwargs")) {
      if (!kw->is_object()) return bad("chat_template_kwargs", "chat_template_kwargs: expected an object");
      g.chat.extra = *kw;
    }
  } else {
    int lp = -1;
    rd.number("logprobs", lp);
    if (rd.error) return *rd.error;
    if (rd.get("logprobs")) {
      if (lp < 0 || lp > 20)
        return bad("logprobs", "logprobs: " + std::to_string(lp) + " is out of range; allowed 0..20");
      r.logprobs = true;
      r.top_logprobs = lp;
      g.logprobs = lp;
    }
    int best_of = 1;
    rd.number("best_of", best_of);
    rd.boolean("echo", r.echo);
    if (rd.error) return *rd.error;
    if (best_of != 1) return bad("best_of", "best_of: " + std::to_string(best_of) + " is not supported; only 1");
    if (r.echo && r.stream) return bad("echo", "echo: not supported with stream; send stream: false");
    if (r.echo && g.truncate_prompt_tokens != 0)
      return bad(
          "truncate_prompt_tokens",
          "truncate_prompt_tokens: cannot be combined with echo (the echoed prompt would not be the one scored)");
    // OpenAI's insert mode: text that must come after the completion. Ignoring it would answer a
    // fill-in-the-middle request with a plain continuation, so it is refused (as vLLM refuses it).
    if (const auto* sfx = rd.get("suffix");
        sfx && !sfx->is_null() && !(sfx->is_string() && sfx->get_ref<const std::string&>().empty()))
      return bad("suffix", "suffix: fill-in-the-middle is not supported; send the text before the gap as the prompt");
    // With logprobs, echo also scores the prompt: each prompt token's logprob given those before it.
    if (r.echo && r.logprobs) g.prompt_logprobs = r.top_logprobs;
  }
  // vLLM's prompt_logprobs: the same scores in its own shape (per choice, or top-level for chat).
  rd.number("prompt_logprobs", r.prompt_logprobs);
  if (rd.error) return *rd.error;
  if (rd.get("prompt_logprobs") && !rd.get("prompt_logprobs")->is_null()) {
    if (r.prompt_logprobs < 0 || r.prompt_logprobs > 20)
      return bad("prompt_logprobs",
                 "prompt_logprobs: " + std::to_string(r.prompt_logprobs) + " is out of range; allowed 0..20");
    if (r.stream) return bad("prompt_logprobs", "prompt_logprobs: not supported with stream; send stream: false");
    g.prompt_logprobs = std::max(g.prompt_logprobs, r.prompt_logprobs);
  } else {
    r.prompt_logprobs = -1;
  }
  if (rd.error) return *rd.error;
  if (const auto* rdp = rd.get("repetition_detection")) {
    auto p = parse_repetition_detection(*rdp, r.guard);
    if (p) return *p;
  }
  if (const auto* c = rd.get("coda")) {
    if (!c->is_object()) return bad("coda", "coda: expected an object");
    if (c->contains("trace")) {
      if (!(*c)["trace"].is_boolean()) return bad("coda.trace", "coda.trace: expected true or false");
      r.guard.trace = (*c)["trace"].get<bool>();
    }
    if (c->contains("guard")) {
      if (!(*c)["guard"].is_string())
        return bad("coda.guard", "coda.guard: expected observe, stop or repair (optionally with detectors: stop:loop)");
      if (Status s = set_guard_policy((*c)["guard"].get<std::string>(), r.guard); !s.ok())
        return bad("coda.guard", s.message());
    }
    if (c->contains("perpetual"))
      if (auto e = parse_perpetual((*c)["perpetual"], r.guard)) return *e;
    if (c->contains("reasoning_loop")) {
      const auto& v = (*c)["reasoning_loop"];
      if (!v.is_string() || (v != "answer" && v != "stop"))
        return bad("coda.reasoning_loop",
                   "coda.reasoning_loop: expected \"answer\" (close the thinking and let the model answer) or "
                   "\"stop\"");
      r.guard.thinking.answer_on_loop = v == "answer";
    }
  }
  if (auto e = parse_length_fields(j, d.effort_budgets, r.guard)) return *e;
  // A batch of one is a plain request; otherwise one generation per choice, prompt by prompt (prompt
  // i's n samples are choices i n .. i n + n - 1, as vLLM orders them), each with its own seed.
  if (batch.size() == 1 && n == 1) {
    g.prompt = std::move(batch[0].prompt);
    g.prompt_tokens = std::move(batch[0].prompt_tokens);
  } else if (batch.size() > 1 || n > 1) {
    const size_t prompts = std::max<size_t>(batch.size(), 1), total = prompts * static_cast<size_t>(n);
    if (total > kMaxChoices)
      return bad("n", std::to_string(prompts) + " prompts x n = " + std::to_string(n) + " is " + std::to_string(total) +
                          " choices; allowed at most " + std::to_string(kMaxChoices));
    if (total * body.size() > kMaxChoiceBytes)
      return bad("n", "n: " + std::to_string(total) + " choices of a " + std::to_string(body.size()) +
                          "-byte request is too much to hold; send fewer choices or a smaller request");
    if (r.stream) return bad("n", "n > 1 and batches of prompts need stream: false");
    const bool seeded = rd.get("seed") != nullptr;
    for (size_t i = 0; i < total; ++i) {
      GenerationRequest c = g;
      if (!batch.empty()) {
        c.prompt = batch[i / static_cast<size_t>(n)].prompt;
        c.prompt_tokens = batch[i / static_cast<size_t>(n)].prompt_tokens;
      }
      c.sampling.seed =
          seeded ? g.sampling.seed + i : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
      r.choices.push_back(std::move(c));
    }
    r.n = n;
  }
  // tool_choice "auto" (the default with tools): the reply may hold calls in the model's format.
  // Not with "none", nor with a JSON format (its document is the answer). A guided_choice text
  // that is a call in the model's format is a call: a router that picks one of canned calls.
  const auto* so = rd.get("structured_outputs");
  const bool choice_format =
      rd.get("guided_choice") || (so && so->is_object() && so->contains("choice") && !(*so)["choice"].is_null());
  if (r.chat && d.reasoning && (!r.gen.sampling.grammar || choice_format)) {
    r.reasoning = true;
    r.reasoning_opened = d.reasoning_opened;
  }
  r.reasoning_field = d.reasoning_field;
  r.guard.thinking.watch = r.reasoning;
  r.guard.thinking.opened = r.reasoning_opened;
  r.nine_char_call_ids = r.chat && d.tool_parser == ToolCallFormat::Mistral;
  if (r.chat && r.tool_choice.empty() && (!r.gen.sampling.grammar || choice_format) &&
      d.tool_parser != ToolCallFormat::None) {
    const auto* tools = rd.get("tools");
    const auto* tc = rd.get("tool_choice");
    if (tools && tools->is_array() && !tools->empty() && !(tc && tc->is_string() && *tc == "none"))
      r.tool_parse = d.tool_parser;
  }
  return r;
}

std::optional<ApiError> parse_length_fields(const nlohmann::ordered_json& body, const int64_t effort_budgets[3],
                                            GuardConfig& g) {
  auto field = [&](const char* key) -> const nlohmann::ordered_json* {
    const auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  // The top-level shorthand for coda.perpetual.min_tokens.
  if (const auto* pm = field("perpetual_min_tokens")) {
    if (!pm->is_number_integer() || pm->get<int64_t>() < 0 || pm->get<int64_t>() > (int64_t{1} << 30))
      return bad("perpetual_min_tokens", "perpetual_min_tokens: expected a number of tokens");
    g.perpetual_min_tokens = pm->get<int64_t>();
  }
  bool budget_given = false;
  for (const char* key : {"thinking_token_budget", "thinking_budget_tokens"}) {
    const auto* b = field(key);
    if (!b) continue;
    if (!b->is_number_integer() || b->get<int64_t>() < -1 || b->get<int64_t>() > (int64_t{1} << 30))
      return bad(key, std::string(key) + ": expected a number of tokens (-1: unlimited)");
    g.thinking.budget = b->get<int64_t>();
    budget_given = true;
  }
  if (const auto* e = field("reasoning_effort")) {
    const std::string v = e->is_string() ? e->get<std::string>() : "";
    const int level = v == "none" ? -1 : v == "minimal" || v == "low" ? 0 : v == "medium" ? 1 : v == "high" ? 2 : -2;
    if (level == -2) return bad("reasoning_effort", "reasoning_effort: expected none, minimal, low, medium or high");
    if (!budget_given) g.thinking.budget = level < 0 ? 0 : effort_budgets[level];
  }
  return std::nullopt;
}

std::optional<ApiError> parse_perpetual(const nlohmann::ordered_json& pv, GuardConfig& g) {
  if (!pv.is_object())
    return bad("coda.perpetual", "coda.perpetual: expected an object {min_tokens, backstep, start_factor, decay}");
  struct Field {
    const char* key;
    double lo, hi;
  };
  for (const Field fd : {Field{"min_tokens", 0, 1 << 30}, Field{"backstep", 0, 1 << 20}, Field{"start_factor", 1, 10},
                         Field{"decay", 0.001, 10}}) {
    if (!pv.contains(fd.key)) continue;
    const auto& v = pv[fd.key];
    const std::string name = std::string("coda.perpetual.") + fd.key;
    if (!v.is_number() || v.get<double>() < fd.lo || v.get<double>() > fd.hi)
      return bad(name, name + ": expected a number from " + std::to_string(fd.lo).substr(0, 5) + " to " +
                           std::to_string(static_cast<int64_t>(fd.hi)));
    const double x = v.get<double>();
    const std::string_view k = fd.key;
    if (k == "min_tokens") g.perpetual_min_tokens = static_cast<int64_t>(x);
    if (k == "backstep") g.eos_backstep = static_cast<int64_t>(x);
    if (k == "start_factor") g.perpetual.factor = static_cast<float>(x);
    if (k == "decay") g.perpetual.decay = static_cast<float>(x);
  }
  return std::nullopt;
}

std::optional<ApiError> parse_repetition_detection(const nlohmann::ordered_json& v, GuardConfig& g) {
  if (!v.is_object())
    return bad("repetition_detection",
               "repetition_detection: expected an object with max_pattern_size, min_pattern_size, min_count");
  int values[3] = {0, 0, 0};
  const char* keys[3] = {"max_pattern_size", "min_pattern_size", "min_count"};
  for (int k = 0; k < 3; ++k) {
    auto it = v.find(keys[k]);
    if (it == v.end() || it->is_null()) continue;
    const std::string name = std::string("repetition_detection.") + keys[k];
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 100000)
      return bad(name, name + ": expected a non-negative integer");
    values[k] = static_cast<int>(it->get<int64_t>());
  }
  const int max_p = values[0], min_p = values[1] == 0 ? 1 : values[1], count = values[2];
  if (max_p == 0) return std::nullopt;  // off, as in vLLM
  if (count < 2)
    return bad("repetition_detection.min_count",
               "repetition_detection.min_count: must be at least 2 when "
               "max_pattern_size is set");
  if (min_p > max_p)
    return bad("repetition_detection.min_pattern_size",
               "repetition_detection.min_pattern_size: must be <= max_pattern_size");
  if (max_p > g.max_period)
    return bad("repetition_detection.max_pattern_size",
               "repetition_detection.max_pattern_size: at most " + std::to_string(g.max_period) + " tokens");
  g.rd_max_pattern = max_p;
  g.rd_min_pattern = min_p;
  g.rd_min_count = count;
  return std::nullopt;
}

nlohmann::ordered_json stop_reason_json(const ApiRequest& r, const GenerationResult& g) {
  if (g.finish_reason != "stop" || g.stop_reason.empty()) return nullptr;
  const auto& strings = r.gen.stop;
  if (std::find(strings.begin(), strings.end(), g.stop_reason) != strings.end()) return g.stop_reason;
  double id = 0;
  const auto& ids = r.gen.stop_token_ids;
  if (parse_number(g.stop_reason, id) && std::find(ids.begin(), ids.end(), static_cast<int32_t>(id)) != ids.end())
    return static_cast<int64_t>(id);
  return nullptr;  // the model's own end of generation, as vLLM reports it
}

nlohmann::ordered_json usage_json(const GenerationResult& g, int64_t reasoning_tokens) {
  // prompt_tokens_details.cached_tokens as OpenAI reports it: prompt tokens served from the cache;
  // completion_tokens_details.reasoning_tokens: the completion's tokens inside the <think> block.
  nlohmann::ordered_json u{{"prompt_tokens", g.prompt_tokens},
                           {"completion_tokens", g.completion_tokens},
                           {"total_tokens", g.prompt_tokens + g.completion_tokens},
                           {"prompt_tokens_details", {{"cached_tokens", g.cached_tokens}}}};
  if (reasoning_tokens >= 0)
    u["completion_tokens_details"] = {{"reasoning_tokens", std::min<int64_t>(reasoning_tokens, g.completion_tokens)}};
  return u;
}

namespace {

std::string utf8_sanitize(const std::string& s) {
  std::string out;
  coda::utf8_sanitize(s, true, &out);
  return out;
}

}  // namespace

nlohmann::ordered_json bytes_of(const std::string& s) {
  auto a = nlohmann::ordered_json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

nlohmann::ordered_json logprobs_json(const ApiRequest& r, const std::vector<TokenLogprob>& lps, const Vocab& vocab,
                                     size_t& text_offset) {
  // A token as the client reads it: its text, or "token_id:N" (vLLM's return_tokens_as_token_ids).
  auto name = [&](int32_t id, const std::string& bytes) {
    return r.tokens_as_ids ? "token_id:" + std::to_string(id) : utf8_sanitize(bytes);
  };
  if (r.chat) {
    auto content = nlohmann::ordered_json::array();
    for (const auto& lp : lps) {
      nlohmann::ordered_json e{
          {"token", name(lp.token, lp.text)}, {"logprob", lp.logprob}, {"bytes", bytes_of(lp.text)}};
      auto& top = e["top_logprobs"] = nlohmann::ordered_json::array();
      for (const auto& [tid, l] : lp.top) {
        const std::string b = vocab.token_bytes(tid);
        top.push_back({{"token", name(tid, b)}, {"logprob", l}, {"bytes", bytes_of(b)}});
      }
      content.push_back(std::move(e));
    }
    return {{"content", content}};
  }
  auto tokens = nlohmann::ordered_json::array(), token_lps = nlohmann::ordered_json::array(),
       tops = nlohmann::ordered_json::array(), offsets = nlohmann::ordered_json::array();
  for (const auto& lp : lps) {
    tokens.push_back(name(lp.token, lp.text));
    if (lp.none) {  // the first prompt token, as OpenAI gives it
      token_lps.push_back(nullptr);
      tops.push_back(nullptr);
    } else {
      token_lps.push_back(lp.logprob);
      nlohmann::ordered_json top = nlohmann::ordered_json::object();
      for (const auto& [tid, l] : lp.top) top[name(tid, vocab.token_bytes(tid))] = l;
      tops.push_back(std::move(top));
    }
    offsets.push_back(text_offset);
    text_offset += lp.text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

nlohmann::ordered_json completion_body(const ApiRequest& r, const GuardedResult& g, const std::string& id,
                                       int64_t created, const Vocab& vocab) {
  const GenerationResult& res = g.result;
  nlohmann::ordered_json choice{{"index", 0}};
  size_t offset = 0;
  nlohmann::ordered_json logprobs = nullptr;
  // echo: the prompt as sent (token ids decoded), then the completion.
  const std::string echoed = !r.echo || r.chat             ? std::string()
                             : r.gen.prompt_tokens.empty() ? r.gen.prompt
                                                           : vocab.decode(r.gen.prompt_tokens);
  // The prompt's logprobs carry the larger of echo's and prompt_logprobs' top counts: each shape
  // shows its own.
  auto prompt_lps = [&](int top) {
    std::vector<TokenLogprob> lps = res.prompt_logprobs;
    for (auto& lp : lps)
      if (lp.top.size() > static_cast<size_t>(top)) lp.top.resize(static_cast<size_t>(top));
    return lps;
  };
  if (r.logprobs && r.echo) {
    // The prompt's tokens first (the first one's logprob is null), then the completion's. Their
    // pieces may be longer than the echoed prompt (a SentencePiece vocabulary's dummy-prefix
    // space): the offsets shift back by the difference, so the completion's index the text.
    logprobs = logprobs_json(r, prompt_lps(r.top_logprobs), vocab, offset);
    const auto extra = static_cast<int64_t>(offset) - static_cast<int64_t>(echoed.size());
    for (auto& o : logprobs["text_offset"]) o = std::max<int64_t>(0, o.get<int64_t>() - extra);
    offset = echoed.size();
    nlohmann::ordered_json tail = logprobs_json(r, res.logprobs, vocab, offset);
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (auto& e : tail[key]) logprobs[key].push_back(std::move(e));
  } else if (r.logprobs) {
    logprobs = logprobs_json(r, res.logprobs, vocab, offset);
  }
  const ReplyParts parts = reply_parts(r, res);
  if (r.chat && !parts.calls.is_null()) {
    choice["message"] = {
        {"role", "assistant"},
        {"content", parts.content.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(parts.content)},
        {"tool_calls", parts.calls}};
  } else if (r.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", parts.content}};
  } else {
    choice["text"] = echoed + res.text;
  }
  if (!parts.reasoning.empty()) choice["message"][r.reasoning_field] = parts.reasoning;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = parts.finish_reason;
  choice["stop_reason"] = stop_reason_json(r, res);
  nlohmann::ordered_json vllm_prompt = nullptr;
  if (r.prompt_logprobs >= 0) {
    // vLLM's shape: per prompt token null (the first) or {token id: {logprob, rank, decoded_token}}
    // for the token itself and its top alternatives.
    vllm_prompt = nlohmann::ordered_json::array();
    auto entry = [&](float logprob, int rank, int32_t id) {
      return nlohmann::ordered_json{
          {"logprob", logprob}, {"rank", rank}, {"decoded_token", utf8_sanitize(vocab.token_bytes(id))}};
    };
    for (const TokenLogprob& lp : prompt_lps(r.prompt_logprobs)) {
      if (lp.none) {
        vllm_prompt.push_back(nullptr);
        continue;
      }
      nlohmann::ordered_json d = nlohmann::ordered_json::object();
      d[std::to_string(lp.token)] = entry(lp.logprob, lp.rank, lp.token);
      for (size_t k = 0; k < lp.top.size(); ++k)
        if (lp.top[k].first != lp.token)
          d[std::to_string(lp.top[k].first)] = entry(lp.top[k].second, static_cast<int>(k) + 1, lp.top[k].first);
      vllm_prompt.push_back(std::move(d));
    }
    if (!r.chat) choice["prompt_logprobs"] = vllm_prompt;
  }
  nlohmann::ordered_json body{{"id", id},
                              {"object", r.chat ? "chat.completion" : "text_completion"},
                              {"created", created},
                              {"model", r.model.empty() ? "coda" : r.model},
                              {"choices", nlohmann::ordered_json::array({choice})},
                              {"usage", usage_json(res, r.reasoning ? g.report.reasoning_tokens : -1)}};
  if (r.chat && r.prompt_logprobs >= 0) body["prompt_logprobs"] = std::move(vllm_prompt);  // as vLLM places it
  body["coda"] = g.report.to_json();
  if (r.guard.trace) body["coda"]["trace"] = g.trace;
  return body;
}

ReplyParts reply_parts(const ApiRequest& r, const GenerationResult& g) {
  ReplyParts p;
  p.content = g.text;
  p.finish_reason = g.finish_reason;
  if (!r.chat) return p;
  if (r.reasoning) {
    ReasoningSplit split = split_reasoning(g.text, r.reasoning_opened);
    p.reasoning = std::move(split.reasoning);
    p.content = std::move(split.content);
  }
  auto call = [&](const std::string& name, const std::string& arguments) {
    if (p.calls.is_null()) p.calls = nlohmann::ordered_json::array();
    // A fresh id per call: the response id may repeat (it carries the client's X-Request-Id), and a
    // conversation must not hold two calls of one id.
    p.calls.push_back(
        {{"id", r.nine_char_call_ids ? random_hex_id().substr(0, 9) : "call_" + random_hex_id().substr(0, 24)},
         {"type", "function"},
         {"function", {{"name", name}, {"arguments", arguments}}}});
  };
  if (r.tool_parse != ToolCallFormat::None) {
    // The calls the model wrote in its own format (tool_choice "auto"): "tool_calls", as OpenAI
    // and vLLM answer; the content is the text outside them.
    ToolCallSplit split = split_tool_calls(r.tool_parse, p.content);
    if (split.calls.empty()) return p;
    for (const ParsedToolCall& c : split.calls) call(c.name, c.arguments);
    p.content = std::move(split.content);
    if (p.finish_reason == "stop") p.finish_reason = "tool_calls";
    return p;
  }
  if (r.tool_choice.empty() || g.finish_reason != "stop") return p;
  // A forced call: "tool_calls" for a required one, "stop" for a named one (OpenAI's values).
  if (!r.tool_named) p.finish_reason = "tool_calls";
  const auto doc = parse_ordered_json(g.text);
  if (doc.is_discarded()) return p;
  if (r.tool_named) {
    call(r.tool_choice, doc.dump());
  } else {
    if (!doc.is_array()) return p;
    for (const auto& c : doc)
      if (!c.is_object() || !c.contains("name") || !c["name"].is_string() || !c.contains("arguments")) return p;
    for (const auto& c : doc) call(c["name"].get<std::string>(), c["arguments"].dump());
  }
  p.content.clear();
  return p;
}

nlohmann::ordered_json stream_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                                    const std::string& text, const char* finish_reason, bool first) {
  nlohmann::ordered_json choice{{"index", 0}};
  if (r.chat) {
    nlohmann::ordered_json delta = nlohmann::ordered_json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason ? nlohmann::ordered_json(finish_reason) : nlohmann::ordered_json(nullptr);
  return {{"id", id},
          {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", r.model.empty() ? "coda" : r.model},
          {"choices", nlohmann::ordered_json::array({choice})}};
}

}  // namespace coda
