#include "tokenizer/hf_import.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace coda {

namespace {

Status import_unchecked(const std::string& path, TokenizerSpec* v) {
  std::ifstream in(path);
  if (!in) return Error("cannot open '" + path + "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return Error(path + ": invalid JSON: " + e.what());
  }
  if (!j.contains("model") || !j["model"].is_object() || j["model"].value("type", "") != "BPE" ||
      !j["model"].contains("vocab"))
    return Error(path + ": expected a Hugging Face tokenizer.json with a BPE model and a vocab");
  const auto& vocab = j["model"]["vocab"];
  int64_t n = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (it.value().get<int64_t>() < 0) return Error(path + ": negative token id for '" + it.key() + "'");
    n = std::max<int64_t>(n, it.value().get<int64_t>() + 1);
  }
  if (j.contains("added_tokens"))
    for (const auto& t : j["added_tokens"]) {
      if (t["id"].get<int64_t>() < 0) return Error(path + ": negative added-token id");
      n = std::max<int64_t>(n, t["id"].get<int64_t>() + 1);
    }
  if (n <= 0 || n > (1 << 24)) return Error(path + ": vocabulary size " + std::to_string(n) + " is out of range");
  v->tokens.assign(static_cast<size_t>(n), "");
  v->types.assign(static_cast<size_t>(n), 1);
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    v->tokens[static_cast<size_t>(it.value().get<int64_t>())] = it.key();
  if (j.contains("added_tokens")) {
    for (const auto& t : j["added_tokens"]) {
      const auto id = static_cast<size_t>(t["id"].get<int64_t>());
      v->tokens[id] = t["content"].get<std::string>();
      v->types[id] = t.value("special", false) ? 3 : 4;
    }
  }
  for (size_t i = 0; i < v->tokens.size(); ++i)
    if (v->tokens[i].empty()) {
      v->tokens[i] = "[PAD" + std::to_string(i) + "]";
      v->types[i] = 5;
    }
  if (j["model"].contains("merges")) {
    for (const auto& m : j["model"]["merges"]) {
      if (m.is_string())
        v->merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2)
        v->merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    }
  }
  const std::string dump = j.contains("pre_tokenizer") ? j["pre_tokenizer"].dump() : "";
  const bool byte_level = dump.find("ByteLevel") != std::string::npos;
  v->model = byte_level ? "gpt2" : "llama";
  // The pre-tokenizer is recognised by its exact split regex; anything else is refused rather than
  // approximated, since a different split silently changes every tokenization.
  v->pre = "default";
  if (byte_level && j["pre_tokenizer"].value("type", "") == "Sequence") {
    std::string regex;
    for (const auto& p : j["pre_tokenizer"]["pretokenizers"])
      if (p.value("type", "") == "Split" && p.contains("pattern") && p["pattern"].contains("Regex"))
        regex = p["pattern"]["Regex"].get<std::string>();
    const std::string llama3 =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    const std::string qwen2 =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    if (regex == llama3)
      v->pre = "llama-bpe";
    else if (regex == qwen2)
      v->pre = "qwen2";
    else if (!regex.empty())
      return Error(path + ": pre-tokenizer regex is not one coda knows (llama-bpe, qwen2, gpt2): " + regex);
  }
  if (v->pre == "qwen2" &&
      !(j.contains("normalizer") && j["normalizer"].is_object() && j["normalizer"].value("type", "") == "NFC"))
    return Error(path + ": a qwen2-style tokenizer without the NFC normalizer is not supported");
  auto find_id = [&](const char* s) -> int64_t {
    for (size_t i = 0; i < v->tokens.size(); ++i)
      if (v->tokens[i] == s) return static_cast<int64_t>(i);
    return -1;
  };
  // BOS/EOS and the chat template come from tokenizer_config.json beside the file when present.
  bool no_bos = false;
  const std::string cfg_path = std::filesystem::path(path).replace_filename("tokenizer_config.json").string();
  std::ifstream cfg_in(cfg_path);
  if (cfg_in) {
    nlohmann::json cfg;
    try {
      cfg = nlohmann::json::parse(cfg_in);
    } catch (const std::exception& e) {
      return Error(cfg_path + ": invalid JSON: " + e.what());
    }
    auto token_text = [&](const char* key) -> std::string {
      if (!cfg.contains(key)) return "";
      const auto& t = cfg[key];
      if (t.is_string()) return t.get<std::string>();
      if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
      return "";
    };
    if (const std::string b = token_text("bos_token"); !b.empty()) v->bos = find_id(b.c_str());
    if (cfg.contains("bos_token") && cfg["bos_token"].is_null()) no_bos = true;  // e.g. Qwen: no BOS
    if (const std::string e = token_text("eos_token"); !e.empty()) v->eos = find_id(e.c_str());
    if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
      v->chat_template = cfg["chat_template"].get<std::string>();
  }
  for (const char* b : {"<|begin_of_text|>", "<s>"})
    if (v->bos < 0 && !no_bos) v->bos = find_id(b);
  for (const char* e : {"<|end_of_text|>", "<|im_end|>", "</s>", "<|endoftext|>"})
    if (v->eos < 0) v->eos = find_id(e);
  for (const char* e : {"<|eot_id|>", "<|im_end|>"})
    if (v->eot < 0 && find_id(e) != v->eos) v->eot = find_id(e);
  return Status::Ok();
}

}  // namespace

Expected<TokenizerSpec> import_hf_tokenizer(const std::string& path) {
  // nlohmann::json throws on values of the wrong type; a malformed file is an error, not a crash.
  TokenizerSpec spec;
  try {
    CODA_RETURN_IF_ERROR(import_unchecked(path, &spec));
  } catch (const std::exception& e) {
    return Error(path + ": unexpected tokenizer.json content: " + e.what());
  }
  return spec;
}

void TokenizerSpec::write(GgufWriter& w) const {
  w.set_string("tokenizer.ggml.model", model);
  if (model == "gpt2") w.set_string("tokenizer.ggml.pre", pre);
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  if (!scores.empty()) w.set_f32_array("tokenizer.ggml.scores", scores);
  if (!merges.empty()) w.set_string_array("tokenizer.ggml.merges", merges);
  if (bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
  if (eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos));
  if (eot >= 0) w.set_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(eot));
  if (!chat_template.empty()) w.set_string("tokenizer.chat_template", chat_template);
  w.set_bool("tokenizer.ggml.add_bos_token", bos >= 0);
}

}  // namespace coda
