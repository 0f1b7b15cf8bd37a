// The request scheduler between the HTTP threads and the model: continuous batching. Requests
// wait in a bounded queue; a worker thread admits them into the running batch while the batch has
// room (at most `max_batch` sequences, their KV caches within `kv_budget_tokens`), and every step
// runs one batched forward pass over all running sequences: one token each for those decoding, a
// chunk of at most `prefill_chunk` prompt tokens for those prefilling (so a long prompt never stalls
// the streams already running). Sequences join and leave between steps, in arrival order. Each
// runs under the degeneration guard; its Ticket carries streamed text and the result back to its
// HTTP thread. A cancelled ticket (the client went away) ends its sequence at the next step, or is
// dropped from the queue, and its KV cache is freed at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "core/timer.h"
#include "engine/generator.h"
#include "engine/prefix_cache.h"
#include "engine/sequence.h"
#include "guard/guard.h"
#include "server/metrics.h"
#include "server/openai_api.h"

namespace coda {

// A request that could not finish before the server stopped (the drain's --shutdown-timeout ran
// out): the error its ticket ends with, which the API answers as 503 with Retry-After.
inline constexpr const char* kShutdownMessage =
    "The server is shutting down and could not finish this request in time; retry it (on another replica if there "
    "is one)";

class Ticket {
 public:
  // `alive`: a count of the tickets in existence, which this one is part of until it is destroyed
  // (the drain waits for it: a ticket lives as long as its HTTP answer is being written).
  explicit Ticket(ApiRequest r, std::shared_ptr<std::atomic<int64_t>> alive = nullptr)
      : request(std::move(r)), alive_(std::move(alive)) {
    if (alive_) ++*alive_;
  }
  ~Ticket() {
    if (alive_) --*alive_;
  }
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;
  const ApiRequest request;
  Timer since_arrival;
  std::atomic<bool> cancelled{false};

  // Set when the request is admitted (its prompt is known); 0 before.
  std::atomic<int64_t> prompt_tokens{0};

  // Worker side. `tokens`: the completion tokens final so far (StreamChunk::tokens).
  void push(std::string text, std::vector<TokenLogprob> logprobs = {}, int64_t tokens = 0);
  void finish(Expected<GuardedResult> result);
  // HTTP side: waits up to `timeout` for text or the end; returns false when nothing came.
  // `logprobs` gets the logprobs that came with the text (when requested).
  bool wait(std::string& text, std::vector<TokenLogprob>& logprobs, bool& done, std::chrono::milliseconds timeout);
  // The completion tokens behind the text that wait() has handed out so far.
  int64_t tokens_waited() const { return tokens_waited_; }
  // Waits for the end and returns the result.
  const Expected<GuardedResult>& result();
  // Waits up to `timeout` for the end; true when it has come (then result() does not block).
  bool wait_result(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  std::vector<TokenLogprob> logprobs_;
  int64_t tokens_ = 0;         // guarded by mu_
  int64_t tokens_waited_ = 0;  // the HTTP side's own copy, taken in wait()
  std::optional<Expected<GuardedResult>> result_;
  std::shared_ptr<std::atomic<int64_t>> alive_;
};

struct SchedulerOptions {
  size_t max_queue = 64;               // waiting requests beyond this are refused (429)
  size_t max_batch = 8;                // sequences generated together
  int64_t kv_budget_tokens = 1 << 20;  // sum of the running sequences' KV capacities
  int64_t prefill_chunk = 64;          // prompt tokens per sequence per step
  // Positions of finished requests' caches kept for prompts that start the same way (0: off). The
  // cache lives inside kv_budget_tokens: admitting a request evicts cached prefixes first.
  int64_t prefix_cache_tokens = 0;
};

// A batch slot as GET /slots shows it (llama-server's monitoring route), with the guard's live
// report on the generation in it. The worker copies these at the end of a step (when a reader
// asks, or the batch changed), so a reader never touches a sequence that is running.
struct SlotState {
  int slot = 0;             // 0 .. max_batch - 1, kept by a request from admission to its end
  int64_t task = 0;         // the request's number, counted from 1 in order of admission
  bool prefilling = false;  // the prompt is still running
  int64_t n_ctx = 0;        // the sequence's KV capacity: prompt + max_tokens
  int64_t n_prompt_tokens = 0, n_prompt_tokens_processed = 0, n_prompt_tokens_cached = 0;
  int64_t n_decoded = 0, n_remain = 0;
  double seconds = 0;  // since the request arrived
  SamplingParams sampling;
  GuardReport guard;
};

class Scheduler {
 public:
  Scheduler(Generator& gen, Metrics& metrics, SchedulerOptions opts);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request; null when the queue is full.
  std::shared_ptr<Ticket> submit(ApiRequest request);
  size_t waiting() const;
  size_t running() const { return running_.load(); }
  // Holds the batch between steps: nothing is admitted and no forward pass runs until resume();
  // queued requests stay queued (and the queue bound still answers 429). Operators use it to drain
  // or to inspect a loaded server; tests use it to build an exact queue and batch without racing
  // the worker.
  void pause();
  void resume();
  bool paused() const;
  // The running requests by slot, as of the end of a recent step (see scheduler.cpp).
  std::vector<SlotState> slots() const;
  // Requests not yet answered in full: queued, running, or with their answer still being written.
  int64_t tickets_alive() const { return alive_->load(); }
  // Ends every queued and running request with kShutdownMessage at once (the drain's time is up);
  // later submissions are refused. Returns without waiting for the worker to act.
  void abort_all();

 private:
  struct Active {
    std::shared_ptr<Ticket> ticket;
    std::unique_ptr<Guard> guard;
    std::unique_ptr<Sequence> seq;
    int slot = 0;
    int64_t task = 0;
  };
  void publish_slots(const std::vector<Active>& active, bool wanted);
  void work();
  void pop_waiting();
  void drop_cancelled_waiting();
  bool admit(std::vector<Active>& active, int64_t& kv_used);
  void step(std::vector<Active>& active);
  void complete(Active& a);

  Generator& gen_;
  Metrics& metrics_;
  SchedulerOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Ticket>> queue_;
  bool stop_ = false;
  bool paused_ = false;
  bool abort_ = false;  // abort_all() asked; the worker ends everything at its next turn
  std::shared_ptr<std::atomic<int64_t>> alive_ = std::make_shared<std::atomic<int64_t>>(0);
  std::atomic<size_t> running_{0};
  std::vector<SlotState> slots_;  // guarded by mu_
  uint64_t slots_version_ = 0;    // guarded by mu_: bumped each time slots_ is taken
  mutable std::atomic<bool> slots_wanted_{false};  // a reader waits for a fresh slots_
  mutable std::condition_variable slots_cv_;
  int64_t tasks_ = 0;  // scheduler thread only
  ForwardBuffers buf_;
  std::unique_ptr<PrefixCache> prefix_;  // scheduler thread only
  std::thread worker_;  // last: starts once everything above is built
};

}  // namespace coda
