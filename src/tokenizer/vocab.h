// A model's vocabulary from GGUF metadata (tokenizer.ggml.*) and the SentencePiece-style tokenizer
// Llama 2, Mistral and the bundled model use. (Byte-level BPE arrives with the tokenizer issue.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "tokenizer/bpe.h"

namespace coda {

enum class TokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

class Vocab {
 public:
  static Expected<Vocab> from_gguf(const GgufFile& f);

  const std::string& model() const { return model_; }  // "llama" (SentencePiece) or "gpt2"
  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }  // end of turn (chat models), -1 if none
  bool add_bos() const { return add_bos_; }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  // The id of a piece as stored in the vocabulary (special tokens are stored as their text); -1 if absent.
  int32_t find(const std::string& piece) const {
    auto it = index_.find(piece);
    return it == index_.end() ? -1 : it->second;
  }
  TokenType type(int32_t id) const { return types_[static_cast<size_t>(id)]; }
  bool is_eog(int32_t id) const { return id == eos_ || id == eot_; }

  // Encodes text. Special-token text inside `text` ("<|eot_id|>", "</s>") is ordinary text unless
  // `parse_special` is set, which only templates that produced the text themselves should do.
  // `text_only` (sorted, non-overlapping [begin, end) byte ranges) marks stretches that stay text
  // even then: user content inside a rendered chat prompt.
  Expected<std::vector<int32_t>> encode(std::string_view text, bool add_bos, bool parse_special = false,
                                        const std::vector<std::pair<size_t, size_t>>& text_only = {}) const;
  // Ids of the control and user-defined tokens that encode(parse_special) recognises.
  const std::vector<int32_t>& special_ids() const { return specials_; }
  // Bytes a token contributes to the output (byte pieces as raw bytes, control tokens as nothing).
  std::string token_bytes(int32_t id) const;
  // Decodes a whole sequence to valid UTF-8 (invalid bytes become U+FFFD, as Hugging Face's
  // decode does); the SentencePiece dummy-prefix space of the first piece is removed.
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  std::vector<int32_t> encode_spm(std::string_view text) const;
  void encode_plain(std::string_view text, std::vector<int32_t>* out) const;

  std::string model_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string, int32_t> index_;
  int32_t byte_tokens_[256];
  std::shared_ptr<const ByteLevelBpe> bpe_;  // gpt2 models
  std::vector<int32_t> specials_;            // control and user-defined tokens, longest text first
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, unk_ = -1;
  bool add_bos_ = false, add_space_prefix_ = true;
};

// Turns tokens into text as they arrive: only valid UTF-8 comes out (invalid bytes become U+FFFD,
// a character split across tokens waits for its last byte), and the concatenation of everything
// pushed and flushed equals Vocab::decode of the same tokens.
class StreamDecoder {
 public:
  // `strip_leading_space` drops the SentencePiece dummy-prefix space of the first piece: right when
  // decoding a whole text, wrong when continuing after a prompt.
  // `keep_control`: control tokens (<s>, <|im_start|>) come out as their text, as vLLM writes them
  // with skip_special_tokens false; else as nothing.
  explicit StreamDecoder(const Vocab& v, bool strip_leading_space = false, bool keep_control = false)
      : vocab_(v), first_(strip_leading_space), keep_control_(keep_control) {}
  // Returns the text that became complete with this token.
  std::string push(int32_t id);
  // Whatever remains (an incomplete sequence at the end of generation, as replacement chars).
  std::string flush();

 private:
  const Vocab& vocab_;
  std::string pending_;
  bool first_;
  bool keep_control_;
};

}  // namespace coda
