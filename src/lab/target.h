// What the lab sends requests to, behind one function (the vLLM benchmark's habit: every backend
// takes the same request and returns the same record). `HttpTarget` is any OpenAI-compatible
// server through the shared client; `EngineTarget` is coda's engine in this process, driven
// through the same request parsing and `Scheduler` as `coda serve`, so both paths measure the same
// thing.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "client/openai_client.h"
#include "engine/generator.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/scheduler.h"

namespace coda::lab {

class Target {
 public:
  virtual ~Target() = default;
  // Sends one OpenAI request body; never throws. `cancel` (when given) abandons it.
  virtual client::Completion send(const nlohmann::ordered_json& body, bool chat, const std::atomic<bool>* cancel) = 0;
  virtual std::string describe() const = 0;
  // Whether the model takes chat messages (an instruct model with a chat template), for `--api
  // auto`; `why` says how that was decided.
  virtual bool takes_chat(std::string& why) = 0;
};

// Request fields go out with OpenAI's and vLLM's names, which llama.cpp's server shares but for one:
// it reads the repetition penalty as `repeat_penalty` and ignores `repetition_penalty` without a
// word (ik_llama.cpp's server too), so a penalty that `coda tune` searched or `coda diagnose` tried
// would do nothing there. A server that names itself llama.cpp in /v1/models (`owned_by:
// "llamacpp"`, asked once, before the first request) is sent `repeat_penalty` beside it.
class HttpTarget : public Target {
 public:
  explicit HttpTarget(client::OpenAIClient client) : client_(std::move(client)) {}
  client::Completion send(const nlohmann::ordered_json& body, bool chat, const std::atomic<bool>* cancel) override;
  std::string describe() const override { return client_.describe(); }
  // llama.cpp and coda answer /props with the chat_template (coda with chat_template_source: a
  // built-in for a base model says no); other servers (vLLM) are asked a one-token chat request,
  // which a model without a chat template is refused (HTTP 400).
  bool takes_chat(std::string& why) override;
  const client::OpenAIClient& client() const { return client_; }
  bool speaks_llamacpp();  // /v1/models says llama.cpp (asked once; false when it cannot tell)

 private:
  client::OpenAIClient client_;
  std::once_flag probe_once_;
  bool llamacpp_ = false;
};

struct EngineTargetOptions {
  size_t max_batch = 8;  // --max-num-seqs, as coda serve
  int64_t kv_budget_tokens = 1 << 20;
  GuardConfig guard;  // observe by default: the lab measures what happens without intervention
  std::string model_id = "coda";
};

class EngineTarget : public Target {
 public:
  EngineTarget(Generator& gen, EngineTargetOptions opts);
  client::Completion send(const nlohmann::ordered_json& body, bool chat, const std::atomic<bool>* cancel) override;
  std::string describe() const override { return "in-process engine"; }
  // The GGUF carries tokenizer.chat_template (or --chat-template chose one).
  bool takes_chat(std::string& why) override;
  Metrics& metrics() { return metrics_; }

 private:
  Generator& gen_;
  ServerDefaults defaults_;
  Metrics metrics_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace coda::lab
