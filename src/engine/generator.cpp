#include "engine/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>

#include "core/timer.h"
#include "engine/stop_matcher.h"
#include "sampling/chain.h"

namespace coda {

namespace {

constexpr size_t kMaxStops = 16;
constexpr size_t kMaxStopBytes = 1024;
constexpr int kMaxLogprobs = 20;

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(std::min(n, 16u));
}

TokenLogprob logprob_of(const float* logits, int32_t n_vocab, int32_t token, int top_n, const Vocab& vocab) {
  float max = logits[0];
  for (int32_t i = 1; i < n_vocab; ++i) max = std::max(max, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_z = max + std::log(sum);
  TokenLogprob lp;
  lp.token = token;
  lp.text = vocab.token_bytes(token);
  lp.logprob = static_cast<float>(logits[token] - log_z);
  if (top_n > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
    std::iota(idx.begin(), idx.end(), 0);
    const size_t n = std::min(static_cast<size_t>(top_n), idx.size());
    auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n), idx.end(), before);
    for (size_t i = 0; i < n; ++i) lp.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - log_z));
  }
  return lp;
}

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
  g->pool_ = std::make_unique<ThreadPool>(opts.threads > 0 ? opts.threads : hardware_threads());
  g->logits_.resize(static_cast<size_t>(model.config().n_vocab));
  return g;
}

Expected<LoadedGenerator> load_generator(const std::string& path, const GeneratorOptions& opts) {
  LoadedGenerator out;
  auto model = Model::load(path);
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
  return prepare_prompt(request, vocab_, chat_template());
}

Expected<int> Generator::resolve_max_tokens(const GenerationRequest& r, int prompt_tokens, bool chat) const {
  const int64_t room = n_ctx_ - prompt_tokens;
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
  Timer request_timer;
  CODA_RETURN_IF_ERROR(validate(r));
  auto prompt = prepare(r);
  if (!prompt) return prompt.error();
  const int n_prompt = static_cast<int>(prompt->tokens.size());
  auto max_tokens = resolve_max_tokens(r, n_prompt, prompt->chat);
  if (!max_tokens) return max_tokens.error();

  auto sv = SamplerVocab::from(vocab_, r.sampling, r.stop_token_ids,
                               prompt->chat ? end_of_turn_ids(vocab_) : std::vector<int32_t>{});
  if (!sv) return sv.error();
  auto chain = SamplerChain::create(r.sampling, *sv);
  if (!chain) return chain.error();
  auto contains = [](const std::vector<int32_t>& v, int32_t t) { return std::find(v.begin(), v.end(), t) != v.end(); };
  SamplerRng rng(r.sampling.seed);

  GenerationResult res;
  res.prompt_tokens = n_prompt;
  res.timings.tokenize_ms = request_timer.ms();

  const int64_t needed = n_prompt + *max_tokens;
  if (!kv_ || kv_->capacity() < needed) {
    kv_.reset();
    auto kv = KvCache::create(model_.config(), needed);
    if (!kv) return kv.error();
    kv_.emplace(std::move(*kv));
  }
  CODA_RETURN_IF_ERROR(kv_->truncate(0));

  Timer prefill_timer;
  CODA_RETURN_IF_ERROR(
      model_.forward(prompt->tokens.data(), n_prompt, *kv_, *pool_, buf_, logits_.data(), /*all_logits=*/false));
  res.timings.prefill_ms = prefill_timer.ms();

  TokenHistory history{std::move(prompt->tokens), {}};
  std::optional<StreamDecoder> decoder(std::in_place, vocab_);
  StopMatcher stops(r.stop, r.include_stop_str_in_output);
  std::vector<size_t> text_after;  // completion text length after each generated token
  const int32_t n_vocab = static_cast<int32_t>(logits_.size());
  Timer decode_timer;
  int decode_steps = 0;
  if (observer) observer->on_start(history.prompt, prompt->text);

  auto emit = [&](int32_t token, std::string text, const TokenLogprob* lp) {
    if (!on_chunk) return true;
    return on_chunk(StreamChunk{token, std::move(text), lp});
  };
  auto forward_one = [&](int32_t token) -> Status {
    ++decode_steps;
    return model_.forward(&token, 1, *kv_, *pool_, buf_, logits_.data(), false);
  };
  // Back to the first `keep` generated tokens: tokens, text, KV cache and the logits that follow.
  auto rollback = [&](int64_t keep) -> Status {
    const size_t emitted = static_cast<size_t>(
        std::upper_bound(text_after.begin(), text_after.end(), stops.streamed()) - text_after.begin());
    const size_t k = std::max(static_cast<size_t>(std::max<int64_t>(keep, 0)), emitted);
    if (k >= res.tokens.size()) return Status::Ok();
    const size_t streamed = stops.streamed();
    res.tokens.resize(k);
    history.generated.resize(k);
    if (res.logprobs.size() > k) res.logprobs.resize(k);
    decoder.emplace(vocab_);
    stops = StopMatcher(r.stop, r.include_stop_str_in_output);
    text_after.clear();
    for (int32_t t : res.tokens) {
      stops.push(decoder->push(t));
      text_after.push_back(stops.text().size());
    }
    stops.mark_streamed(streamed);
    const int64_t pos = n_prompt + static_cast<int64_t>(k);
    CODA_RETURN_IF_ERROR(kv_->truncate(pos - 1));
    if (observer) observer->on_rollback(static_cast<int64_t>(k));
    return forward_one(k > 0 ? res.tokens.back() : history.prompt.back());
  };

  std::optional<RepairAction> boost;  // an active temperature boost after a repair
  float boost_factor = 1.0f;
  const int64_t max_steps = 4 * static_cast<int64_t>(*max_tokens) + 64;  // repairs cannot loop forever
  while (true) {
    Timer sample_timer;
    int32_t token;
    if (boost) {
      SamplingParams hot = r.sampling;
      hot.temperature = std::min(2.0f, std::max(r.sampling.temperature, boost->min_temperature) * boost_factor);
      hot.repetition_penalty = std::min(2.0f, std::max(r.sampling.repetition_penalty, boost->penalty));
      auto hot_chain = SamplerChain::create(hot, *sv);
      if (!hot_chain) return hot_chain.error();
      token = hot_chain->sample(logits_.data(), n_vocab, history, rng);
      boost_factor -= boost->decay;
      if (boost_factor <= 1.0f) boost.reset();
    } else {
      token = chain->sample(logits_.data(), n_vocab, history, rng);
    }
    res.timings.sample_ms += sample_timer.ms();
    ++res.tokens_sampled;
    if (res.tokens.empty() && res.tokens_sampled == 1) {
      res.timings.ttft_ms = request_timer.ms();
      decode_timer.reset();
    }
    res.tokens.push_back(token);
    history.generated.push_back(token);
    const TokenLogprob* lp = nullptr;
    if (r.logprobs >= 0) {
      res.logprobs.push_back(logprob_of(logits_.data(), n_vocab, token, r.logprobs, vocab_));
      lp = &res.logprobs.back();
    }

    const bool is_stop_token =
        contains(sv->stop_ids, token) || (!r.sampling.ignore_eos && contains(sv->eos_ids, token));
    if (!is_stop_token) stops.push(decoder->push(token));
    text_after.push_back(stops.text().size());
    if (observer) {
      const StepView view{static_cast<int64_t>(res.tokens.size()) - 1,
                          token,
                          logits_.data(),
                          n_vocab,
                          history.prompt,
                          history.generated,
                          stops.text()};
      Timer observer_timer;
      const StepVerdict v = observer->on_step(view);
      res.timings.observer_ms += observer_timer.ms();
      if (v.stop) {
        res.finish_reason = v.finish_reason.empty() ? "stop" : v.finish_reason;
        break;
      }
      if (v.repair && res.tokens_sampled < max_steps) {
        ++res.repairs;
        CODA_RETURN_IF_ERROR(rollback(v.repair->keep));
        boost = v.repair;
        boost_factor = v.repair->factor;
        if (boost_factor <= 1.0f && v.repair->penalty <= 1.0f) boost.reset();
        continue;
      }
    }
    if (is_stop_token) {
      res.finish_reason = "stop";
      res.stop_reason = std::to_string(token);
      break;
    }
    if (!stops.matched().empty()) {
      res.finish_reason = "stop";
      res.stop_reason = stops.matched();
      break;
    }
    // With a stream delay, only the text of tokens old enough is released.
    const size_t n = text_after.size();
    const size_t limit = r.stream_delay_tokens <= 0 ? std::string::npos
                         : n > static_cast<size_t>(r.stream_delay_tokens)
                             ? text_after[n - 1 - static_cast<size_t>(r.stream_delay_tokens)]
                             : 0;
    if (!emit(token, stops.take_ready(limit), lp)) {
      res.finish_reason = "abort";
      break;
    }
    if (static_cast<int>(res.tokens.size()) >= *max_tokens || res.tokens_sampled >= max_steps) {
      res.finish_reason = "length";
      break;
    }
    CODA_RETURN_IF_ERROR(forward_one(token));
  }
  // The rest: held-back text (a partial stop match that never completed, an incomplete UTF-8
  // sequence, delayed tokens) belongs to the completion unless a stop string ended it.
  if (stops.matched().empty()) stops.push(decoder->flush());
  std::string rest = stops.take_rest();
  if (!rest.empty() && res.finish_reason != "abort") emit(-1, std::move(rest), nullptr);
  res.text = stops.text();
  res.completion_tokens = static_cast<int>(res.tokens.size());
  res.timings.decode_ms = decode_steps > 0 ? decode_timer.ms() : 0;
  res.timings.ms_per_token = decode_steps > 0 ? res.timings.decode_ms / decode_steps : 0;
  res.timings.tokens_per_s = res.timings.decode_ms > 0 ? decode_steps * 1000.0 / res.timings.decode_ms : 0;
  res.timings.prompt_tokens_per_s = res.timings.prefill_ms > 0 ? n_prompt * 1000.0 / res.timings.prefill_ms : 0;
  return res;
}

}  // namespace coda
