// Import of a Hugging Face tokenizer (tokenizer.json, and tokenizer_config.json beside it when
// present) into the GGUF tokenizer metadata coda and llama.cpp read (tokenizer.ggml.*).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf_writer.h"

namespace coda {

// A vocabulary as GGUF stores it.
struct TokenizerSpec {
  std::string model;  // "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;    // pre-tokenizer name for gpt2 models: llama-bpe, qwen2, default
  std::vector<std::string> tokens;
  std::vector<int32_t> types;  // TokenType values
  std::vector<float> scores;
  std::vector<std::string> merges;  // "left right", in rank order
  int64_t bos = -1, eos = -1, eot = -1;
  std::string chat_template;

  // Sets the tokenizer.* keys.
  void write(GgufWriter& w) const;
};

Expected<TokenizerSpec> import_hf_tokenizer(const std::string& tokenizer_json_path);

}  // namespace coda
