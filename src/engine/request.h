// What a generation request asks for and what it gets back: the types shared by the CLI, the
// server and the lab. Field names follow the OpenAI/vLLM API where one exists.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "sampling/params.h"

namespace coda {

// How an embedding request turns the prompt's final hidden states into one vector (llama.cpp's
// --pooling): their mean, the first token's (cls) or the last token's (decoder embedding models
// such as e5-mistral and Qwen3-Embedding are trained for the last).
enum class Pooling { None, Mean, Cls, Last };

struct GenerationRequest {
  // The prompt: chat `messages` (rendered with the model's template), else `prompt_tokens` if
  // given, else the `prompt` text.
  std::optional<nlohmann::ordered_json> messages;
  ChatOptions chat;  // tools, add_generation_prompt, template kwargs (bos/eos come from the model)
  std::string prompt;
  std::vector<int32_t> prompt_tokens;

  SamplingParams sampling;
  // vLLM's truncate_prompt_tokens: keep only the prompt's last K tokens (the start of a long
  // conversation goes first); -1: the context's size; 0: no truncation (too long is an error).
  int64_t truncate_prompt_tokens = 0;
  std::optional<int> max_tokens;  // omitted: the generator's default cap (4,096), within the context
  std::vector<std::string> stop;  // stop strings, matched across token boundaries, not in the text
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;  // vLLM
  bool skip_special_tokens = true;          // vLLM: false writes control tokens' text into the output
  int logprobs = -1;                        // -1: off; 0..20: chosen token's logprob plus this many top ones
  // -1: off; 0..20: also the logprob of every prompt token given the tokens before it, plus this
  // many top ones (OpenAI's `echo` with `logprobs`, vLLM's `prompt_logprobs`; what
  // lm-evaluation-harness scores answers with). The prompt then runs in full, without the prefix
  // cache, whose hits leave no logits behind.
  int prompt_logprobs = -1;
  // Stream only the text of tokens at least this many tokens old, so an observer can still roll
  // back recent tokens that nobody has seen (the guard's repair policy sets it).
  int stream_delay_tokens = 0;
  // Not None: an embedding request. The prompt runs in full (no prefix cache: a hit leaves no
  // hidden states) and nothing is generated; the result's `embedding` is the pooled final hidden
  // state, L2-normalised (as OpenAI's, vLLM's and llama-server's are).
  Pooling pooling = Pooling::None;
};

struct TokenLogprob {
  int32_t token = -1;
  std::string text;  // the token's bytes (may be a partial UTF-8 sequence)
  float logprob = 0;
  int rank = 1;  // prompt tokens: 1 + the number of tokens more probable than this one (vLLM's rank)
  std::vector<std::pair<int32_t, float>> top;  // most probable first
  bool none = false;  // the first prompt token: nothing precedes it, so it has no logprob (JSON null)
};

struct GenerationTimings {
  double tokenize_ms = 0;  // template rendering and tokenization
  double prefill_ms = 0;
  double ttft_ms = 0;       // request start to the first token sampled
  double decode_ms = 0;     // every decode step after the first token, sampling included
  double sample_ms = 0;     // of which the sampler chain
  double observer_ms = 0;   // and the observers (the guard)
  double ms_per_token = 0;  // decode_ms / decode steps
  double tokens_per_s = 0;  // decode throughput
  double prompt_tokens_per_s = 0;
};

struct GenerationResult {
  std::string text;
  std::vector<int32_t> tokens;  // every sampled token, the one that stopped generation included
  // "stop" (EOS, end of turn, a stop string or stop id), "length" (max_tokens or the context),
  // "abort" (the stream callback asked to stop), or an observer's reason (the guard's).
  std::string finish_reason;
  std::string stop_reason;  // the stop string, or the token id as text, that ended generation
  int prompt_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache (not prefilled)
  int completion_tokens = 0;
  GenerationTimings timings;
  std::vector<TokenLogprob> logprobs;         // when requested, one per completion token
  std::vector<TokenLogprob> prompt_logprobs;  // with prompt_logprobs, one per prompt token
  std::vector<float> embedding;               // an embedding request's vector (dim floats)
  int repairs = 0;                            // rollbacks an observer asked for
  int64_t tokens_sampled = 0;                 // every sampling step, rolled-back ones included
};

// One streamed piece: the text that became final with this token (may be empty while a partial
// stop-string match or an incomplete UTF-8 sequence is held back), and, when logprobs were
// requested, the logprobs of the tokens whose text is now wholly streamed (so a rolled-back token
// never shows, and a client can line tokens up with text).
struct StreamChunk {
  int32_t token;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  // Completion tokens so far that no rollback can take back (all of them without a stream delay):
  // a running count that never falls, for vLLM's continuous usage stats.
  int64_t tokens = 0;
};
// Returns false to stop generation (finish_reason "abort"), e.g. when a client disconnected.
using StreamCallback = std::function<bool(const StreamChunk&)>;

// What an observer sees after each sampled token (the guard and the lab; off by default).
struct StepView {
  int64_t step;         // 0 for the first generated token
  int32_t token;        // the token just sampled
  const float* logits;  // the raw logits it was sampled from
  int32_t n_vocab;
  const std::vector<int32_t>& prompt;
  const std::vector<int32_t>& generated;  // including `token`
  const std::string& text;                // the completion text so far
};
// Roll generation back and resample: keep the first `keep` generated tokens (never fewer than
// what was already streamed), then sample with the temperature raised to
// max(T, min_temperature) * factor, the factor falling by `decay` per token back to 1, and the
// repetition penalty at least `penalty` while it does.
struct RepairAction {
  int64_t keep = 0;
  float factor = 2.0f;
  float decay = 0.1f;
  float min_temperature = 0.7f;
  float penalty = 1.0f;
};
// Roll generation back to the first `keep` generated tokens (never fewer than what was already
// streamed), write `tokens` as if they had been sampled, then sample on with the end of generation
// banned for `min_after` tokens: how the guard closes a reasoning model's thinking so that it
// answers (guard/thinking.h).
struct ForcedText {
  int64_t keep = 0;
  std::vector<int32_t> tokens;
  int64_t min_after = 0;
};
struct StepVerdict {
  bool stop = false;
  std::string finish_reason;           // used when stop is set
  std::optional<RepairAction> repair;  // used when set (and stop is not)
  std::optional<ForcedText> inject;    // used when set (and neither of the above is)
};
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_start(const std::vector<int32_t>& /*prompt*/, const std::string& /*prompt_text*/) {}
  virtual StepVerdict on_step(const StepView& step) = 0;
  // Generation went back to the first `keep` generated tokens (after a repair).
  virtual void on_rollback(int64_t /*keep*/) {}
  // Tokens to hold back from the stream now, beyond the request's own stream delay (the guard,
  // while a reasoning model thinks and a loop there may still be taken back).
  virtual int64_t hold_back() const { return 0; }
};

}  // namespace coda
