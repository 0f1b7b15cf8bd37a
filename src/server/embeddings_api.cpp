#include "server/embeddings_api.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/json_parse.h"
#include "model/model.h"

namespace coda {

namespace {

// One input as token ids: a non-empty array of non-negative integers that fit a token id.
std::optional<std::vector<int32_t>> token_ids_of(const nlohmann::ordered_json& a) {
  if (!a.is_array() || a.empty()) return std::nullopt;
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const auto& v : a) {
    if (!v.is_number_integer()) return std::nullopt;
    const auto x = v.get<int64_t>();
    if (x < 0 || x > std::numeric_limits<int32_t>::max()) return std::nullopt;
    ids.push_back(static_cast<int32_t>(x));
  }
  return ids;
}

}  // namespace

Expected<Pooling> parse_pooling(const std::string& name) {
  if (name == "mean") return Pooling::Mean;
  if (name == "cls" || name == "first") return Pooling::Cls;
  if (name == "last") return Pooling::Last;
  return Error("pooling '" + name +
               "': use mean (the average of every token's final state), cls (the first token's) or last (the last "
               "token's, for decoder embedding models)");
}

Pooling default_pooling(const Model& model) {
  auto t = model.gguf().get_int(model.config().arch_name + ".pooling_type");
  if (t && *t == 2) return Pooling::Cls;
  if (t && *t == 3) return Pooling::Last;
  return Pooling::Mean;
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::Mean:
      return "mean";
    case Pooling::Cls:
      return "cls";
    case Pooling::Last:
      return "last";
    case Pooling::None:
      break;
  }
  return "none";
}

std::variant<EmbeddingRequest, ApiError> parse_embedding_request(const std::string& body, Pooling pooling, int64_t dim,
                                                                 const std::string& model_id) {
  const auto j = parse_ordered_json(body);
  if (j.is_discarded()) return invalid_request("", "The request body is not valid JSON.");
  if (!j.is_object()) return invalid_request("", "The request body must be a JSON object.");
  auto field = [&](const char* k) -> const nlohmann::ordered_json* {
    auto it = j.find(k);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  EmbeddingRequest r;
  if (const auto* m = field("model")) {
    if (!m->is_string()) return invalid_request("model", "model: expected a string");
    r.model = m->get<std::string>();
    if (r.model != model_id) return model_not_found(r.model, model_id);
  }
  int64_t truncate = 0;
  if (const auto* t = field("truncate_prompt_tokens")) {
    if (!t->is_number_integer() || t->get<int64_t>() == 0 || t->get<int64_t>() < -1)
      return invalid_request("truncate_prompt_tokens",
                             "truncate_prompt_tokens: expected -1 (the context's size) or a positive integer");
    truncate = t->get<int64_t>();
  }
  if (const auto* f = field("encoding_format")) {
    if (!f->is_string() || (*f != "float" && *f != "base64"))
      return invalid_request("encoding_format", "encoding_format: expected \"float\" or \"base64\"");
    r.base64 = *f == "base64";
  }
  if (const auto* d = field("dimensions")) {
    if (!d->is_number_integer() || d->get<int64_t>() != dim)
      return invalid_request("dimensions", "dimensions: this model's embeddings have " + std::to_string(dim) +
                                               " dimensions and cannot be shortened; leave dimensions out or send " +
                                               std::to_string(dim));
  }
  const auto* input = field("input");
  if (input == nullptr)
    return invalid_request("input", "input: required (a string, an array of strings, or token ids)");
  auto add_text = [&](const nlohmann::ordered_json& s, const std::string& where) -> std::optional<ApiError> {
    if (s.get_ref<const std::string&>().empty())
      return invalid_request("input", where + ": an empty string has no embedding");
    GenerationRequest g;
    g.prompt = s.get<std::string>();
    g.pooling = pooling;
    g.truncate_prompt_tokens = truncate;
    r.inputs.push_back(std::move(g));
    return std::nullopt;
  };
  auto add_ids = [&](std::vector<int32_t> ids) {
    GenerationRequest g;
    g.prompt_tokens = std::move(ids);
    g.pooling = pooling;
    g.truncate_prompt_tokens = truncate;
    r.inputs.push_back(std::move(g));
  };
  const std::string shapes = "a string, an array of strings, an array of token ids or an array of token-id arrays";
  if (input->is_string()) {
    if (auto e = add_text(*input, "input")) return *e;
  } else if (input->is_array() && !input->empty()) {
    if (input->size() > kMaxEmbeddingInputs)
      return invalid_request("input", "input: " + std::to_string(input->size()) +
                                          " inputs is too many; allowed at most " +
                                          std::to_string(kMaxEmbeddingInputs) + " per request");
    if ((*input)[0].is_number()) {
      auto ids = token_ids_of(*input);
      if (!ids) return invalid_request("input", "input: token ids must be integers from 0 to the vocabulary's size");
      add_ids(std::move(*ids));
    } else {
      for (size_t i = 0; i < input->size(); ++i) {
        const auto& one = (*input)[i];
        const std::string where = "input[" + std::to_string(i) + "]";
        if (one.is_string()) {
          if (auto e = add_text(one, where)) return *e;
        } else if (one.is_array()) {
          auto ids = token_ids_of(one);
          if (!ids)
            return invalid_request("input", where + ": expected a non-empty array of token ids (integers from 0)");
          add_ids(std::move(*ids));
        } else {
          return invalid_request("input", where + ": expected " + shapes);
        }
      }
    }
  } else {
    return invalid_request("input", "input: expected " + shapes + " (and not empty)");
  }
  return r;
}

std::string floats_base64(const float* v, size_t n) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(n * sizeof(float), '\0');
  // x86-64 and every target coda builds for is little-endian, which is the byte order asked for.
  static_assert(sizeof(float) == 4);
  if (n > 0) std::memcpy(bytes.data(), v, bytes.size());
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t w = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kAlphabet[(w >> s) & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t w = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) w |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out.push_back(kAlphabet[(w >> 18) & 63]);
    out.push_back(kAlphabet[(w >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(w >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string embedding_head() {
  return "{\"object\":\"list\",\"data\":[";
}

std::string embedding_entry(size_t index, const std::vector<float>& v, bool base64) {
  std::string out = index > 0 ? "," : "";
  out += "{\"object\":\"embedding\",\"index\":" + std::to_string(index) + ",\"embedding\":";
  if (base64) return out + "\"" + floats_base64(v.data(), v.size()) + "\"}";
  out.reserve(out.size() + v.size() * 24 + 2);
  out += '[';
  char buf[32];
  for (size_t k = 0; k < v.size(); ++k) {
    if (k > 0) out += ',';
    // The shortest text that reads back as this float's exact value in double precision, which is
    // how JSON numbers are read: a client gets the same value from either encoding.
    const double x = std::isfinite(v[k]) ? static_cast<double>(v[k]) : 0.0;
    const auto res = std::to_chars(buf, buf + sizeof buf, x);
    out.append(buf, res.ptr);
  }
  return out + "]}";
}

std::string embedding_tail(const std::string& model, int64_t prompt_tokens) {
  const nlohmann::ordered_json usage{{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}};
  return "],\"model\":" + dump_json(model) + ",\"usage\":" + usage.dump() + "}";
}

}  // namespace coda
