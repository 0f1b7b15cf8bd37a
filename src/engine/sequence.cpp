#include "engine/sequence.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/generator.h"

namespace coda {

namespace {

// `with_rank`: also the token's rank (vLLM's prompt_logprobs shows it), one more pass over the vocabulary.
TokenLogprob logprob_of(const float* logits, int32_t n_vocab, int32_t token, int top_n, const Vocab& vocab,
                        bool with_rank = false) {
  float max = logits[0];
  for (int32_t i = 1; i < n_vocab; ++i) max = std::max(max, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_z = max + std::log(sum);
  TokenLogprob lp;
  lp.token = token;
  lp.text = vocab.token_bytes(token);
  lp.logprob = static_cast<float>(logits[token] - log_z);
  if (with_rank)
    for (int32_t i = 0; i < n_vocab; ++i) lp.rank += logits[i] > logits[token];
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

bool contains(const std::vector<int32_t>& v, int32_t t) {
  return std::find(v.begin(), v.end(), t) != v.end();
}

}  // namespace

Sequence::Sequence(const GenerationRequest& r, const Vocab& v, KvCache kv, SamplerChain chain, SamplerVocab sv)
    : req_(r),
      vocab_(v),
      kv_(std::move(kv)),
      chain_(std::move(chain)),
      sv_(std::move(sv)),
      rng_(r.sampling.seed),
      stops_(r.stop, r.include_stop_str_in_output) {}

Expected<std::unique_ptr<Sequence>> Sequence::create(const Generator& gen, const GenerationRequest& r,
                                                     StreamCallback on_chunk, StepObserver* observer,
                                                     int64_t prefill_chunk, PrefixCache* cache) {
  Timer timer;
  CODA_RETURN_IF_ERROR(gen.validate(r));
  auto prompt = gen.prepare(r);
  if (!prompt) return prompt.error();
  const int n_prompt = static_cast<int>(prompt->tokens.size());
  if (r.pooling != Pooling::None && n_prompt == 0) return Error("input: empty; an embedding needs at least one token");
  auto max_tokens = gen.resolve_max_tokens(r, n_prompt, prompt->chat);
  if (!max_tokens) return max_tokens.error();
  auto sv = SamplerVocab::from(gen.vocab(), r.sampling, r.stop_token_ids,
                               prompt->chat ? end_of_turn_ids(gen.vocab()) : std::vector<int32_t>{},
                               r.sampling.grammar ? gen.grammar_tokens() : nullptr);
  if (!sv) return sv.error();
  auto chain = SamplerChain::create(r.sampling, *sv);
  if (!chain) return chain.error();
  auto kv = KvCache::create(gen.model().config(), n_prompt + *max_tokens);
  if (!kv) return kv.error();

  std::unique_ptr<Sequence> s(new Sequence(r, gen.vocab(), std::move(*kv), std::move(*chain), std::move(*sv)));
  s->request_timer_ = timer;
  s->on_chunk_ = std::move(on_chunk);
  s->observer_ = observer;
  s->max_tokens_ = *max_tokens;
  s->max_steps_ = 4 * static_cast<int64_t>(*max_tokens) + 64;  // repairs cannot loop forever
  s->prefill_chunk_ = std::max<int64_t>(1, prefill_chunk);
  const int64_t n_vocab = gen.model().config().n_vocab;
  s->logits_.resize(static_cast<size_t>(n_vocab));
  if (r.prompt_logprobs >= 0) {
    // Every prompt token's logits, a chunk at a time: 64 rows bound the buffer (32 MiB for a
    // 128K-token vocabulary). The prefix cache is skipped: a hit leaves no logits for its tokens.
    s->prefill_chunk_ = std::min<int64_t>(s->prefill_chunk_, 64);
    s->prompt_logits_.resize(static_cast<size_t>(s->prefill_chunk_ * n_vocab));
    cache = nullptr;
  }
  if (r.pooling != Pooling::None) {
    // Every prompt token's hidden state, a chunk at a time (256 rows: 8 MiB at dim 8,192); the
    // prefix cache is skipped, as for prompt logprobs.
    const int64_t dim = gen.model().config().dim;
    s->prefill_chunk_ = std::min<int64_t>(s->prefill_chunk_, 256);
    s->hidden_.resize(static_cast<size_t>(s->prefill_chunk_ * dim));
    s->pooled_.assign(static_cast<size_t>(dim), 0.0);
    s->logits_.clear();
    cache = nullptr;
  }
  s->decoder_.emplace(gen.vocab(), false, !r.skip_special_tokens);
  s->history_.prompt = std::move(prompt->tokens);
  s->res_.prompt_tokens = n_prompt;
  if (r.prompt_logprobs >= 0 && n_prompt > 0) {
    TokenLogprob lp;
    lp.token = s->history_.prompt[0];
    lp.text = gen.vocab().token_bytes(lp.token);
    lp.none = true;
    s->res_.prompt_logprobs.push_back(std::move(lp));
  }
  s->res_.timings.tokenize_ms = timer.ms();
  if (observer) observer->on_start(s->history_.prompt, prompt->text);
  if (cache != nullptr) s->prefilled_ = cache->restore(s->history_.prompt, s->kv_);
  s->res_.cached_tokens = static_cast<int>(s->prefilled_);
  const int64_t first = std::min<int64_t>(s->prefill_chunk_, n_prompt - s->prefilled_);
  s->pending_.assign(s->history_.prompt.begin() + s->prefilled_, s->history_.prompt.begin() + s->prefilled_ + first);
  s->phase_timer_.reset();
  return s;
}

std::vector<int32_t> Sequence::cached_token_ids() const {
  std::vector<int32_t> ids = history_.prompt;
  ids.insert(ids.end(), history_.generated.begin(), history_.generated.end());
  ids.resize(std::min(ids.size(), static_cast<size_t>(kv_.size())));
  return ids;
}

void Sequence::pool_hidden() {
  const size_t dim = pooled_.size(), n = pending_.size();
  const auto n_prompt = static_cast<int64_t>(history_.prompt.size());
  for (size_t i = 0; i < n; ++i) {
    const int64_t pos = prefilled_ + static_cast<int64_t>(i);
    const bool take = req_.pooling == Pooling::Mean || (req_.pooling == Pooling::Cls && pos == 0) ||
                      (req_.pooling == Pooling::Last && pos == n_prompt - 1);
    if (!take) continue;
    const float* row = hidden_.data() + i * dim;
    for (size_t k = 0; k < dim; ++k) pooled_[k] += row[k];
  }
  if (prefilled_ + static_cast<int64_t>(n) < n_prompt) return;
  if (req_.pooling == Pooling::Mean)
    for (double& v : pooled_) v /= static_cast<double>(n_prompt);
  double norm = 0;
  for (double v : pooled_) norm += v * v;
  norm = std::sqrt(norm);
  res_.embedding.resize(dim);
  for (size_t k = 0; k < dim; ++k) res_.embedding[k] = static_cast<float>(norm > 0 ? pooled_[k] / norm : 0.0);
}

void Sequence::cancel() {
  cancelled_ = true;
}

void Sequence::end(std::string reason) {
  res_.finish_reason = std::move(reason);
  pending_.clear();
  done_ = true;
}

void Sequence::advance(Status model_status) {
  if (done_) return;
  if (!model_status.ok()) {
    error_ = model_status.error();
    pending_.clear();
    done_ = true;
    return;
  }
  if (prefilling()) {
    if (req_.prompt_logprobs >= 0) {
      // Row i holds the logits after prompt token prefilled_ + i: the next prompt token's
      // logprob, or, after the last one, the logits the first sampled token comes from.
      const auto n_vocab = static_cast<int32_t>(logits_.size());
      const auto n_prompt = static_cast<int64_t>(history_.prompt.size());
      for (size_t i = 0; i < pending_.size(); ++i) {
        const float* row = prompt_logits_.data() + static_cast<int64_t>(i) * n_vocab;
        const int64_t next = prefilled_ + static_cast<int64_t>(i) + 1;
        if (next < n_prompt)
          res_.prompt_logprobs.push_back(
              logprob_of(row, n_vocab, history_.prompt[static_cast<size_t>(next)], req_.prompt_logprobs, vocab_, true));
        else
          std::copy(row, row + n_vocab, logits_.begin());
      }
    }
    if (embedding()) pool_hidden();
    prefilled_ += static_cast<int64_t>(pending_.size());
    if (embedding() && !prefilling()) {
      res_.timings.prefill_ms = phase_timer_.ms();
      return end("stop");
    }
    if (prefilling()) {  // the next chunk of the prompt
      const int64_t n = std::min<int64_t>(prefill_chunk_, static_cast<int64_t>(history_.prompt.size()) - prefilled_);
      pending_.assign(history_.prompt.begin() + prefilled_, history_.prompt.begin() + prefilled_ + n);
      return;
    }
    res_.timings.prefill_ms = phase_timer_.ms();
  } else {
    ++decode_steps_;
  }
  if (cancelled_) return end("abort");
  step();
}

// Back to the first `keep` generated tokens: tokens, text and cache; the token before the new end
// runs again to give the logits that follow it.
void Sequence::rollback(int64_t keep) {
  const size_t emitted = static_cast<size_t>(
      std::upper_bound(text_after_.begin(), text_after_.end(), stops_.streamed()) - text_after_.begin());
  // The token just sampled was never streamed (a stop token has no text, so it would count as
  // emitted): it can always go.
  const size_t k = std::min(std::max(static_cast<size_t>(std::max<int64_t>(keep, 0)), emitted),
                            res_.tokens.empty() ? size_t{0} : res_.tokens.size() - 1);
  const size_t streamed = stops_.streamed();
  if (k < res_.tokens.size()) {
    res_.tokens.resize(k);
    history_.generated.resize(k);
    if (res_.logprobs.size() > k) res_.logprobs.resize(k);
    decoder_.emplace(vocab_, false, !req_.skip_special_tokens);
    stops_ = StopMatcher(req_.stop, req_.include_stop_str_in_output);
    text_after_.clear();
    for (int32_t t : res_.tokens) {
      stops_.push(decoder_->push(t));
      text_after_.push_back(stops_.text().size());
    }
    stops_.mark_streamed(streamed);
  }
  const int64_t pos = static_cast<int64_t>(history_.prompt.size()) + static_cast<int64_t>(res_.tokens.size());
  (void)kv_.truncate(pos - 1);  // pos - 1 <= size: cannot fail
  if (observer_) observer_->on_rollback(static_cast<int64_t>(res_.tokens.size()));
  pending_.assign(1, res_.tokens.empty() ? history_.prompt.back() : res_.tokens.back());
}

void Sequence::step() {
  const int32_t n_vocab = static_cast<int32_t>(logits_.size());
  Timer sample_timer;
  int32_t token;
  const bool forced = forced_at_ < forced_.size();
  if (!forced && ban_end_for_ > 0) {
    // Just after a forced close the model must write something before it may end.
    for (int32_t id : sv_.eos_ids) logits_[static_cast<size_t>(id)] = -INFINITY;
    for (int32_t id : sv_.stop_ids) logits_[static_cast<size_t>(id)] = -INFINITY;
    --ban_end_for_;
  }
  if (forced) {
    token = forced_[forced_at_++];
  } else if (boost_) {
    SamplingParams hot = req_.sampling;
    hot.temperature = std::min(2.0f, std::max(req_.sampling.temperature, boost_->min_temperature) * boost_factor_);
    hot.repetition_penalty = std::min(2.0f, std::max(req_.sampling.repetition_penalty, boost_->penalty));
    auto hot_chain = SamplerChain::create(hot, sv_);
    if (!hot_chain) {
      error_ = hot_chain.error();
      pending_.clear();
      done_ = true;
      return;
    }
    token = hot_chain->sample(logits_.data(), n_vocab, history_, rng_);
    boost_factor_ -= boost_->decay;
    if (boost_factor_ <= 1.0f) boost_.reset();
  } else {
    token = chain_.sample(logits_.data(), n_vocab, history_, rng_);
  }
  res_.timings.sample_ms += sample_timer.ms();
  ++res_.tokens_sampled;
  if (res_.tokens_sampled == 1) {
    res_.timings.ttft_ms = request_timer_.ms();
    phase_timer_.reset();
  }
  res_.tokens.push_back(token);
  history_.generated.push_back(token);
  if (req_.logprobs >= 0) res_.logprobs.push_back(logprob_of(logits_.data(), n_vocab, token, req_.logprobs, vocab_));
  const bool is_stop_token =
      contains(sv_.stop_ids, token) || (!req_.sampling.ignore_eos && contains(sv_.eos_ids, token));
  if (!is_stop_token) stops_.push(decoder_->push(token));
  text_after_.push_back(stops_.text().size());
  if (observer_) {
    const StepView view{static_cast<int64_t>(res_.tokens.size()) - 1,
                        token,
                        logits_.data(),
                        n_vocab,
                        history_.prompt,
                        history_.generated,
                        stops_.text()};
    Timer observer_timer;
    const StepVerdict v = observer_->on_step(view);
    res_.timings.observer_ms += observer_timer.ms();
    if (v.stop) return end(v.finish_reason.empty() ? "stop" : v.finish_reason);
    if (v.inject && !v.repair && forced_at_ >= forced_.size() && res_.tokens_sampled < max_steps_) {
      if (v.inject->keep < static_cast<int64_t>(res_.tokens.size())) {
        ++res_.repairs;
        rollback(v.inject->keep);
      } else if (is_stop_token) {
        return end("stop");  // nothing to force after the model's own end
      } else {
        pending_.assign(1, token);
      }
      forced_ = v.inject->tokens;
      forced_at_ = 0;
      ban_end_for_ = v.inject->min_after;
      boost_.reset();
      return;
    }
    if (v.repair && res_.tokens_sampled < max_steps_) {
      ++res_.repairs;
      rollback(v.repair->keep);
      boost_ = v.repair;
      boost_factor_ = v.repair->factor;
      if (boost_factor_ <= 1.0f && v.repair->penalty <= 1.0f) boost_.reset();
      return;
    }
  }
  if (is_stop_token) {
    res_.stop_reason = std::to_string(token);
    return end("stop");
  }
  if (!stops_.matched().empty()) {
    res_.stop_reason = stops_.matched();
    return end("stop");
  }
  // With a stream delay, only the text of tokens old enough is released.
  const size_t n = text_after_.size();
  const size_t delay =
      static_cast<size_t>(std::max<int64_t>({0, req_.stream_delay_tokens, observer_ ? observer_->hold_back() : 0}));
  const size_t limit = delay == 0 ? std::string::npos : n > delay ? text_after_[n - 1 - delay] : 0;
  std::string ready = stops_.take_ready(limit);
  const auto released = static_cast<int64_t>(n > delay ? n - delay : 0);
  if (on_chunk_ && !on_chunk_(StreamChunk{token, std::move(ready), streamed_logprobs(false), released}))
    return end("abort");
  if (static_cast<int>(res_.tokens.size()) >= max_tokens_ || res_.tokens_sampled >= max_steps_) return end("length");
  pending_.assign(1, token);
}

// The logprobs not yet streamed of the tokens whose text is wholly streamed (all of them at the end).
std::vector<TokenLogprob> Sequence::streamed_logprobs(bool all) {
  if (req_.logprobs < 0) return {};
  size_t n = res_.logprobs.size();
  if (!all)
    n = std::min(n, static_cast<size_t>(std::upper_bound(text_after_.begin(), text_after_.end(), stops_.streamed()) -
                                        text_after_.begin()));
  if (n <= logprobs_streamed_) return {};
  std::vector<TokenLogprob> out(res_.logprobs.begin() + static_cast<std::ptrdiff_t>(logprobs_streamed_),
                                res_.logprobs.begin() + static_cast<std::ptrdiff_t>(n));
  logprobs_streamed_ = n;
  return out;
}

Expected<GenerationResult> Sequence::finish() {
  if (error_) return *error_;
  // The rest: held-back text (a partial stop match that never completed, an incomplete UTF-8
  // sequence, delayed tokens) belongs to the completion unless a stop string ended it.
  if (stops_.matched().empty()) stops_.push(decoder_->flush());
  std::string rest = stops_.take_rest();
  if (res_.finish_reason != "abort" && on_chunk_) {
    std::vector<TokenLogprob> lps = streamed_logprobs(true);
    if (!rest.empty() || !lps.empty())
      on_chunk_(StreamChunk{-1, std::move(rest), std::move(lps), static_cast<int64_t>(res_.tokens.size())});
  }
  res_.text = stops_.text();
  res_.completion_tokens = static_cast<int>(res_.tokens.size());
  auto& t = res_.timings;
  t.decode_ms = decode_steps_ > 0 ? phase_timer_.ms() : 0;
  t.ms_per_token = decode_steps_ > 0 ? t.decode_ms / decode_steps_ : 0;
  t.tokens_per_s = t.decode_ms > 0 ? decode_steps_ * 1000.0 / t.decode_ms : 0;
  t.prompt_tokens_per_s = t.prefill_ms > 0 ? res_.prompt_tokens * 1000.0 / t.prefill_ms : 0;
  return std::move(res_);
}

}  // namespace coda
