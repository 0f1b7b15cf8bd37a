// Generator: one sequence at a time on one model, the library API the CLI, the server and the lab
// share. It turns a request into prompt tokens, checks the length budget, prefills, samples with
// the request's own seeded chain, applies stop rules, streams text, and reports usage, timings and
// optional logprobs. Safe defaults: a request without max_tokens gets a bounded default; a
// request that cannot fit the context is refused with OpenAI's message, never truncated.
#pragma once

#include <memory>
#include <mutex>
#include <optional>

#include "chat/chat_template.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/thread_choice.h"
#include "engine/prompt.h"
#include "engine/request.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/vocab.h"

namespace coda {

struct GrammarTokens;  // sampling/structured_output.h

struct GeneratorOptions {
  int threads = 0;                // 0: as many as the model's steps are worth (engine/thread_choice.h)
  int64_t n_ctx = 0;              // 0: the model's trained context
  int default_max_tokens = 4096;  // the cap for requests that omit max_tokens
  std::string chat_template;      // "" : the model's own (or a built-in); else a built-in name or Jinja source
  // KV cache element types (load_generator passes them to the model load).
  KvType kv_type_k = KvType::F16;
  KvType kv_type_v = KvType::F16;
};

class Generator {
 public:
  // `model` and `vocab` must outlive the generator.
  static Expected<std::unique_ptr<Generator>> create(const Model& model, const Vocab& vocab, GeneratorOptions opts);

  Expected<GenerationResult> generate(const GenerationRequest& request, const StreamCallback& on_chunk = {},
                                      StepObserver* observer = nullptr);

  // Prompt tokens and the checks on them, without generating (tests, `coda template`-like tools).
  Expected<Prompt> prepare(const GenerationRequest& request) const;
  // Everything generate() checks before it starts (parameters, prompt, length budget), so a server
  // can refuse a request before it queues it. Thread-safe with a running generate().
  Status check(const GenerationRequest& request) const;
  // The max_tokens a request gets: its own (checked against the context) or the default cap.
  Expected<int> resolve_max_tokens(const GenerationRequest& request, int prompt_tokens, bool chat) const;

  int64_t n_ctx() const { return n_ctx_; }
  const Model& model() const { return model_; }
  ThreadPool& pool() { return *pool_; }
  // The thread count and why it was chosen ("-t" when the caller set it).
  const ThreadChoice& thread_choice() const { return threads_; }
  const ChatTemplate* chat_template() const { return tmpl_ ? &*tmpl_ : nullptr; }
  // The chat template is the model's own (tokenizer.chat_template) or one the user chose, not the
  // built-in a base model falls back to.
  bool chat_template_chosen() const {
    return !opts_.chat_template.empty() || model_.gguf().find("tokenizer.chat_template") != nullptr;
  }
  const Vocab& vocab() const { return vocab_; }
  // The vocabulary's token bytes as structured output walks them, built on first use and shared
  // by every request after (about 100 ms for a 128K vocabulary). Thread-safe.
  std::shared_ptr<const GrammarTokens> grammar_tokens() const;

 private:
  friend class Sequence;
  Generator(const Model& m, const Vocab& v, GeneratorOptions o);
  Status validate(const GenerationRequest& r) const;

  const Model& model_;
  const Vocab& vocab_;
  GeneratorOptions opts_;
  int64_t n_ctx_;
  std::optional<ChatTemplate> tmpl_;
  ThreadChoice threads_;
  std::unique_ptr<ThreadPool> pool_;
  ForwardBuffers buf_;
  mutable std::mutex grammar_mu_;
  mutable std::shared_ptr<const GrammarTokens> grammar_tokens_;
};

// A model file opened for generation: the model, its vocabulary and a generator over them (the
// generator is declared last, so it goes first).
struct LoadedGenerator {
  std::unique_ptr<Model> model;
  std::unique_ptr<Vocab> vocab;
  std::unique_ptr<Generator> generator;
};
Expected<LoadedGenerator> load_generator(const std::string& path, const GeneratorOptions& opts);

}  // namespace coda
