#include "server/scheduler.h"

#include <algorithm>

#include "core/malloc_tuning.h"
#include "core/timer.h"

namespace coda {

void Ticket::push(std::string text, std::vector<TokenLogprob> logprobs, int64_t tokens) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tokens_ = std::max(tokens_, tokens);
    if (text.empty() && logprobs.empty()) return;
    chunks_.push_back(std::move(text));
    for (auto& l : logprobs) logprobs_.push_back(std::move(l));
  }
  cv_.notify_all();
}

void Ticket::finish(Expected<GuardedResult> result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    result_.emplace(std::move(result));
  }
  cv_.notify_all();
}

bool Ticket::wait(std::string& text, std::vector<TokenLogprob>& logprobs, bool& done,
                  std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !chunks_.empty() || result_.has_value(); });
  text.clear();
  while (!chunks_.empty()) {
    text += chunks_.front();
    chunks_.pop_front();
  }
  logprobs.clear();
  logprobs.swap(logprobs_);
  tokens_waited_ = tokens_;
  done = result_.has_value();
  return !text.empty() || !logprobs.empty() || done;
}

bool Ticket::wait_result(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return result_.has_value(); });
}

const Expected<GuardedResult>& Ticket::result() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return result_.has_value(); });
  return *result_;
}

Scheduler::Scheduler(Generator& gen, Metrics& metrics, SchedulerOptions opts)
    : gen_(gen),
      metrics_(metrics),
      opts_(opts),
      prefix_(opts.prefix_cache_tokens > 0
                  ? std::make_unique<PrefixCache>(gen.model().config(), opts.prefix_cache_tokens, &gen.pool())
                  : nullptr),
      worker_([this] { work(); }) {
  metrics_.set_help("coda:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.");
  metrics_.set_help("coda:prefix_cache_hits_total", "Prompt tokens whose KV came from the prefix cache.");
  metrics_.set_help("coda:prefix_cache_tokens", "Positions held by the prefix cache.");
  if (prefix_) {
    metrics_.add("coda:prefix_cache_queries_total", 0);
    metrics_.add("coda:prefix_cache_hits_total", 0);
    metrics_.set_gauge("coda:prefix_cache_tokens", 0);
  }
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& t : queue_) t->cancelled = true;
  }
  cv_.notify_all();
  slots_cv_.notify_all();
  worker_.join();
  for (auto& t : queue_) t->finish(Error(kShutdownMessage));
}

std::shared_ptr<Ticket> Scheduler::submit(ApiRequest request) {
  auto t = std::make_shared<Ticket>(std::move(request), alive_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || abort_ || queue_.size() >= opts_.max_queue) return nullptr;
    queue_.push_back(t);
    metrics_.set_gauge("coda:num_requests_waiting", static_cast<double>(queue_.size()));
  }
  cv_.notify_one();
  return t;
}

void Scheduler::pause() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = true;
    metrics_.set_gauge("coda:scheduler_paused", 1);
  }
  slots_cv_.notify_all();  // a /slots reader waiting for the next step takes what there is
}

void Scheduler::resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
    metrics_.set_gauge("coda:scheduler_paused", 0);
  }
  cv_.notify_all();
}

void Scheduler::abort_all() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    abort_ = true;
  }
  cv_.notify_all();
  slots_cv_.notify_all();
}

bool Scheduler::paused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return paused_;
}

size_t Scheduler::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void Scheduler::work() {
  std::vector<Active> active;
  int64_t kv_used = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // While nothing can run (paused, or idle), a queued request whose client left is dropped
      // within 100 ms and counted as an abort: a pause holds no one's place for a client that is gone.
      while (!(stop_ || abort_ || (!paused_ && (!queue_.empty() || !active.empty())))) {
        cv_.wait_for(lock, std::chrono::milliseconds(100));
        drop_cancelled_waiting();
      }
      if (stop_) break;
      if (abort_) {
        // The drain's time is up: everything ends now, the queue too, each with an answer that
        // tells its client to retry (server.cpp answers kShutdownMessage with 503).
        for (auto& t : queue_) t->finish(Error(kShutdownMessage));
        queue_.clear();
        for (auto& a : active) {
          a.seq->cancel();
          a.ticket->finish(Error(kShutdownMessage));
        }
        active.clear();
        kv_used = 0;
        running_ = 0;
        metrics_.set_gauge("coda:num_requests_waiting", 0);
        metrics_.set_gauge("coda:num_requests_running", 0);
        cv_.wait(lock, [&] { return stop_; });  // nothing more is admitted
        break;
      }
    }
    const bool admitted = admit(active, kv_used);
    if (active.empty()) {
      if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    step(active);
    // Finished sequences leave the batch; their caches go with them.
    bool finished = false;
    for (size_t i = 0; i < active.size();) {
      if (active[i].seq->done()) {
        finished = true;
        kv_used -= active[i].seq->kv().capacity();
        complete(active[i]);
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    publish_slots(active, admitted || finished || slots_wanted_.exchange(false));
    // Idle now: hand the finished requests' freed memory back to the system.
    if (active.empty() && running_ > 0) return_free_memory();
    running_ = active.size();
    int64_t in_cache = 0;
    for (const auto& a : active) in_cache += a.seq->tokens_in_cache();
    metrics_.set_gauge("coda:num_requests_running", static_cast<double>(active.size()));
    metrics_.set_gauge(
        "coda:kv_cache_usage_perc",
        static_cast<double>(in_cache) / static_cast<double>(std::max<int64_t>(1, opts_.kv_budget_tokens)));
  }
  for (auto& a : active) {
    a.seq->cancel();
    a.ticket->finish(Error(kShutdownMessage));
  }
}

// Taken when a request joins or leaves the batch and when a reader waits for it (slots()), not
// every step: a guard report walks the whole generation so far (its means and distinct bigrams),
// which every step would pay for each sequence while nobody looks.
void Scheduler::publish_slots(const std::vector<Active>& active, bool wanted) {
  if (!wanted) return;
  std::vector<SlotState> out;
  out.reserve(active.size());
  for (const auto& a : active) {
    const Sequence& s = *a.seq;
    SlotState st;
    st.slot = a.slot;
    st.task = a.task;
    st.prefilling = s.prefilling();
    st.n_ctx = s.kv().capacity();
    st.n_prompt_tokens = s.prompt_tokens();
    st.n_prompt_tokens_processed = s.prefilled_tokens();
    st.n_prompt_tokens_cached = s.cached_prompt_tokens();
    st.n_decoded = s.generated_tokens();
    st.n_remain = std::max<int64_t>(0, s.max_tokens() - st.n_decoded);
    st.seconds = a.ticket->since_arrival.ms() / 1000.0;
    st.sampling = s.request().sampling;
    st.guard = a.guard->report();
    out.push_back(std::move(st));
  }
  std::sort(out.begin(), out.end(), [](const SlotState& x, const SlotState& y) { return x.slot < y.slot; });
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_ = std::move(out);
    ++slots_version_;
  }
  slots_cv_.notify_all();
}

// A running batch is asked for a fresh copy, taken after its next step; a reader waits for it a
// moment at most (a long prefill step), then takes the last one. Paused or idle, the last one is
// the state.
std::vector<SlotState> Scheduler::slots() const {
  std::unique_lock<std::mutex> lock(mu_);
  if (!paused_ && running_ > 0) {
    const uint64_t seen = slots_version_;
    slots_wanted_ = true;
    slots_cv_.wait_for(lock, std::chrono::milliseconds(200),
                       [&] { return slots_version_ != seen || paused_ || stop_; });
  }
  return slots_;
}

// Drops the queued requests whose client left (the caller holds mu_).
void Scheduler::drop_cancelled_waiting() {
  const size_t before = queue_.size();
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (!(*it)->cancelled) {
      ++it;
      continue;
    }
    metrics_.add("coda:request_success_total", 1, "finished_reason", "abort");
    (*it)->finish(Error("cancelled"));
    it = queue_.erase(it);
  }
  if (queue_.size() != before) metrics_.set_gauge("coda:num_requests_waiting", static_cast<double>(queue_.size()));
}

// Takes the front of the queue, whatever becomes of it (admitted, cancelled, failed): the waiting
// gauge follows every pop, or a request cancelled in the queue would be counted as waiting forever.
void Scheduler::pop_waiting() {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.pop_front();
  metrics_.set_gauge("coda:num_requests_waiting", static_cast<double>(queue_.size()));
}

// Moves queued requests into the batch while there is room; returns whether any moved.
bool Scheduler::admit(std::vector<Active>& active, int64_t& kv_used) {
  bool any = false;
  while (active.size() < opts_.max_batch) {
    std::shared_ptr<Ticket> t;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) break;
      t = queue_.front();
    }
    if (t->cancelled) {  // the client left while waiting
      pop_waiting();
      metrics_.add("coda:request_success_total", 1, "finished_reason", "abort");
      t->finish(Error("cancelled"));
      continue;
    }
    GenerationRequest req = t->request.gen;
    auto guard = make_guard(gen_, req, t->request.guard);
    Ticket* raw = t.get();
    auto seq = Sequence::create(
        gen_, req,
        [raw](const StreamChunk& c) {
          raw->push(c.text, c.logprobs, c.tokens);
          return !raw->cancelled.load();
        },
        guard.get(), opts_.prefill_chunk, prefix_.get());
    if (!seq) {
      pop_waiting();
      metrics_.add("coda:request_success_total", 1, "finished_reason", "error");
      t->finish(seq.error());
      continue;
    }
    const int64_t need = (*seq)->kv().capacity();
    // Running sequences come before cached prefixes: evict what they need.
    if (prefix_ && kv_used + need + prefix_->tokens_held() > opts_.kv_budget_tokens)
      prefix_->shrink_to(opts_.kv_budget_tokens - kv_used - need);
    if (!active.empty() && kv_used + need > opts_.kv_budget_tokens) break;  // wait for room; order is kept
    pop_waiting();
    t->prompt_tokens = (*seq)->prompt_tokens();
    // Counted on admission only: a request that waits for room is created again on the next try.
    if (prefix_) {
      metrics_.add("coda:prefix_cache_queries_total", static_cast<double>((*seq)->prompt_tokens()));
      metrics_.add("coda:prefix_cache_hits_total", static_cast<double>((*seq)->cached_prompt_tokens()));
      metrics_.set_gauge("coda:prefix_cache_tokens", static_cast<double>(prefix_->tokens_held()));
    }
    kv_used += need;
    int slot = 0;  // the lowest free one
    while (std::any_of(active.begin(), active.end(), [slot](const Active& a) { return a.slot == slot; })) ++slot;
    active.push_back(Active{std::move(t), std::move(guard), std::move(*seq), slot, ++tasks_});
    any = true;
  }
  running_ = active.size();
  return any;
}

// One batched forward pass over every running sequence, then each one's next step.
void Scheduler::step(std::vector<Active>& active) {
  std::vector<BatchSeq> batch;
  std::vector<Sequence*> in_batch;
  std::vector<bool> was_prefilling;
  int64_t rows = 0;
  for (auto& a : active) {
    Sequence& s = *a.seq;
    if (a.ticket->cancelled) s.cancel();
    if (s.done()) continue;
    const auto& p = s.pending();
    if (p.empty()) continue;
    if (rows + static_cast<int64_t>(p.size()) > 256 && !batch.empty()) continue;  // next step
    batch.push_back({p.data(), static_cast<int64_t>(p.size()), &s.kv(), s.logits(), s.all_logits(), s.hidden()});
    in_batch.push_back(&s);
    was_prefilling.push_back(s.prefilling());
    rows += static_cast<int64_t>(p.size());
  }
  if (batch.empty()) return;
  metrics_.observe("coda:iteration_sequences", static_cast<double>(batch.size()));
  const Status st = gen_.model().forward_batch(batch, gen_.pool(), buf_);
  for (size_t i = 0; i < in_batch.size(); ++i) {
    Sequence* s = in_batch[i];
    s->advance(st);
    // A prompt just prefilled is cached at once, so that requests arriving while this one still
    // generates (the same system prompt, say) can use it.
    // Embedding inputs are not kept: they never read the cache, and a batch of them would evict the
    // conversations that do.
    if (prefix_ && st.ok() && was_prefilling[i] && !s->prefilling() && !s->embedding())
      prefix_->insert(s->cached_token_ids(), s->kv());
  }
  if (prefix_) metrics_.set_gauge("coda:prefix_cache_tokens", static_cast<double>(prefix_->tokens_held()));
}

void Scheduler::complete(Active& a) {
  // The whole conversation so far (prompt and reply) for the next turn of a chat.
  if (prefix_ && !a.seq->embedding()) {
    prefix_->insert(a.seq->cached_token_ids(), a.seq->kv());
    metrics_.set_gauge("coda:prefix_cache_tokens", static_cast<double>(prefix_->tokens_held()));
  }
  auto res = a.seq->finish();
  Ticket& t = *a.ticket;
  if (!res) {
    metrics_.add("coda:request_success_total", 1, "finished_reason", "error");
    t.finish(res.error());
    return;
  }
  GuardedResult out{std::move(*res), a.guard->report(), a.guard->trace()};
  const GenerationResult& g = out.result;
  metrics_.add("coda:prompt_tokens_total", g.prompt_tokens);
  metrics_.add("coda:generation_tokens_total", g.completion_tokens);
  metrics_.add("coda:request_success_total", 1, "finished_reason", g.finish_reason);
  if (t.request.gen.pooling == Pooling::None)  // an embedding has no first token
    metrics_.observe("coda:time_to_first_token_seconds", (t.since_arrival.ms() - (g.timings.decode_ms)) / 1000.0);
  if (g.completion_tokens > 1) metrics_.observe("coda:inter_token_latency_seconds", g.timings.ms_per_token / 1000.0);
  metrics_.observe("coda:e2e_request_latency_seconds", t.since_arrival.ms() / 1000.0);
  for (const auto& e : out.report.events) metrics_.add("coda:guard_events_total", 1, "type", e.type);
  metrics_.add("coda:guard_repairs_total", static_cast<double>(out.report.repairs.size()));
  record_reasoning(metrics_, out.report);
  t.finish(std::move(out));
}

}  // namespace coda
