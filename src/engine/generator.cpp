#include "engine/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/timer.h"
#include "engine/thread_choice.h"
#include "engine/sequence.h"
#include "sampling/chain.h"
#include "sampling/structured_output.h"

namespace coda {

namespace {

constexpr size_t kMaxStops = 16;
constexpr size_t kMaxStopBytes = 1024;
constexpr int kMaxLogprobs = 20;

}  // namespace

Generator::Generator(const Model& m, const Vocab& v, GeneratorOptions o)
    : model_(m), vocab_(v), opts_(std::move(o)), n_ctx_(opts_.n_ctx > 0 ? opts_.n_ctx : m.config().n_ctx_train) {}

Expected<std::unique_ptr<Generator>> Generator::create(const Model& model, const Vocab& vocab, GeneratorOptions opts) {
  if (opts.default_max_tokens < 1)
    return Error("default max_tokens: " + std::to_string(opts.default_max_tokens) + " is out of range; allowed >= 1");
  if (opts.n_ctx < 0) return Error("context size: " + std::to_string(opts.n_ctx) + " is out of range; allowed >= 1");
  std::unique_ptr<Generator> g(new Generator(model, vocab, opts));
  if (opts.chat_template.empty()) {
    auto t = ChatTemplate::for_model(model.gguf(), vocab);
    if (!t) return t.error();
    g->tmpl_ = std::move(*t);
  } else {
    auto t = ChatTemplate::builtin(opts.chat_template);
    if (!t) t = ChatTemplate::from_source(opts.chat_template);
    if (!t) return t.error();
    g->tmpl_ = std::move(*t);
  }
  if (opts.threads > 0) {
    g->threads_.threads = opts.threads;
    g->threads_.reason = "-t";
  } else {
    g->threads_ = choose_threads(model.decode_weight_bytes(), usable_cores());
  }
  g->pool_ = std::make_unique<ThreadPool>(g->threads_.threads);
  return g;
}

Expected<LoadedGenerator> load_generator(const std::string& path, const GeneratorOptions& opts) {
  LoadedGenerator out;
  LoadOptions lo;
  lo.kv_type_k = opts.kv_type_k;
  lo.kv_type_v = opts.kv_type_v;
  auto model = Model::load(path, lo);
  if (!model) return model.error();
  out.model = std::move(*model);
  auto vocab = Vocab::from_gguf(out.model->gguf());
  if (!vocab) return Error(path + ": " + vocab.message());
  out.vocab = std::make_unique<Vocab>(std::move(*vocab));
  auto gen = Generator::create(*out.model, *out.vocab, opts);
  if (!gen) return gen.error();
  out.generator = std::move(*gen);
  return out;
}

Status Generator::validate(const GenerationRequest& r) const {
  if (r.max_tokens && *r.max_tokens < 1)
    return Error("max_tokens: " + std::to_string(*r.max_tokens) + " is out of range; allowed >= 1");
  if (r.max_tokens && r.sampling.min_tokens > *r.max_tokens)
    return Error("min_tokens: " + std::to_string(r.sampling.min_tokens) + " is greater than max_tokens (" +
                 std::to_string(*r.max_tokens) + "); allowed 0..max_tokens");
  if (r.stop.size() > kMaxStops)
    return Error("stop: " + std::to_string(r.stop.size()) + " stop strings is too many; allowed at most " +
                 std::to_string(kMaxStops));
  for (size_t i = 0; i < r.stop.size(); ++i) {
    if (r.stop[i].empty()) return Error("stop[" + std::to_string(i) + "]: an empty stop string is not allowed");
    if (r.stop[i].size() > kMaxStopBytes)
      return Error("stop[" + std::to_string(i) + "]: " + std::to_string(r.stop[i].size()) +
                   " bytes is too long; allowed at most " + std::to_string(kMaxStopBytes));
  }
  if (r.logprobs < -1 || r.logprobs > kMaxLogprobs)
    return Error("logprobs: " + std::to_string(r.logprobs) + " is out of range; allowed 0.." +
                 std::to_string(kMaxLogprobs));
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > kMaxLogprobs)
    return Error("prompt_logprobs: " + std::to_string(r.prompt_logprobs) + " is out of range; allowed 0.." +
                 std::to_string(kMaxLogprobs));
  return r.sampling.validate(vocab_.size());
}

Status Generator::check(const GenerationRequest& r) const {
  CODA_RETURN_IF_ERROR(validate(r));
  auto prompt = prepare(r);
  if (!prompt) return prompt.error();
  auto max_tokens = resolve_max_tokens(r, static_cast<int>(prompt->tokens.size()), prompt->chat);
  if (!max_tokens) return max_tokens.error();
  for (int32_t id : r.stop_token_ids)
    if (id < 0 || id >= vocab_.size())
      return Error("stop_token_ids: " + std::to_string(id) + " is out of range; allowed 0.." +
                   std::to_string(vocab_.size() - 1));
  return Status::Ok();
}

Expected<Prompt> Generator::prepare(const GenerationRequest& request) const {
  auto prompt = prepare_prompt(request, vocab_, chat_template());
  if (!prompt || request.truncate_prompt_tokens == 0) return prompt;
  const int64_t keep = request.truncate_prompt_tokens < 0 ? n_ctx_ : request.truncate_prompt_tokens;
  if (keep > n_ctx_)
    return Error("truncate_prompt_tokens: " + std::to_string(keep) + " is more than the context (" +
                 std::to_string(n_ctx_) + " tokens); allowed -1 or 1.." + std::to_string(n_ctx_));
  if (static_cast<int64_t>(prompt->tokens.size()) > keep) {
    prompt->tokens.erase(prompt->tokens.begin(), prompt->tokens.end() - keep);
    prompt->text = vocab_.decode(prompt->tokens);  // what the guard profiles is what the model sees
  }
  return prompt;
}

Expected<int> Generator::resolve_max_tokens(const GenerationRequest& r, int prompt_tokens, bool chat) const {
  const int64_t room = n_ctx_ - prompt_tokens;
  if (r.pooling != Pooling::None) {  // an embedding: the input alone must fit
    if (room < 0)
      return Error("This model's maximum context length is " + std::to_string(n_ctx_) +
                   " tokens, however you requested " + std::to_string(prompt_tokens) +
                   " tokens in the input for embedding. Please reduce your input.");
    return 0;
  }
  auto too_long = [&](int64_t completion) {
    const std::string total = std::to_string(prompt_tokens + completion);
    if (chat)
      return Error("This model's maximum context length is " + std::to_string(n_ctx_) +
                   " tokens. However, you requested " + total + " tokens (" + std::to_string(prompt_tokens) +
                   " in the messages, " + std::to_string(completion) +
                   " in the completion). Please reduce the length of the messages or completion.");
    return Error("This model's maximum context length is " + std::to_string(n_ctx_) +
                 " tokens, however you requested " + total + " tokens (" + std::to_string(prompt_tokens) +
                 " in your prompt; " + std::to_string(completion) +
                 " for the completion). Please reduce your prompt; or completion length.");
  };
  if (r.max_tokens) {
    if (*r.max_tokens > room) return too_long(*r.max_tokens);
    return *r.max_tokens;
  }
  if (room < 1) return too_long(1);
  return static_cast<int>(std::min<int64_t>(opts_.default_max_tokens, room));
}

Expected<GenerationResult> Generator::generate(const GenerationRequest& r, const StreamCallback& on_chunk,
                                               StepObserver* observer) {
  auto seq = Sequence::create(*this, r, on_chunk, observer);
  if (!seq) return seq.error();
  Sequence& s = **seq;
  while (!s.done()) {
    const std::vector<int32_t>& p = s.pending();
    s.advance(model_.forward(p.data(), static_cast<int64_t>(p.size()), s.kv(), *pool_, buf_, s.logits(), s.all_logits(),
                             s.hidden()));
  }
  return s.finish();
}

std::shared_ptr<const GrammarTokens> Generator::grammar_tokens() const {
  std::lock_guard<std::mutex> lock(grammar_mu_);
  if (!grammar_tokens_) grammar_tokens_ = GrammarTokens::build(vocab_);
  return grammar_tokens_;
}

}  // namespace coda
