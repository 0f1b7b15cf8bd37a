// One client request through the proxy: the upstream generation (always streamed, so it can be
// cancelled the moment the guard decides), the guard on its tokens, and the policy.
//
// - observe: text goes to the client as it arrives; the guard only reports.
// - stop: as observe until the guard fires; then the upstream connection is closed (vLLM and
//   llama.cpp abort a generation whose client left) and the client gets finish_reason
//   "repetition" or "degenerate".
// - repair: the last `hold_back` units are held from the client. On an event the upstream is
//   cancelled, the held text is rolled back to before the loop, and the upstream is asked to
//   continue the accepted text: hotter (temperature and repetition_penalty raised, as coda's own
//   repair does) for `hot_tokens`, then with the request's own sampling. Continuation is the
//   prompt plus the accepted text on /v1/completions, and the accepted text as a final assistant
//   message with continue_final_message on chat (vLLM; llama.cpp continues a trailing assistant
//   message by itself). Rolled-back text never reaches the client. A generation that sent
//   reasoning or tool calls is stopped instead: neither can be continued from the middle.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/openai_client.h"
#include "guard/guard.h"

namespace coda::proxy {

struct SessionOptions {
  GuardConfig guard;
  int top_logprobs = 20;  // asked of the upstream (vLLM's default --max-logprobs, OpenAI's cap)
  int hot_tokens = 50;    // tokens sampled hotter after a repair
  // Whether the client has left, asked while the upstream is silent (a long prefill): then the
  // upstream connection closes and the result is client_gone. Empty: only a failed emit tells.
  std::function<bool()> client_left;
  // The client's X-Request-Id (or the proxy's own), sent upstream: as it is on the first request,
  // with "-r1", "-r2", ... on the requests that continue after a repair (a server such as vLLM may
  // still be aborting the earlier one, and refuses an id that is running).
  std::string request_id;
  // The upstream's engine (empty: Unknown). llama.cpp's server reads the repetition penalty only
  // as `repeat_penalty` and ignores vLLM's `repetition_penalty`, so the client's penalty and a
  // repair's are then sent by that name too; and the usage each engine can report as it streams
  // is asked for.
  std::function<client::Engine()> engine;
  // --upstream-reasoning-budget forward: the upstream enforces the client's thinking budget fields
  // (they are sent on); otherwise (enforce) the proxy closes the thinking at guard.thinking.budget
  // and the fields stay here.
  bool forward_budget = false;
};

// What the client asked to see.
struct ClientView {
  bool chat = false;
  bool logprobs = false;  // chat logprobs=true, completions logprobs=N
  int top_logprobs = 0;
};

// What one release hands the client. The guard watches everything the model generates, in order
// (a reasoning model loops in its reasoning as often as in its answer, and a tool call's arguments
// can run on too); each part goes back in the field the upstream sent it in.
struct Released {
  std::string content;
  std::string reasoning;                            // chat: vLLM's reasoning parsers' field
  std::string reasoning_key = "reasoning_content";  // or "reasoning", as the upstream named it
  nlohmann::ordered_json tool_calls;  // chat: delta form [{index, id, type, function: {name, arguments}}]; null if none
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.is_null(); }
};

// A release for the client and the logprobs of the tokens it completes (when the client asked).
// Returns false when the client is gone.
using Emit = std::function<bool(const Released& out, const std::vector<client::TokenLogprob>& logprobs,
                                const nlohmann::ordered_json& upstream_chunk)>;

struct SessionResult {
  bool ok = false;
  client::Completion failure;  // when !ok: what the upstream said
  bool emitted = false;        // some text reached the client before a failure
  bool client_gone = false;
  std::string text;       // what the client received as content
  std::string reasoning;  // ... as reasoning (chat), in the field named reasoning_key
  std::string reasoning_key = "reasoning_content";
  nlohmann::ordered_json
      tool_calls;  // ... as tool calls (chat), whole: [{id, type, function: {name, arguments}}]; null if none
  std::string finish_reason;
  std::string stop_reason;  // the upstream's, when a stop string ended the text (vLLM, coda)
  int64_t prompt_tokens = -1, completion_tokens = -1;
  bool usage_estimated = false;
  GuardReport report;
  int upstream_requests = 0;
  int upstream_cancellations = 0;
  bool upstream_overrun = false;           // the upstream wrote past max_tokens and was cut there
  bool text_only = false;                  // guarded on text pieces, without token signals
  bool logprobs_refused = false;           // the upstream refused logprobs; retried without
  int64_t tokens_saved = 0;                // max_tokens minus what was generated, when the guard stopped
  int64_t upstream_reasoning_tokens = -1;  // the upstream's completion_tokens_details.reasoning_tokens
  int perpetual_backsteps = 0;             // early ends stepped back from (perpetual generation)
  nlohmann::ordered_json last_chunk;       // the upstream's last chunk (id, model, created, ...)
};

// Runs `body` (the client's request, max_tokens already set) against `upstream`.
SessionResult run_session(const client::OpenAIClient& upstream, const nlohmann::ordered_json& body,
                          const ClientView& view, const SessionOptions& options, const Emit& emit);

// The prompt text the guard compares languages against: the completion prompt, or the chat's
// message contents.
std::string prompt_text_of(const nlohmann::ordered_json& body, bool chat);

}  // namespace coda::proxy
