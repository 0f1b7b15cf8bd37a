// Turning a request into prompt tokens: chat messages through the chat template, text through the
// tokenizer, or token ids as given, with the checks that belong to each.
#pragma once

#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "core/status.h"
#include "engine/request.h"

namespace coda {

class Vocab;

struct Prompt {
  std::vector<int32_t> tokens;
  std::string text;  // the rendered chat prompt or the prompt text (empty for token input)
  bool chat = false;
};

// Special-token strings inside message content stay text: the prompt is rendered twice, the second
// time with every special-token string in the content replaced by filler of the same length, and
// the bytes that differ are tokenized as plain text. If the template's output changes shape
// because of such a string, the request is refused rather than tokenized ambiguously.
Expected<Prompt> prepare_prompt(const GenerationRequest& r, const Vocab& vocab, const ChatTemplate* chat_template);

// Ids of the end-of-turn tokens chat templates end an assistant message with (<|eot_id|>,
// <|im_end|>, <|end|>, <end_of_turn>, ...), where the vocabulary has them.
std::vector<int32_t> end_of_turn_ids(const Vocab& vocab);

}  // namespace coda
