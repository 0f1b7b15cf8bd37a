// Byte-level BPE (GGUF tokenizer.ggml.model = "gpt2"): the tokenizer of Llama 3.x, Qwen2/2.5/3 and
// GPT-2. Text is split by the model's pre-tokenizer regex (PCRE2 with Unicode properties), each
// piece's bytes are mapped to printable characters (GPT-2's byte-to-unicode table), and adjacent
// symbols are merged in the rank order of the merges list.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace coda {

class ByteLevelBpe {
 public:
  // `pre` is the GGUF tokenizer.ggml.pre name; unknown names are an error listing the known ones.
  static Expected<std::shared_ptr<const ByteLevelBpe>> create(const std::vector<std::string>& pieces,
                                                              const std::vector<std::string_view>& merges,
                                                              const std::string& pre);
  ~ByteLevelBpe();

  // Encodes text with no special tokens (those are split out by the caller).
  void encode(std::string_view text, const std::unordered_map<std::string, int32_t>& index,
              std::vector<int32_t>* out) const;
  // The raw bytes of a byte-level piece (its characters mapped back through the table).
  static std::string piece_bytes(const std::string& piece);
  static const char* known_pre_tokenizers();

 private:
  ByteLevelBpe() = default;
  void encode_word(std::string_view word, const std::unordered_map<std::string, int32_t>& index,
                   std::vector<int32_t>* out) const;

  void* regex_ = nullptr;  // pcre2_code*
  bool ignore_merges_ = false;
  bool nfc_ = false;
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank
};

}  // namespace coda
